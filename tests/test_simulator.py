"""The simulator over plain HTTP: routes, usage from real sizes, playbook validation, determinism."""

from __future__ import annotations

import copy
import http.client
import json
from dataclasses import replace

import pytest
import yaml

from skillevo.files.schemas import InvalidDocument
from skillevo.simulator import Simulator, agent, load_dir, playbook
from skillevo.simulator.conversation import parse
from tests.bench_fixtures import ROOT
from tests.conftest import PLAYBOOK, PROMPT, SKILL


def _post(sim: Simulator, path: str, body: dict, key: str | None = "k") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=10)
    headers = {"content-type": "application/json", **({"x-api-key": key} if key else {})}
    conn.request("POST", path, body=json.dumps(body), headers=headers)
    r = conn.getresponse()
    return r.status, r.read()


def _first_request(prompt: str = PROMPT) -> dict:
    return {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>\n - Primary working directory: /work\n</system-reminder>"},
        {"type": "text", "text": prompt}]}]}


def test_non_streaming_reply_invokes_the_requested_skill(book):
    with Simulator(book, api_key="k") as sim:
        status, data = _post(sim, "/v1/messages", _first_request())
    msg = json.loads(data)
    assert status == 200 and msg["stop_reason"] == "tool_use"
    assert msg["content"][0]["name"] == "Skill" and msg["content"][0]["input"] == {"skill": "work"}


def test_usage_grows_with_request_size_and_replies_are_deterministic(book):
    small, big = _first_request(), _first_request(PROMPT + " " + "padding " * 500)
    with Simulator(book, api_key="k") as sim:
        a1, a2, b = (json.loads(_post(sim, "/v1/messages", r)[1]) for r in (small, small, big))
        _, counted = _post(sim, "/v1/messages/count_tokens", big)
    assert a1 == a2
    assert b["usage"]["input_tokens"] > a1["usage"]["input_tokens"]
    assert json.loads(counted)["input_tokens"] == b["usage"]["input_tokens"]


def test_streaming_reply_is_server_sent_events(book):
    with Simulator(book, api_key="k") as sim:
        status, data = _post(sim, "/v1/messages", {**_first_request(), "stream": True})
    kinds = [line.split(": ", 1)[1] for line in data.decode().splitlines() if line.startswith("event: ")]
    assert status == 200
    assert kinds == ["message_start", "content_block_start", "content_block_delta", "content_block_stop",
                     "message_delta", "message_stop"]


def test_auth_routes_and_modes(book):
    with Simulator(book, api_key="k") as sim:
        assert _post(sim, "/v1/messages", _first_request(), key="wrong")[0] == 401
        assert _post(sim, "/v1/other", _first_request())[0] == 404
        assert _post(sim, "/mode/bogus/v1/messages", _first_request())[0] == 400
        assert _post(sim, "/mode/overloaded/v1/messages", _first_request())[0] == 529
        assert _post(sim, "/mode/server-error/v1/messages", _first_request())[0] == 500
        with pytest.raises(ValueError, match="unknown simulator mode"):
            sim.url("bogus")


def test_skill_text_steers_the_steps(book):
    task = book.task_for(PROMPT)
    plain = book.steps(task, "work", SKILL)
    wasteful = book.steps(task, "work", SKILL + "Read every module of the package before editing.")
    assert len(wasteful) == len(plain) + 1
    assert len(book.steps(task, "work", "")) == len(plain) - 1  # the necessary check is gone too


def test_conversation_reads_loaded_skill_text():
    body = _first_request()
    body["messages"] += [
        {"role": "assistant",
         "content": [{"type": "tool_use", "id": "t1", "name": "Skill", "input": {"skill": "work"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "Launching skill: work"},
                                     {"type": "text",
                                      "text": "Base directory for this skill: /work/.claude/skills/work\n\nBODY"}]},
    ]
    conv = parse(body)
    assert (conv.turns == 1 and conv.cwd == "/work" and conv.skills == {"work": "BODY"}
            and conv.requested_skill == "work")


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(schema_version=2), "schema_version"),
    (lambda d: d["tasks"][0]["sessions"]["work"].append({"bash": "x", "read": "y"}), "sessions"),
    (lambda d: d["tasks"][0]["sessions"]["work"].append({"when": "nope", "bash": "x"}), "unknown instruction 'nope'"),
    (lambda d: d["tasks"].append(copy.deepcopy(d["tasks"][0])), "defined twice"),
    (lambda d: d["tasks"][0]["sessions"]["work"].append({"read": "../etc/passwd"}), "read"),
    (lambda d: d.update(extra=1), "Additional properties"),
    (lambda d: d["tasks"][0]["sessions"]["work"].append({"mistake": "sometimes", "bash": "x"}), "sessions"),
])
def test_bad_playbooks_are_refused_with_the_rule(mutate, message):
    doc = copy.deepcopy(PLAYBOOK)
    mutate(doc)
    with pytest.raises(InvalidDocument, match=message):
        playbook.parse(doc, "bad.yaml")


# --- an auto session: the skill descriptions the CLI lists decide which skill the agent loads, if any ---------------

DEMO = load_dir(ROOT / "tasks/playbooks")
WORK_DESCRIPTION = yaml.safe_load((ROOT / "skills/work/SKILL.md").read_text().split("---")[1])["description"]
PLAN_DESCRIPTION = yaml.safe_load((ROOT / "skills/plan/SKILL.md").read_text().split("---")[1])["description"]
BUNDLED = ("- simplify: Review the changed code for reuse, simplification, efficiency, and altitude cleanups, then "
           "apply the fixes.\n- run: Launch and drive this project's app to see a change working. Use when asked to "
           "run, start, or screenshot the app, or to confirm a change works\nin the real app (not just tests).")


def _auto_request(task_id: str, listing: dict[str, str]) -> dict:
    """A first request as the CLI sends it for an auto session: the skill listing reminder (the project's skills,
    then bundled ones), then the task's prompt with the auto template and no skill named."""
    task = next(t for t in yaml.safe_load((ROOT / "tasks/tasks.yaml").read_text())["tasks"] if t["id"] == task_id)
    entries = "".join(f"- {name}: {text}\n" for name, text in listing.items())
    body = _first_request(f"{task['prompt']}\nRun the verification in the foreground before you finish.")
    body["messages"][0]["content"].insert(0, {"type": "text", "text": "<system-reminder>\nThe following skills are "
                                              "available for use with the Skill tool:\n\n"
                                              f"{entries}{BUNDLED}\n</system-reminder>"})
    return body


def test_conversation_reads_the_skill_listing_with_multi_line_descriptions():
    conv = parse(_auto_request("ledger-currencies", {"work": WORK_DESCRIPTION}))
    assert list(conv.listed) == ["work", "simplify", "run"]
    assert (conv.listed["work"] == WORK_DESCRIPTION
            and conv.listed["run"].endswith("works in the real app (not just tests)."))
    assert conv.requested_skill is None and "euros and pounds" in conv.prompt


@pytest.mark.parametrize("task_id", ["textstats-unique-words", "textstats-sentence-length", "ledger-currencies",
                                     "ledger-discount-tax"])
def test_the_description_decides_which_skill_an_auto_session_loads(task_id):
    family = {"plan": PLAN_DESCRIPTION, "work": WORK_DESCRIPTION}
    reply = agent.normal(parse(_auto_request(task_id, family)), DEMO)
    assert reply.tool == ("Skill", {"skill": "work"})  # the coding task matches work's description, not plan's
    # the same family with work's description about something else: no skill reaches the threshold
    damaged = {**family, "work": "Summarise meeting notes and draft the weekly status e-mail."}
    conv = parse(_auto_request(task_id, damaged))
    assert agent.choose(conv, DEMO.task_for(conv.prompt)) is None
    reply = agent.normal(conv, DEMO)
    assert reply.tool is not None and reply.tool[0] != "Skill"  # it goes straight to the unskilled work steps
    # no skill of the family at all (a baseline): only bundled skills are listed, and the agent knows no steps for them
    assert agent.normal(parse(_auto_request(task_id, {})), DEMO) == reply


def test_an_agent_without_a_skill_plays_the_unskilled_steps_without_skill_text():
    conv = parse(_auto_request("ledger-discount-tax", {"work": "Summarise meeting notes."}))
    task = DEMO.task_for(conv.prompt)
    steps = DEMO.steps(task, "work", "")  # neither survey nor edge-case handling
    assert task.unskilled == "work"
    assert [agent.normal(replace(conv, turns=n), DEMO).tool for n in range(2)] == [
        ("Read", {"file_path": f"/work/{steps[n].arg}"}) for n in range(2)]
    assert len(steps) < len(DEMO.steps(task, "work", (ROOT / "skills/work/SKILL.md").read_text()))


def test_relevance_counts_shared_terms_after_stop_words_and_a_crude_stem():
    assert agent.terms("Fixes the failing tests; coding passes") == {"fix", "fail", "test", "cod", "pass"}
    assert agent.relevance("Add tests for the code", "Write code and tests.") == 2
    assert agent.relevance("Add tests", "Summarise meeting notes.") == 0


def test_a_playbook_unskilled_session_must_exist():
    doc = copy.deepcopy(PLAYBOOK)
    doc["unskilled"] = "plan"
    with pytest.raises(InvalidDocument, match="has no session 'plan', which `unskilled` names"):
        playbook.parse(doc, "bad.yaml")
