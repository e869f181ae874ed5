"""Noise end to end with the real CLI: a cell repeats exactly, runs differ, caching is billed, rows match their
transcripts, an overload is retried, a skipped skill is measured as such."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from skillevo.agent import SessionSpec, run_session
from skillevo.bench import plan, run_side
from skillevo.core.results import load_side, read_artifact
from skillevo.simulator import Simulator, demo
from skillevo.simulator.noise import NONE, Noise, route
from tests.bench_fixtures import ROOT, params
from tests.conftest import make_workspace, session_processes

pytestmark = [pytest.mark.cli, pytest.mark.bwrap]
SEED = 11
MEASURED = ("cost_usd", "input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
            "num_turns", "tool_uses", "error_kind", "resolved", "skill_invoked", "diff_files")


def _side(out: Path, replicate: int = 0) -> list[dict]:
    p = params(runs=3, workers=4, simulator={"noise": "realistic", "seed": SEED}, sampling={"replicate": replicate})
    side = plan("incumbent", ROOT / "tasks/tasks.yaml", ROOT / "skills", None, p)
    side.tasks = [t for t in side.tasks if t.id in ("textstats-unique-words", "ledger-discount-tax")]
    side.arms = [a for a in side.arms if a.name == "auto"]
    return run_side(side, p, out, quiet=True)


def _measured(rows: list[dict]) -> dict[tuple, dict]:
    return {(r["task"], r["arm"], r["run"]): {f: r[f] for f in MEASURED} | {"patch": (r["patch"] or {}).get("sha256")}
            for r in rows}


def test_realistic_noise_repeats_a_cell_exactly_and_varies_between_runs(tmp_path):
    first, again, replicate = _side(tmp_path / "a"), _side(tmp_path / "b"), _side(tmp_path / "r", replicate=1)
    assert _measured(first) == _measured(again)  # the same cell identity: the same session, to the token
    for task in ("textstats-unique-words", "ledger-discount-tax"):
        costs = [r["cost_usd"] for r in first if r["task"] == task]
        assert len(set(costs)) == 3, costs  # three runs of one cell: three different costs
    assert sum(a["cost_usd"] != b["cost_usd"] for a, b in zip(first, replicate, strict=True)) >= 5  # a fresh replicate
    for row in first:
        assert row["cache_read_input_tokens"] > row["cache_creation_input_tokens"] > row["input_tokens"] > 0
    side = load_side(tmp_path / "a", "incumbent")  # what the gate reads: every row's numbers are its transcripts'
    assert [r["cost_usd"] for r in side.rows] == [r["cost_usd"] for r in first]
    bench = json.loads((tmp_path / "r/bench.json").read_text())
    assert bench["simulator"] == {"noise": "realistic", "seed": SEED} and bench["replicate"] == 1
    assert f"`realistic` noise, seed {SEED}; replicate 1" in (tmp_path / "r/report.md").read_text()
    assert not session_processes()


def _spec(ws: Path, tmp: Path, url: str, retries: int) -> SessionSpec:
    return SessionSpec(prompt=demo.PROMPT, workspace=ws, model=demo.MODEL, endpoint=url, expected_skill="work",
                       transcript_dir=tmp / "transcripts", transcript_name="s", timeout_s=90, max_retries=retries)


def test_an_overload_is_retried_and_the_session_still_resolves(book, tmp_path):
    always = Noise(dataclasses.replace(NONE, overload_rate=1.0))
    ws = make_workspace(tmp_path)
    with Simulator(book, noise=always, max_retries=1) as sim:
        record = run_session(_spec(ws, tmp_path, sim.url(cell=route("greet", "direct", 1, 1)), retries=1))
        refused = sim.overloads
    assert record["ok"], record
    assert (ws / "pkg/greet.py").read_text() == 'def greet():\n    return "hello"\n'
    events = [json.loads(line) for line in read_artifact(record["transcript"], tmp_path / "transcripts").splitlines()]
    retries = [e for e in events if e.get("subtype") == "api_retry"]
    assert refused == len(retries) >= record["num_turns"] - 1  # every request refused once, then answered
    assert {e["error_status"] for e in retries} == {529}
    assert not session_processes()


def test_a_skipped_skill_is_measured_as_skill_not_invoked(book, tmp_path):
    skipping = Noise(dataclasses.replace(NONE, skip_skill_rate=1.0))
    ws = make_workspace(tmp_path)
    with Simulator(book, noise=skipping) as sim:
        record = run_session(_spec(ws, tmp_path, sim.url(cell=route("greet", "direct", 1, 1)), retries=0))
    assert record["error_kind"] == "skill-not-invoked" and record["skill_invoked"] is False
    assert "Skill" not in record["tool_uses"]
    assert (ws / "pkg/greet.py").read_text() == 'def greet():\n    return "hello"\n'  # it went ahead anyway
