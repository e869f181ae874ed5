"""Strict stream parsing and transcript binding, on hand-written streams."""

from __future__ import annotations

import json

import pytest

from skillevo.agent import stream, transcript
from skillevo.core.results import ArtifactMismatch, read_artifact

USAGE = {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def _events(*, result: dict | None = None, extra: list | None = None, skill_ok: bool = True) -> list[dict]:
    res = {"type": "result", "subtype": "success", "is_error": False, "num_turns": 2, "duration_ms": 1500,
           "total_cost_usd": 0.0123, "usage": USAGE, "session_id": "s-1"}
    res.update(result or {})
    return [
        {"type": "system", "subtype": "init", "session_id": "s-1"},
        {"type": "assistant",
         "message": {"content": [{"type": "tool_use", "id": "t1", "name": "Skill", "input": {"skill": "work"}}]}},
        {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": not skill_ok,
                                                  "content": "ok"}]}},
        *(extra or []),
        res,
    ]


def _raw(events: list[dict]) -> bytes:
    return "\n".join(json.dumps(e) for e in events).encode()


def test_well_formed_stream_yields_measurements():
    p = stream.parse(_raw(_events()))
    assert p.cost_usd == 0.0123 and p.num_turns == 2 and p.duration_s == 1.5 and p.session_id == "s-1"
    assert p.usage == USAGE and p.tool_uses == {"Skill": 1} and p.succeeded
    assert p.skill_invoked("work") and not p.skill_invoked("plan")


def test_failed_skill_result_is_not_evidence():
    assert not stream.parse(_raw(_events(skill_ok=False))).skill_invoked("work")


@pytest.mark.parametrize("cost", [None, -1, True, "0.1"])
def test_missing_or_bogus_cost_is_unmeasured_not_zero(cost):
    events = _events()
    if cost is None:
        del events[-1]["total_cost_usd"]
    else:
        events[-1]["total_cost_usd"] = cost
    assert stream.parse(_raw(events)).cost_usd is None


@pytest.mark.parametrize("raw, message", [
    (b"not json\n", "not JSON"),
    (b"[1, 2]\n", "JSON object"),
    (b"\xff\xfe\n", "UTF-8"),
    (_raw(_events()[:-1]), "exactly one result"),
    (_raw(_events() + [_events()[-1]]), "exactly one result"),
    (_raw(_events() + [{"type": "assistant", "message": {}}]), "after the result"),
    (_raw(_events(result={"usage": {"input_tokens": 1}})), "usage lacks"),
    (_raw(_events(result={"session_id": ""})), "session_id"),
    (_raw(_events(result={"num_turns": -1})), "num_turns"),
    (b'{"type": "result", "total_cost_usd": NaN}\n', "non-finite"),
    (_raw(_events(extra=[{"type": "assistant",
                          "message": {"content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]}}])),
     "duplicate"),
])
def test_malformed_streams_are_rejected(raw, message):
    with pytest.raises(stream.StreamError, match=message):
        stream.parse(raw)


def test_system_events_after_result_are_allowed():
    assert stream.parse(_raw(_events() + [{"type": "system", "subtype": "task_done"}])).succeeded


def test_transcript_is_redacted_canonical_and_bound(tmp_path):
    events = _events(extra=[{"type": "user", "message": {"content": [
        {"type": "text", "text": "key sk-ant-api03-abcdefghijkl and literal LIT-SECRET-1"}]}}])
    data = transcript.render(events, ("LIT-SECRET-1",))
    assert b"sk-ant-api03" not in data and b"LIT-SECRET-1" not in data and b"[REDACTED]" in data
    assert data == transcript.render(list(events), ("LIT-SECRET-1",))  # canonical: same events, same bytes
    meta = transcript.write(data, tmp_path, "t.jsonl")
    assert read_artifact(meta, tmp_path) == data
    with pytest.raises(FileExistsError):
        transcript.write(data, tmp_path, "t.jsonl")


def test_transcript_whose_digest_does_not_match_is_refused(tmp_path):
    meta = transcript.write(b'{"type":"result"}\n', tmp_path, "t.jsonl")
    (tmp_path / "t.jsonl").chmod(0o600)
    (tmp_path / "t.jsonl").write_bytes(b'{"type":"result","x":1}\n')
    with pytest.raises(ArtifactMismatch, match="does not match its row"):
        read_artifact(meta, tmp_path)
    with pytest.raises(ArtifactMismatch, match="does not match"):
        read_artifact({**meta, "bytes": meta["bytes"] + 1}, tmp_path)


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\x85"])
def test_line_breaks_other_than_newline_inside_a_string_do_not_cut_a_line(char):
    """JSON.stringify writes U+2028, U+2029 and U+0085 raw inside strings, so a tool result carrying one reaches the
    stream unescaped; str.splitlines() cut the line there, and an agent could make its own stream unreadable."""
    text = f"before{char}after\x0b\x0c\x1c\r"  # control characters arrive escaped, as JSON requires
    events = _events(extra=[{"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": text}]}}])
    raw = "\n".join(json.dumps(e, ensure_ascii=False) for e in events).encode()
    assert char.encode() in raw and len(raw.decode().splitlines()) == len(events) + 1  # what splitlines() saw
    parsed = stream.parse(raw)
    assert parsed.succeeded and parsed.events[3]["message"]["content"][0]["content"] == text
    assert [e["type"] for e in stream.partial(raw)] == ["system", "assistant", "user", "user"]


def test_a_line_nested_too_deep_is_a_stream_error_not_a_crash():
    deep = '{"type": "assistant", "message": ' + "[" * 100_000 + "]" * 100_000 + "}"
    raw = _raw(_events()[:2]) + b"\n" + deep.encode() + b"\n" + _raw(_events()[2:])
    with pytest.raises(stream.StreamError, match="line 3 is nested too deep"):
        stream.parse(raw)
    assert [e["type"] for e in stream.partial(raw)] == ["system", "assistant", "user"]  # and no result: see below


def test_partial_drops_result_events_so_the_harness_account_is_the_only_one():
    """A stream refused for two results (or a cut one) must not leave a CLI result beside the stopped event: the
    stored transcript holds exactly one account (results.transcript_totals)."""
    raw = _raw(_events() + [_events()[-1]]) + b'\n{"type": "skillevo_stopped", "usage": {}}\n{"type": "assis'
    assert [e["type"] for e in stream.partial(raw)] == ["system", "assistant", "user"]
