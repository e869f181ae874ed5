"""The simulator's model-latency profile against the real server over loopback: replies wait as stated, the
wait is never billed, and sessions wait side by side rather than in turn.

Timing checks assert lower bounds (a reply can only be late on a loaded machine, never early); where an upper
bound is needed (overlap), the margin is a whole TTFT.
"""

from __future__ import annotations

import http.client
import json
import threading
import time

import pytest

from skillevo.agent import SessionSpec, run_session
from skillevo.simulator import Simulator, demo
from skillevo.simulator.agent import Reply
from skillevo.simulator.latency import PROFILES, Latency
from tests.conftest import PROMPT, make_workspace, session_processes

USAGE = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def _request(prompt: str = PROMPT, stream: bool = False) -> dict:
    return {"model": demo.MODEL, "max_tokens": 100, "stream": stream, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>\n - Primary working directory: /work\n</system-reminder>"},
        {"type": "text", "text": prompt}]}]}


PROSE = "A reply long enough to be paced: " + "every token of it is billed, none of the waiting. " * 16
TOOL = ("Bash", {"command": "printf '%s\\n' " + "'a quoted \\\"argument\\\"' " * 12, "description": "run it"})
RESPONDERS = {"prose": lambda conv, body: Reply(text=PROSE),
              "narrated": lambda conv, body: Reply(text=PROSE, tool=TOOL)}  # fixed replies, any length we need


def _post(sim: Simulator, body: dict, mode: str = "normal") -> tuple[float, float | None, bytes]:
    """(seconds to the whole reply, seconds to the first content delta or None, the reply's bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=60)
    start = time.monotonic()
    path = "/v1/messages" if mode == "normal" else f"/mode/{mode}/v1/messages"
    conn.request("POST", path, body=json.dumps(body), headers={"content-type": "application/json"})
    response = conn.getresponse()
    first, data = None, bytearray()
    while line := response.readline():
        if first is None and line.startswith(b"event: content_block_delta"):
            first = time.monotonic() - start
        data += line
    conn.close()
    return time.monotonic() - start, first, bytes(data)


def _events(data: bytes) -> list[dict]:
    return [json.loads(line[6:]) for line in data.splitlines() if line.startswith(b"data: ")]


def _assemble(events: list[dict]) -> dict:
    """The message a client rebuilds from the stream, as the SDK does."""
    message = dict(events[0]["message"])
    blocks: list[dict] = []
    for e in events[1:]:
        if e["type"] == "content_block_start":
            blocks.append({**e["content_block"], "_json": ""})
        elif e["type"] == "content_block_delta":
            delta = e["delta"]
            if delta["type"] == "text_delta":
                blocks[e["index"]]["text"] += delta["text"]
            else:
                blocks[e["index"]]["_json"] += delta["partial_json"]
        elif e["type"] == "message_delta":
            message.update(stop_reason=e["delta"]["stop_reason"])
            message["usage"] = {**message["usage"], **e["usage"]}
    for block in blocks:
        raw = block.pop("_json")
        if block["type"] == "tool_use":
            block["input"] = json.loads(raw)
    return {**message, "content": blocks}


def test_profiles_are_checked_and_the_jitter_is_a_fixed_draw():
    with pytest.raises(ValueError, match="ttft_s"):
        Latency("bad", ttft_s=-1, output_tokens_per_s=10)
    with pytest.raises(ValueError, match="output_tokens_per_s"):
        Latency("bad", ttft_s=1, output_tokens_per_s=0)
    with pytest.raises(ValueError, match="jitter_sigma"):
        Latency("bad", ttft_s=1, output_tokens_per_s=10, jitter_sigma=float("nan"))
    exact = Latency("exact", ttft_s=0.5, output_tokens_per_s=100)
    assert exact.pace("a" * 32, 3, 250) == (0.5, 2.5)
    jittered = Latency("j", ttft_s=1.0, output_tokens_per_s=100, jitter_sigma=0.3, seed=7)
    draws = [jittered.pace(f"{k:032x}", r, 100) for k in range(20) for r in range(1, 6)]
    assert jittered.pace(f"{3:032x}", 2, 100) == draws[3 * 5 + 1]  # the same request waits the same
    assert len({d[0] for d in draws}) == len(draws)  # and different requests do not
    for ttft, generate in draws:
        assert ttft > 0 and generate / ttft == pytest.approx(1.0)  # one factor slows both
    assert Latency("j", 1.0, 100, 0.3, seed=8).pace(f"{3:032x}", 2, 100) != draws[3 * 5 + 1]
    for profile in PROFILES.values():
        assert profile.ttft_s > 0 and profile.output_tokens_per_s > 0


def test_a_streamed_reply_waits_its_ttft_then_streams_at_the_rate(book):
    profile = Latency("test", ttft_s=0.3, output_tokens_per_s=500)
    body = _request(stream=True)
    with Simulator(book, responders=RESPONDERS) as fast, \
            Simulator(book, responders=RESPONDERS, latency=profile) as slow:
        _, _, plain = _post(fast, body, "prose")
        wall, first, paced = _post(slow, body, "prose")
    plain_msg, paced_events = _assemble(_events(plain)), _events(paced)
    tokens = plain_msg["usage"]["output_tokens"]
    assert plain_msg["content"][0]["text"] == PROSE and tokens >= 200
    assert first is not None and first >= profile.ttft_s
    assert wall >= profile.ttft_s + tokens / profile.output_tokens_per_s
    deltas = [e for e in paced_events if e["type"] == "content_block_delta"]
    assert len(deltas) >= tokens // 8  # the output arrives in pieces, not in one event at the end
    assert _assemble(paced_events) == plain_msg  # the same message, the same usage: the wait is never billed


def test_a_plain_reply_waits_the_whole_delay_and_tool_calls_stream_intact(book):
    profile = Latency("test", ttft_s=0.3, output_tokens_per_s=500)
    with Simulator(book, responders=RESPONDERS) as fast, \
            Simulator(book, responders=RESPONDERS, latency=profile) as slow:
        _, _, plain = _post(fast, _request(), "narrated")
        _, _, plain_stream = _post(fast, _request(stream=True), "narrated")
        wall, _, paced = _post(slow, _request(), "narrated")
        _, _, streamed = _post(slow, _request(stream=True), "narrated")
    plain_msg = json.loads(plain)
    assert [b["type"] for b in plain_msg["content"]] == ["text", "tool_use"]
    assert json.loads(paced) == plain_msg
    assert wall >= profile.ttft_s + plain_msg["usage"]["output_tokens"] / profile.output_tokens_per_s
    events = _events(streamed)
    assert sum(e["type"] == "content_block_delta" and e["index"] == 1 for e in events) > 1  # split tool input
    assert _assemble(events) == _assemble(_events(plain_stream))  # partial_json pieces join back to the input


def test_concurrent_replies_wait_side_by_side(book):
    profile = Latency("test", ttft_s=1.0, output_tokens_per_s=1000)
    body = {**_request(), "stream": True}
    with Simulator(book, latency=profile) as sim:
        walls: list[float] = []
        threads = [threading.Thread(target=lambda: walls.append(_post(sim, body)[0])) for _ in range(4)]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        together = time.monotonic() - start
    assert len(walls) == 4 and min(walls) >= profile.ttft_s
    assert together < 2 * profile.ttft_s  # in turn they would take 4 TTFTs at least


def test_stopping_the_simulator_ends_a_reply_that_is_still_waiting(book):
    sim = Simulator(book, latency=Latency("slow", ttft_s=60, output_tokens_per_s=1)).start()
    outcome: list[object] = []

    def client() -> None:
        try:
            outcome.append(_post(sim, {**_request(), "stream": True}))
        except (OSError, http.client.HTTPException) as e:
            outcome.append(e)

    thread = threading.Thread(target=client)
    thread.start()
    time.sleep(0.5)
    sim.stop()
    thread.join(20)
    assert not thread.is_alive() and outcome  # it did not sit out its 60 s
    if isinstance(outcome[0], tuple):
        assert b"content_block_delta" not in outcome[0][2]


@pytest.mark.cli
@pytest.mark.bwrap
def test_cli_sessions_wait_on_the_model_in_parallel_and_pay_the_same(book, tmp_path):
    """The real CLI through the sandbox and relay: latency lengthens a session, costs nothing, and two sessions
    wait at the same time, not in turn."""
    profile = Latency("test", ttft_s=1.0, output_tokens_per_s=200)

    def session(sim: Simulator, name: str) -> dict:
        root = tmp_path / name
        root.mkdir()
        return run_session(SessionSpec(prompt=PROMPT, workspace=make_workspace(root), model=demo.MODEL,
                                       endpoint=sim.url(), transcript_dir=root / "t", transcript_name=name,
                                       expected_skill="work", timeout_s=120, max_retries=0))

    with Simulator(book) as fast:
        plain = session(fast, "plain")
    with Simulator(book, latency=profile) as slow:
        start = time.monotonic()
        one = session(slow, "one")
        alone = time.monotonic() - start
        pair: list[dict] = []
        threads = [threading.Thread(target=lambda n=n: pair.append(session(slow, n))) for n in ("a", "b")]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        together = time.monotonic() - start
    for record in (plain, one, *pair):
        assert record["ok"], record
    assert one["num_turns"] >= 3 and one["wall_s"] >= one["num_turns"] * profile.ttft_s  # each turn waited
    for record in (one, *pair):
        assert {f: record[f] for f in USAGE} == {f: plain[f] for f in USAGE}
        assert record["cost_usd"] == plain["cost_usd"]
    assert together < 1.5 * alone, (together, alone)
    assert not session_processes()
