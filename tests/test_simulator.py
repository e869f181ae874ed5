"""The simulator over plain HTTP: routes, usage from real sizes, playbook validation, determinism."""

from __future__ import annotations

import copy
import http.client
import json

import pytest

from skillevo.schemas import InvalidDocument
from skillevo.simulator import Simulator, playbook
from skillevo.simulator.conversation import parse
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
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Skill", "input": {"skill": "work"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "Launching skill: work"},
                                     {"type": "text", "text": "Base directory for this skill: /work/.claude/skills/work\n\nBODY"}]},
    ]
    conv = parse(body)
    assert conv.turns == 1 and conv.cwd == "/work" and conv.skills == {"work": "BODY"} and conv.requested_skill == "work"


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
