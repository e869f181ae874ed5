"""One real CLI session in a real bwrap sandbox against the simulator: the measured record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillevo import sandbox
from skillevo.agent import SessionSpec, run_session
from skillevo.core import models
from skillevo.core.models import API_KEY_ENV, Credential
from skillevo.core.results import read_artifact
from skillevo.files.schemas import validate
from skillevo.simulator import Simulator, demo
from tests.conftest import PLANTED_KEY, PROMPT, SKILL, make_workspace, session_processes

pytestmark = [pytest.mark.cli, pytest.mark.bwrap]


def _spec(ws: Path, tmp: Path, url: str, name: str = "s", **kw) -> SessionSpec:
    return SessionSpec(prompt=PROMPT, workspace=ws, model=demo.MODEL, endpoint=url,
                       credential=Credential(API_KEY_ENV, PLANTED_KEY),
                       transcript_dir=tmp / "transcripts", transcript_name=name, expected_skill="work",
                       timeout_s=kw.pop("timeout_s", 90), max_retries=0, **kw)


def _prompt_tokens(record: dict) -> int:
    """Every input token the session sent, cached or not."""
    return record["input_tokens"] + record["cache_creation_input_tokens"] + record["cache_read_input_tokens"]


def _result_event(record: dict, tmp: Path) -> dict:
    data = read_artifact(record["transcript"], tmp / "transcripts")
    return [json.loads(line) for line in data.splitlines() if json.loads(line)["type"] == "result"][0]


def test_session_invokes_skill_edits_and_measures(book, workspace, tmp_path):
    with Simulator(book, api_key=PLANTED_KEY) as sim:
        record = run_session(_spec(workspace, tmp_path, sim.url()))
    assert record["ok"], record
    validate(record, "session-record.schema.json", "record")
    assert record["error_kind"] is None
    assert record["skill_invoked"] is True
    assert record["num_turns"] >= 3
    assert record["tool_uses"]["Skill"] == 1 and record["tool_uses"]["Edit"] == 1 and record["tool_uses"]["Bash"] == 1
    assert (workspace / "pkg/greet.py").read_text() == 'def greet():\n    return "hello"\n'
    result = _result_event(record, tmp_path)
    assert record["cost_usd"] == result["total_cost_usd"] and record["cost_usd"] > 0
    assert record["input_tokens"] == result["usage"]["input_tokens"] > 0
    assert record["session_id"] == result["session_id"]
    usage = {f: record[f] for f in ("input_tokens", "output_tokens", "cache_creation_input_tokens",
                                    "cache_read_input_tokens")}
    assert models.price(usage, record["model"]) == round(record["cost_usd"], 6)  # the pinned prices are the CLI's own
    assert record["cache_read_input_tokens"] > record["cache_creation_input_tokens"] > record["input_tokens"]
    assert not session_processes()


def test_longer_skill_costs_more_input_tokens(book, tmp_path):
    records = []
    with Simulator(book, api_key=PLANTED_KEY) as sim:
        for n, text in enumerate([SKILL, SKILL + "\n## Background\n" + "Keep the code tidy and readable.\n" * 60]):
            ws = make_workspace(tmp_path / str(n), text)
            records.append(run_session(_spec(ws, tmp_path, sim.url(), name=f"len{n}")))
    short, long = records
    assert short["ok"] and long["ok"]
    assert short["num_turns"] == long["num_turns"]
    assert _prompt_tokens(long) > _prompt_tokens(short)
    assert long["cost_usd"] > short["cost_usd"]


def test_skill_instruction_adds_steps_at_real_cost(book, tmp_path):
    wasteful = SKILL + "Always read every module of the package before editing.\n"
    with Simulator(book, api_key=PLANTED_KEY) as sim:
        plain = run_session(_spec(make_workspace(tmp_path / "a"), tmp_path, sim.url(), name="a"))
        survey = run_session(_spec(make_workspace(tmp_path / "b", wasteful), tmp_path, sim.url(), name="b"))
    assert survey["tool_uses"]["Bash"] == plain["tool_uses"]["Bash"] + 1
    assert survey["num_turns"] == plain["num_turns"] + 1
    assert survey["cost_usd"] > plain["cost_usd"]


@pytest.mark.parametrize("mode, kind", [
    ("overloaded", "session-error"),
    ("server-error", "session-error"),
    ("truncated", "session-error"),
    ("hang", "session-error"),
    ("no-skill", "skill-not-invoked"),
])
def test_fault_modes_yield_their_error_kind_and_leave_no_process(book, workspace, tmp_path, mode, kind):
    with Simulator(book, api_key=PLANTED_KEY) as sim:
        record = run_session(_spec(workspace, tmp_path, sim.url(mode), timeout_s=10 if mode == "hang" else 60))
    assert record["ok"] is False
    assert record["error_kind"] == kind, record
    validate(record, "session-record.schema.json", "record")
    if mode == "hang":
        assert record["process_state"] == "timeout"
    if mode == "no-skill":
        assert record["skill_invoked"] is False
    assert PLANTED_KEY not in json.dumps(record)
    assert not session_processes()


def test_wrong_credential_is_refused_upstream(book, workspace, tmp_path):
    """The simulator checks the key: sessions succeed only because the relay injects the real one."""
    with Simulator(book, api_key="sk-ant-some-other-key-000000") as sim:
        record = run_session(_spec(workspace, tmp_path, sim.url()))
    assert record["error_kind"] == "session-error"
    assert "401" in record["error_detail"] or "authentication" in record["error_detail"].lower()


def test_a_cli_error_result_without_an_api_failure_is_a_measured_failure(book, workspace, tmp_path):
    """Max turns: every answer of the endpoint was good, so the failure is the session's own, at the CLI's cost."""
    with Simulator(book, api_key=PLANTED_KEY) as sim:
        record = run_session(_spec(workspace, tmp_path, sim.url(), max_turns=2))
    validate(record, "session-record.schema.json", "record")
    assert record["error_kind"] == "session-failed", record["error_detail"]
    assert "error_max_turns" in record["error_detail"] and "no failed answer" in record["error_detail"]
    assert record["cost_usd"] == _result_event(record, tmp_path)["total_cost_usd"] > 0


@pytest.mark.parametrize("mode", ["overloaded", "hang"])
def test_an_api_fault_is_excluded_but_keeps_what_it_spent(book, workspace, tmp_path, mode):
    """The relay saw the endpoint fail (the last answer, or a request left unanswered): excluded, and the
    transcript still says what the session cost, so the side's total counts it."""
    with Simulator(book, api_key=PLANTED_KEY) as sim:
        record = run_session(_spec(workspace, tmp_path, sim.url(mode), timeout_s=10 if mode == "hang" else 60))
    assert record["error_kind"] == "session-error"
    assert ("HTTP 529" if mode == "overloaded" else "had not answered") in record["error_detail"]
    data = read_artifact(record["transcript"], tmp_path / "transcripts")
    accounts = [e for e in map(json.loads, data.splitlines()) if e["type"] in ("result", "skillevo_stopped")]
    assert len(accounts) == 1 and accounts[0]["total_cost_usd"] == record["cost_usd"] is not None


@pytest.mark.parametrize("after_agent, kind", [(False, "infra-error"), (True, "session-failed")])
def test_a_sandbox_that_will_not_start_is_the_hosts_fault_only_before_any_agent_ran(
        book, workspace, tmp_path, monkeypatch, after_agent, kind):
    """A spawn failure is simulated (the real errno from Popen): in a cell's first session nothing of an agent has
    run; in a later one the previous agent ran on this host and may have exhausted what a start needs."""
    def cannot_spawn(spec, argv, **kwargs):
        return sandbox.Finished("spawn-failure", None, b"", False, b"[Errno 11] Resource temporarily unavailable", 0.0)

    monkeypatch.setattr(sandbox, "run", cannot_spawn)
    with Simulator(book, api_key=PLANTED_KEY) as sim:
        record = run_session(_spec(workspace, tmp_path, sim.url(), after_agent=after_agent))
    validate(record, "session-record.schema.json", "record")
    assert record["error_kind"] == kind and "Resource temporarily unavailable" in record["error_detail"]
    if after_agent:  # measured: a transcript with the relay's count (nothing), so the row's cost stays measured
        assert record["cost_usd"] == 0.0 and record["transcript"] is not None
    else:
        assert record["transcript"] is None
