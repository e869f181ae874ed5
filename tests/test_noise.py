"""The simulator's noise and prompt cache without the CLI: seeded draws, their moments, `none` is exact, caching."""

from __future__ import annotations

import dataclasses
import http.client
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from skillevo.simulator import Simulator, agent, load_dir, noise
from skillevo.simulator.cache import PromptCache, tokens
from skillevo.simulator.conversation import Conversation
from skillevo.simulator.noise import (
    DEMO,
    NONE,
    REALISTIC,
    Noise,
    Profile,
    cell_key,
    route,
)

ROOT = Path(__file__).resolve().parents[1]
KEYS = [cell_key("task", "arm", run, 1) for run in range(1, 41)]
N = 20000  # sessions per moment check: a wrong figure fails, a right one passes but for 1 in ~15,000 per bound
Z = 4.0


def _fingerprint(keys: list[str], seed: int = 0, replicate: int = 0) -> list[list]:
    n = Noise(REALISTIC, seed, replicate)
    return [[s.verbosity, s.extra_calls, s.mistake, s.skips_skill, [s.overloaded(r, 0) for r in range(3)],
             s.pick("extra-file", 0, 7)] for s in map(n.session, keys)]


def test_draws_are_pinned_and_the_same_in_another_process():
    assert noise.uniform(0, 0, "golden", "x") == 0.10481802402754181  # sha256 and IEEE doubles: any machine
    assert cell_key("t", "a", 1, 1) == "a200df9ca052b16dce9329108f9b6762"
    assert noise.poisson(1.5, "golden") == 5 and noise.lognormal(0.5, "golden") == 2.659182217603793
    assert _fingerprint(KEYS) == _fingerprint(KEYS)
    code = ("import json; from tests.test_noise import _fingerprint, KEYS; print(json.dumps(_fingerprint(KEYS)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout
    assert json.loads(out) == json.loads(json.dumps(_fingerprint(KEYS)))


def test_keys_seeds_and_replicates_give_different_noise():
    base = _fingerprint(KEYS)
    assert len({json.dumps(f) for f in base}) > 30  # different cells differ
    assert _fingerprint(KEYS, seed=1) != base and _fingerprint(KEYS, replicate=1) != base
    assert len({cell_key(t, a, r, s) for t in "ab" for a in ("direct", "candidate_direct") for r in (1, 2)
                for s in (1, 2)}) == 16
    assert route("t", "a", 1, 1) == "/cell/" + cell_key("t", "a", 1, 1) and noise.KEY.match(cell_key("t", "a", 1, 1))


def _moments(profile: Profile) -> dict[str, list]:
    sessions = [Noise(profile, 7, 0).session(cell_key("t", "a", i, 1)) for i in range(N)]
    return {"log_v": [math.log(s.verbosity) for s in sessions], "v": [s.verbosity for s in sessions],
            "extra": [s.extra_calls for s in sessions], "mistake": [s.mistake for s in sessions],
            "skip": [s.skips_skill for s in sessions], "overload": [s.overloaded(1, 0) for s in sessions]}


@pytest.mark.parametrize("profile", [DEMO, REALISTIC], ids=lambda p: p.name)
def test_moments_of_many_draws_match_the_profile(profile):
    m, sigma, lam = _moments(profile), profile.verbosity_sigma, profile.extra_calls_mean
    assert abs(statistics.fmean(m["log_v"]) + sigma ** 2 / 2) < Z * sigma / math.sqrt(N)
    assert abs(statistics.pstdev(m["log_v"]) - sigma) < Z * sigma / math.sqrt(2 * N)
    assert abs(statistics.fmean(m["v"]) - 1) < Z * math.sqrt(math.exp(sigma ** 2) - 1) / math.sqrt(N)  # mean one
    assert abs(statistics.fmean(m["extra"]) - lam) < Z * math.sqrt(lam / N)
    assert abs(statistics.pvariance(m["extra"]) - lam) < Z * math.sqrt((lam + 2 * lam ** 2) / N)  # Poisson: var = mean
    for name, p in (("mistake", profile.mistake_rate), ("skip", profile.skip_skill_rate),
                    ("overload", profile.overload_rate)):
        assert abs(statistics.fmean(m[name]) - p) <= Z * math.sqrt(p * (1 - p) / N), name


def _conv(book, turns: int, skill_text: str) -> Conversation:
    prompt = "Use the work skill for: " + next(t for t in book.tasks if t.id == "textstats-unique-words").match
    return Conversation(prompt=prompt, cwd="/work", turns=turns, skills={"work": skill_text} if turns else {})


def _play(book, session, skill_text: str) -> list[agent.Reply]:
    replies = []
    for turns in range(40):
        replies.append(agent.normal(_conv(book, turns, skill_text), book, session))
        if replies[-1].tool is None:
            return replies
    raise AssertionError("the session never ends")


@pytest.fixture(scope="module")
def demo_book():
    return load_dir(ROOT / "tasks/playbooks")


SKILL_TEXT = (ROOT / "skills/work/SKILL.md").read_text()


def test_none_is_exactly_the_noise_free_agent(demo_book):
    quiet = _play(demo_book, agent.QUIET, SKILL_TEXT)
    assert [r.tool[0] for r in quiet[:-1]] == ["Skill"] + ["Read"] * 5 + ["Edit", "Write", "Bash"]  # 4 for the survey
    assert all(r.text is None for r in quiet[:-1])  # bare tool calls, as before there was noise
    for seed, replicate, key in ((0, 0, ""), (3, 2, KEYS[0]), (99, 7, KEYS[5])):
        session = Noise(NONE, seed, replicate).session(key)
        assert _play(demo_book, session, SKILL_TEXT) == quiet
        assert not any(session.overloaded(r, a) for r in range(20) for a in range(3))


def test_noise_adds_prose_exploration_mistakes_and_skipped_skills(demo_book):
    noisy = Profile("test", verbosity_sigma=0.5, narration_chars=300, extra_calls_mean=4.0, mistake_rate=1.0,
                    skip_skill_rate=0.0, overload_rate=0.0)
    session = next(s for s in map(Noise(noisy).session, KEYS) if s.extra_calls >= 3)
    replies = _play(demo_book, session, SKILL_TEXT)
    base = _play(demo_book, agent.QUIET, SKILL_TEXT)
    assert len(replies) == len(base) + session.extra_calls
    assert all(r.text and abs(len(r.text) - session.narration_chars) <= 1 for r in replies[:-1])
    task = next(t for t in demo_book.tasks if t.id == "textstats-unique-words")
    reads = {s.arg for s in task.sessions["work"] if s.kind == "read"}  # what the playbook reads: the file exists
    for r in replies:
        if r.tool and r.tool[0] == "Read":
            assert r.tool[1]["file_path"] in {f"/work/{p}" for p in reads}
        if r.tool and r.tool[0] == "Bash" and "pytest" not in r.tool[1]["command"]:
            assert r.tool[1]["command"].split()[0] in ("ls", "grep", "head", "cat"), r.tool
    edit = next(r.tool[1] for r in replies if r.tool and r.tool[0] == "Edit")
    assert "text.lower().split()" in edit["new_string"]  # the mistake variant, whatever the skill says
    skipping = Noise(dataclasses.replace(NONE, skip_skill_rate=1.0)).session(KEYS[0])
    assert [r.tool[0] for r in _play(demo_book, skipping, SKILL_TEXT)[:-1]][:1] == ["Read"]  # no Skill call


# --- the server: overloads and the prompt cache ----------------------------------------------------------

def _post(sim: Simulator, path: str, body: dict, session: str = "s1") -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=10)
    conn.request("POST", path, body=json.dumps(body), headers={"content-type": "application/json",
                                                               "x-claude-code-session-id": session})
    r = conn.getresponse()
    return r.status, json.loads(r.read())


def _request(n_turns: int, system: str = "S" * 12000) -> dict:
    """A conversation of n_turns exchanges, breakpoints where the CLI puts them: the system prompt, the last block."""
    messages = [{"role": "user", "content": [{"type": "text", "text": "Use the work skill for: friendlier greeting"}]}]
    for i in range(n_turns):
        messages += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "Read",
                                                        "input": {"file_path": "/w/x.py"}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}",
                                                   "content": "line\n" * 400}]}]
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return {"model": "claude-sonnet-4-6", "max_tokens": 100, "messages": messages,
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]}


def test_an_overload_is_never_answered_more_often_than_the_cli_retries(book):
    always = Noise(dataclasses.replace(NONE, overload_rate=1.0))
    for retries in (0, 2):
        with Simulator(book, noise=always, max_retries=retries) as sim:
            statuses = [_post(sim, f"{route('t', 'a', 1, 1)}/v1/messages", _request(0))[0] for _ in range(retries + 1)]
            assert statuses == [529] * retries + [200]
            assert _post(sim, f"{route('t', 'a', 1, 1)}/v1/messages", _request(1))[0] == (529 if retries else 200)
            assert _post(sim, "/cell/not-a-key/v1/messages", _request(0))[0] == 400


def test_prompt_cache_writes_then_reads_the_prefix_per_session():
    cache, first, second = PromptCache(), _request(0), _request(1)
    total = {n: tokens(len(json.dumps(b))) for n, b in (("first", first), ("second", second))}
    u1 = cache.usage(("c", "s1"), first, len(json.dumps(first)))
    assert u1["cache_read_input_tokens"] == 0 and u1["cache_creation_input_tokens"] > 2048
    u2 = cache.usage(("c", "s1"), second, len(json.dumps(second)))
    assert u2["cache_read_input_tokens"] == u1["cache_creation_input_tokens"]  # the whole first prefix, read
    assert 0 < u2["cache_creation_input_tokens"] < u1["cache_creation_input_tokens"]  # only what is new, written
    for u, n in ((u1, "first"), (u2, "second")):
        assert sum(u.values()) == total[n] and u["input_tokens"] < 100  # the uncached rest: the request's framing
    other = cache.usage(("c", "s2"), second, len(json.dumps(second)))
    assert other["cache_read_input_tokens"] == 0  # another session has its own cache
    plain = {k: v for k, v in first.items() if k != "system"}
    plain["messages"] = [{"role": "user", "content": "hi"}]
    assert cache.usage(("c", "s3"), plain, 40) == {"input_tokens": 10, "cache_creation_input_tokens": 0,
                                                   "cache_read_input_tokens": 0}
    small = _request(0, system="tiny")
    assert cache.usage(("c", "s4"), small, len(json.dumps(small)))["cache_creation_input_tokens"] == 0  # < 2048


def test_the_server_reports_cached_usage_and_count_tokens_still_counts_everything(book):
    with Simulator(book) as sim:
        path = f"{route('t', 'a', 1, 1)}/v1/messages"
        _, m1 = _post(sim, path, _request(0))
        _, m2 = _post(sim, path, _request(1))
    assert m1["usage"]["cache_creation_input_tokens"] > 0 and m2["usage"]["cache_read_input_tokens"] > 0
    total = tokens(len(json.dumps(_request(1))))
    assert sum(v for k, v in m2["usage"].items() if k != "output_tokens") == total


def test_the_schemas_name_exactly_the_profiles_the_simulator_has():
    """params.yaml and every bench.json read the profile names from one schema definition, which must be the
    simulator's own list: a profile added in code alone would be refused, one in the schema alone would crash."""
    from skillevo.files.schemas import load_schema
    from skillevo.simulator.noise import PROFILES

    assert load_schema("params")["$defs"]["noise_profile"]["enum"] == list(PROFILES)
    bench = load_schema("bench-run")["properties"]["simulator"]["oneOf"][1]["properties"]["noise"]
    assert bench == {"$ref": "params.schema.json#/$defs/noise_profile"}
