"""What threatens a decision, without the CLI: moments and slots in the route, drift, warm cache windows, and the
effects a skill can cause (retry loops, give-ups, spread), each at its seeded draw; `none` stays exact."""

from __future__ import annotations

import copy
import dataclasses
import http.client
import json
import math
import statistics
from pathlib import Path

import pytest
import yaml

from skillevo.files.schemas import InvalidDocument
from skillevo.simulator import Simulator, agent, noise, playbook
from skillevo.simulator.cache import PromptCache, tokens
from skillevo.simulator.conversation import Conversation
from skillevo.simulator.noise import (
    DRIFTING,
    NONE,
    REALISTIC,
    Noise,
    Route,
    RouteError,
    cell_key,
    moment_key,
    parse_route,
    route,
)

ROOT = Path(__file__).resolve().parents[1]
N = 20000  # draws per moment check, as tests/test_noise.py
Z = 4.0
TASKS = ("textstats-unique-words", "ledger-currencies")
LOOP, GIVE, WIDE, ONLY = ("re-read the code and re-run the check until certain", "stop if the request leaves doubt",
                          "think aloud at whatever length it takes", "triple-check the currency symbols")
EFFECTS = [
    {"id": "loop", "phrase": LOOP, "effect": {"retry_loop": {"rate": 0.5, "repeat": [2, 4]}}},
    {"id": "give", "phrase": GIVE, "effect": {"give_up": {"rate": 0.5}}},
    {"id": "wide", "phrase": WIDE, "effect": {"spread": {"factor": 2}}},
    {"id": "only", "phrase": ONLY, "effect": {"retry_loop": {"rate": 1, "repeat": [3, 3]},
                                              "tasks": ["ledger-currencies"]}},
]
SKILL = (ROOT / "skills/work/SKILL.md").read_text()


@pytest.fixture(scope="module")
def book() -> playbook.Playbook:
    """The demo playbook with effect instructions added (its own instructions unchanged)."""
    doc = yaml.safe_load((ROOT / "tasks/playbooks/demo.yaml").read_text())
    doc["instructions"] += EFFECTS
    return playbook.parse(doc, "test playbook")


def _task(book: playbook.Playbook, task_id: str) -> playbook.Task:
    return next(t for t in book.tasks if t.id == task_id)


def _play(book: playbook.Playbook, task_id: str, session: noise.SessionNoise, skill_text: str) -> list[agent.Reply]:
    """A named work session played to its end, the skill text loaded after the Skill call."""
    prompt = "Use the work skill for: " + _task(book, task_id).match
    replies = []
    for turns in range(200):
        conv = Conversation(prompt=prompt, cwd="/work", turns=turns, skills={"work": skill_text} if turns else {})
        replies.append(agent.normal(conv, book, session))
        if replies[-1].tool is None:
            return replies
    raise AssertionError("the session never ends")


def _tools(replies: list[agent.Reply]) -> list[tuple[str, str]]:
    return [(r.tool[0], json.dumps(r.tool[1], sort_keys=True)) for r in replies if r.tool]


# --- the route -------------------------------------------------------------------------------------------------

def test_route_round_trips_its_moment_and_slot_and_keeps_the_old_forms():
    key, m = cell_key("t", "a", 3, 2), moment_key("incumbent@2026-12-01")
    assert route("t", "a", 3, 2) == f"/cell/{key}"  # without moment or slot: exactly as before
    assert route("t", "a", 3, 2, moment="incumbent@2026-12-01") == f"/cell/{key}/moment/{m}"
    assert route("t", "a", 3, 2, moment="incumbent@2026-12-01", slot=17) == f"/cell/{key}/moment/{m}/slot/17"
    assert noise.KEY.match(m) and moment_key("other") != m
    for moment, slot in ((None, None), ("x", None), ("x", 0), ("x", noise.MAX_SLOT)):
        for mode in ("", "/mode/no-skill"):
            parsed = parse_route(route("t", "a", 3, 2, moment=moment, slot=slot) + mode + "/v1/messages")
            assert parsed == Route(mode.rsplit("/", 1)[-1] or "normal", key, moment and moment_key(moment), slot,
                                   "/v1/messages")
    assert parse_route("/v1/messages") == Route(api="/v1/messages")
    assert parse_route("/mode/hang/v1/messages/count_tokens") == Route(mode="hang", api="/v1/messages/count_tokens")
    assert parse_route(f"/mode/escape/cell/{key}/v1/messages") == Route("escape", key, api="/v1/messages")


K, M = cell_key("t", "a", 1, 1), moment_key("m")


@pytest.mark.parametrize("path, rule", [
    ("/cell/not-a-key/v1/messages", "cell route"),
    ("/cell//v1/messages", "cell route"),
    (f"/cell/{K.upper()}/v1/messages", "cell route"),
    (f"/cell/{K}/cell/{K}/v1/messages", "twice"),
    (f"/mode/a/mode/b/cell/{K}/v1/messages", "twice"),
    (f"/moment/{M}/v1/messages", "belongs to a cell"),
    (f"/cell/{K}/moment/{M[:16]}/v1/messages", "moment is"),
    (f"/cell/{K}/moment/incumbent/v1/messages", "moment is"),
    (f"/cell/{K}/slot/3/v1/messages", "schedule"),
    (f"/cell/{K}/moment/{M}/slot/03/v1/messages", "slot is"),
    (f"/cell/{K}/moment/{M}/slot/-1/v1/messages", "slot is"),
    (f"/cell/{K}/moment/{M}/slot/1e3/v1/messages", "slot is"),
    (f"/cell/{K}/moment/{M}/slot/1000000000/v1/messages", "slot is"),
    (f"/cell/{K}/moment/{M}/slot//v1/messages", "slot is"),
])
def test_malformed_routes_are_refused_not_guessed(path, rule, book):
    with pytest.raises(RouteError, match=rule):
        parse_route(path)
    with Simulator(book) as sim:
        status, body = _post(sim, path, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 400 and "simulator route refused" in body["error"]["message"], body


@pytest.mark.parametrize("kwargs, rule", [
    ({"slot": 1}, "pass the moment too"), ({"moment": ""}, "non-empty"), ({"moment": "m", "slot": -1}, "slot is"),
    ({"moment": "m", "slot": True}, "slot is"), ({"moment": "m", "slot": 10 ** 9}, "slot is"),
    ({"moment": "m", "slot": 1.0}, "slot is"),
])
def test_route_refuses_what_the_server_would_refuse(kwargs, rule):
    with pytest.raises(ValueError, match=rule):
        route("t", "a", 1, 1, **kwargs)


# --- drift and cache windows ------------------------------------------------------------------------------------

def test_drift_is_one_draw_per_moment_shared_by_its_cells_and_differs_between_moments():
    n = Noise(DRIFTING, 3, 1)
    a, b = moment_key("a"), moment_key("b")
    drift_a = {n.session(cell_key("t", arm, run, 1), a, slot).drift for arm in ("auto", "candidate_auto@x")
               for run in range(1, 6) for slot in (None, 0, 40)}
    assert len(drift_a) == 1 and drift_a != {n.session(K, b).drift} and drift_a != {1.0}
    assert Noise(DRIFTING, 4, 1).session(K, a).drift != n.session(K, a).drift  # seed and replicate matter
    assert Noise(DRIFTING, 3, 2).session(K, a).drift != n.session(K, a).drift
    assert n.session(K).drift == 1.0  # no moment: no drift
    assert Noise(REALISTIC, 3, 1).session(K, a).drift == 1.0  # a profile without drift
    drifts = [math.log(n.session(K, moment_key(f"m{i}")).drift) for i in range(N)]
    sigma = DRIFTING.drift_sigma
    assert abs(statistics.fmean(drifts) + sigma ** 2 / 2) < Z * sigma / math.sqrt(N)  # mean one
    assert abs(statistics.pstdev(drifts) - sigma) < Z * sigma / math.sqrt(2 * N)


def test_drift_scales_prose_and_the_mean_of_extra_calls():
    n = Noise(DRIFTING, 0, 0)
    s = n.session(K, M)
    assert s.narration_chars == round(DRIFTING.narration_chars * s.verbosity * s.drift)
    counts = [n.session(cell_key("t", "a", i, 1), M).extra_calls for i in range(N)]
    mean = DRIFTING.extra_calls_mean * s.drift
    assert abs(statistics.fmean(counts) - mean) < Z * math.sqrt(mean / N)


def test_a_moment_is_part_of_every_draw_of_its_sessions_and_without_one_nothing_changed():
    n = Noise(REALISTIC, 7, 0)
    assert n.session(K).parts == (7, 0, K)  # the draws of today's routes
    keys = [cell_key("t", "a", i, 1) for i in range(50)]
    plain = [n.session(k).verbosity for k in keys]
    assert plain == [Noise(REALISTIC, 7, 0).session(k, None, None).verbosity for k in keys]
    assert [n.session(k, M).verbosity for k in keys] != plain  # the same cell at a moment: another session
    assert [n.session(k, M, 5).verbosity for k in keys] == [n.session(k, M).verbosity for k in keys]  # slots: no


def test_cache_windows_share_a_state_by_slot_and_are_warm_at_their_rate():
    n = Noise(DRIFTING, 1, 0)
    w = DRIFTING.window
    states = [n.session(cell_key("t", "a", s, 1), M, s).warm for s in range(40 * w)]
    for i in range(0, len(states), w):
        assert len(set(states[i:i + w])) == 1, f"window {i // w} is not one state"
    windows = [n.session(K, moment_key(f"m{i}"), 0).warm for i in range(N)]
    p = DRIFTING.warm_rate
    assert abs(statistics.fmean(windows) - p) < Z * math.sqrt(p * (1 - p) / N)
    assert not any(n.session(K, moment_key(f"m{i}")).warm for i in range(200))  # no slot: never warm
    off = Noise(dataclasses.replace(DRIFTING, window=0), 1, 0)
    assert not any(off.session(K, moment_key(f"m{i}"), 0).warm for i in range(200))  # window 0: never


def _request(n_turns: int = 0) -> dict:
    """A conversation as the CLI sends it: tools, a system prompt with two breakpoints, one on the last block."""
    messages = [{"role": "user", "content": [{"type": "text", "text": "<system-reminder>x" * 800},
                                             {"type": "text", "text": "Use the work skill for: friendlier greeting"}]}]
    for i in range(n_turns):
        messages += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "Read",
                                                        "input": {"file_path": "/w/x.py"}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}",
                                                   "content": "line\n" * 400}]}]
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return {"model": "claude-sonnet-4-6", "max_tokens": 100, "messages": messages,
            "tools": [{"name": "Read", "description": "R" * 20000, "input_schema": {"type": "object"}}],
            "system": [{"type": "text", "text": "billing"},
                       {"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}},
                       {"type": "text", "text": "S" * 12000, "cache_control": {"type": "ephemeral"}}]}


def _shared_tokens(body: dict) -> int:
    """Tokens of the tools-and-system prefix, as cache.py counts blocks."""
    from skillevo.simulator.cache import _blocks
    return tokens(sum(len(data) for data, _, shared in _blocks(body) if shared))


def test_a_warm_window_bills_the_shared_prefix_as_reads_on_the_first_request_only():
    cache, first, second = PromptCache(), _request(0), _request(1)
    size = {id(b): len(json.dumps(b)) for b in (first, second)}
    cold = cache.usage(("c", None, "s1"), first, size[id(first)])
    warm = cache.usage(("c", "m", "s2"), first, size[id(first)], warm=True)
    shared = _shared_tokens(first)
    assert cold["cache_read_input_tokens"] == 0 and warm["cache_read_input_tokens"] == shared > 2048
    assert warm["cache_creation_input_tokens"] == cold["cache_creation_input_tokens"] - shared > 0  # only the rest
    assert sum(warm.values()) == sum(cold.values()) == tokens(size[id(first)])
    later_cold = cache.usage(("c", None, "s1"), second, size[id(second)])
    later_warm = cache.usage(("c", "m", "s2"), second, size[id(second)], warm=True)
    assert later_warm == later_cold  # after the first request both sessions read what they wrote
    late = cache.usage(("c", "m", "s3"), first, size[id(first)])
    assert cache.usage(("c", "m", "s3"), second, size[id(second)], warm=True) == later_cold  # not a first request
    assert late == cold
    tiny = _request(0)
    tiny["tools"], tiny["system"][2]["text"] = [], "short"
    assert cache.usage(("c", "m", "s4"), tiny, len(json.dumps(tiny)), warm=True)["cache_read_input_tokens"] == 0


def _post(sim: Simulator, path: str, body: dict, session: str = "s1") -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=10)
    conn.request("POST", path, body=json.dumps(body), headers={"content-type": "application/json",
                                                               "x-claude-code-session-id": session})
    r = conn.getresponse()
    return r.status, json.loads(r.read())


def test_the_server_reads_the_window_from_the_route(book):
    warm_always = Noise(dataclasses.replace(NONE, name="warm", warm_rate=1.0, window=4))
    with Simulator(book, noise=warm_always) as sim:
        for path, session, read in ((route("t", "a", 1, 1), "s1", False),
                                    (route("t", "a", 1, 1, moment="m"), "s2", False),
                                    (route("t", "a", 1, 1, moment="m", slot=9), "s3", True),
                                    (route("t", "a", 1, 1, moment="m", slot=9) + "/mode/escape", "s4", False)):
            status, message = _post(sim, path + "/v1/messages", _request(0), session)
            assert status == 200 and (message["usage"]["cache_read_input_tokens"] > 0) == read, path


# --- effects a skill can cause ----------------------------------------------------------------------------------

def _sessions(n: int) -> list[noise.SessionNoise]:
    """n realistic sessions of each task (some skip their skill, as a real agent now and then does)."""
    return [Noise(REALISTIC, 2, 0).session(cell_key(t, "auto", i, 1)) for t in TASKS for i in range(n)]


def test_a_retry_loop_repeats_the_reading_and_verification_at_its_seeded_draw(book):
    fired = 0
    for session in _sessions(n=30):
        task = TASKS[0]
        base, looped = _play(book, task, session, SKILL), _play(book, task, session, SKILL + "\n- " + LOOP)
        k = session.retry_repeats("loop", 0.5, 2, 4)
        own = book.steps(_task(book, task), "work", "" if session.skips_skill else SKILL, session.mistake)
        assert len(_tools(base)) == (not session.skips_skill) + len(own) + session.extra_calls  # no loop without it
        if session.skips_skill or not k:  # the phrase never reached the agent, or the draw did not fire
            assert _tools(looped) == _tools(base)
            continue
        fired += 1
        block = [agent._tool_for(s, "/work") for s in own if s.kind in ("read", "bash")]
        block = [(name, json.dumps(args, sort_keys=True)) for name, args in block]
        assert _tools(looped) == _tools(base) + block * k  # after the last call: the workspace ends the same
        assert 2 <= k <= 4
    assert 10 <= fired <= 50  # rate 0.5 of 60 (minus the skipped): both outcomes occur


def test_a_give_up_stops_at_once_without_editing_at_its_seeded_draw(book):
    gave = 0
    for session in _sessions(n=30):
        base, played = _play(book, TASKS[1], session, SKILL), _play(book, TASKS[1], session, SKILL + "\n" + GIVE)
        if not session.skips_skill and session.gives_up("give", 0.5):
            gave += 1
            assert [r.tool[0] for r in played if r.tool] == ["Skill"] and "without changing anything" in played[-1].text
        else:
            assert _tools(played) == _tools(base)
    assert 10 <= gave <= 50


def test_effects_fire_only_for_their_tasks_and_only_when_the_skill_text_carries_the_phrase(book):
    session = Noise(REALISTIC, 0, 0).session(K)
    assert not session.skips_skill
    for task in TASKS:
        found = agent.affected(book, _task(book, task), SKILL + ONLY, session)
        assert found.repeats == (3 if task == "ledger-currencies" else 0), task
    assert agent.affected(book, _task(book, TASKS[1]), SKILL, session) == agent.Affected(session)
    assert book.effects(_task(book, TASKS[1]), SKILL.upper() + ONLY.upper())  # the phrase, in any case
    nothing = agent.affected(book, _task(book, TASKS[1]), "", session)  # a skipped skill, an unskilled session
    assert nothing == agent.Affected(session)


def test_a_spread_widens_the_spread_of_prose_and_extra_calls_and_keeps_their_means(book):
    sessions = _sessions(n=N // 2)
    wide = [agent.affected(book, _task(book, TASKS[0]), WIDE, s).noise for s in sessions]
    assert {w.spread for w in wide} == {2.0}
    sigma, lam = REALISTIC.verbosity_sigma * 2, REALISTIC.extra_calls_mean
    log_v = [math.log(w.verbosity) for w in wide]
    assert abs(statistics.pstdev(log_v) - sigma) < Z * sigma / math.sqrt(2 * len(wide))
    assert abs(statistics.fmean(w.verbosity for w in wide) - 1) < Z * math.sqrt(math.exp(sigma ** 2) - 1) / math.sqrt(
        len(wide))
    # the same normal draw, stretched: a verbose session gets more verbose
    assert all((math.log(w.verbosity) + sigma ** 2 / 2) * REALISTIC.verbosity_sigma == pytest.approx(
        (math.log(s.verbosity) + REALISTIC.verbosity_sigma ** 2 / 2) * sigma)
        for s, w in zip(sessions[:50], wide, strict=False))
    calls = [w.extra_calls for w in wide]
    assert abs(statistics.fmean(calls) - lam) < Z * 2 * math.sqrt(lam / len(calls))
    assert abs(statistics.pstdev(calls) / math.sqrt(lam) - 2) < 0.15  # sd twice the Poisson's
    narrow = agent.affected(book, _task(book, TASKS[0]), "", sessions[0]).noise
    assert narrow.spread == 1.0 and narrow.extra_calls == sessions[0].extra_calls


def test_none_stays_exact_with_moments_slots_and_every_effect(book, monkeypatch):
    everything = SKILL + "\n".join(("", LOOP, GIVE, WIDE, ONLY))
    quiet = {task: _play(book, task, agent.QUIET, SKILL) for task in TASKS}
    drawn: list[tuple] = []
    real_uniform = noise.uniform
    monkeypatch.setattr(noise, "uniform", lambda *parts: drawn.append(parts) or real_uniform(*parts))
    for seed, moment, slot in ((0, None, None), (5, "m", None), (9, "m", 3)):
        session = Noise(NONE, seed).session(K, moment and moment_key(moment), slot)
        for task in TASKS:
            assert _play(book, task, session, everything) == quiet[task]
        assert session.drift == 1.0 and not session.warm
    assert drawn == []  # not one draw fires under none


@pytest.mark.parametrize("effect, message", [
    ({"retry_loop": {"rate": 0.5, "repeat": [4, 2]}}, r"runs backwards \(rule: \[lo, hi\]"),
    ({"retry_loop": {"rate": 0.5, "repeat": [0, 2]}}, "minimum"),
    ({"give_up": {"rate": 1.5}}, "maximum"),
    ({"spread": {"factor": 0}}, "exclusiveMinimum"),
    ({"spread": {"factor": 2}, "tasks": ["no-such-task"]}, r"no-such-task.*rule: an effect names tasks"),
    ({"tasks": ["greet"]}, "anyOf"),
    ({"give_up": {"rate": 0.1}, "sometimes": True}, "Additional properties"),
])
def test_bad_effects_are_refused_with_the_file_and_the_rule(effect, message):
    from tests.conftest import PLAYBOOK
    doc = copy.deepcopy(PLAYBOOK)
    doc["instructions"].append({"id": "x", "phrase": "a phrase long enough", "effect": effect})
    with pytest.raises(InvalidDocument, match=message) as raised:
        playbook.parse(doc, "bad.yaml")
    assert str(raised.value).startswith("bad.yaml")
