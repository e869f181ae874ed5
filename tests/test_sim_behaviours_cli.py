"""Behaviours through the real CLI: a retry-loop phrase makes the sessions its draw picks several times dearer, a
give-up phrase makes cheap runs that change nothing, a warm cache window lowers a session's cost; the moment and
slot reach the simulator through the relay's path prefix. Seven small greet sessions."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest

from skillevo.agent import SessionSpec, run_session
from skillevo.simulator import Simulator, demo, playbook
from skillevo.simulator.noise import NONE, Noise, cell_key, route
from tests.conftest import make_workspace, session_processes

pytestmark = [pytest.mark.cli, pytest.mark.bwrap]
ARM = "behaviours"
LOOP, GIVE = "re-check the greeting again and again", "give up when the greeting is unclear"
LOOP_REPEAT = (12, 14)
# Nothing varies but what is under test: no prose, no extra calls, no mistakes; effects fire (the profile draws),
# and a session with a slot is in a warm cache window.
PROFILE = dataclasses.replace(NONE, name="behaviours-only", warm_rate=1.0, window=4)


def _book() -> playbook.Playbook:
    doc = copy.deepcopy(demo.PLAYBOOK)
    doc["instructions"] += [
        {"id": "loop", "phrase": LOOP, "effect": {"retry_loop": {"rate": 0.5, "repeat": list(LOOP_REPEAT)}}},
        {"id": "give", "phrase": GIVE, "effect": {"give_up": {"rate": 0.5}}}]
    return playbook.parse(doc, "tests/test_sim_behaviours_cli.py")


def _runs(fires, want: bool) -> int:
    """The first run whose session's draw fires (or not): the test knows each session's fate before it runs."""
    return next(r for r in range(1, 100) if bool(fires(Noise(PROFILE).session(cell_key("greet", ARM, r, 1)))) == want)


def _session(sim: Simulator, tmp: Path, name: str, skill: str, run: int, **where) -> tuple[dict, bool]:
    """One greet session with `skill` as the work skill; (its record, whether it changed the workspace)."""
    ws = make_workspace(tmp / name, skill)
    record = run_session(SessionSpec(
        prompt=demo.PROMPT, workspace=ws, model=demo.MODEL, endpoint=sim.url(cell=route("greet", ARM, run, 1, **where)),
        expected_skill="work", transcript_dir=tmp / name / "t", transcript_name="s", timeout_s=120))
    assert record["ok"], record
    return record, bool(demo.git(ws, "status", "--porcelain").strip())


def test_retry_loops_give_ups_and_warm_windows_through_the_cli(tmp_path):
    loops, stays = (_runs(lambda s: s.retry_repeats("loop", 0.5, *LOOP_REPEAT), w) for w in (True, False))
    quits, works = (_runs(lambda s: s.gives_up("give", 0.5), w) for w in (True, False))
    with Simulator(_book(), noise=Noise(PROFILE)) as sim:
        base, changed = _session(sim, tmp_path, "base", demo.SKILL, 1)
        assert changed
        looped, _ = _session(sim, tmp_path, "looped", demo.SKILL + LOOP + "\n", loops)
        calm, _ = _session(sim, tmp_path, "calm", demo.SKILL + LOOP + "\n", stays)
        quit_, quit_changed = _session(sim, tmp_path, "quit", demo.SKILL + GIVE + "\n", quits)
        worked, worked_changed = _session(sim, tmp_path, "worked", demo.SKILL + GIVE + "\n", works)
        warm, _ = _session(sim, tmp_path, "warm", demo.SKILL, 1, moment="bench-1", slot=5)
        cold, _ = _session(sim, tmp_path, "cold", demo.SKILL, 1, moment="bench-1")
    # a retry loop: the draw that fires makes the session several times dearer; the other run costs as the base
    assert looped["cost_usd"] > 2.5 * base["cost_usd"] and looped["num_turns"] >= base["num_turns"] + 2 * 12
    assert looped["tool_uses"]["Read"] >= 13 and calm["num_turns"] == base["num_turns"]
    assert calm["cost_usd"] < 1.05 * base["cost_usd"]
    # a give-up: a cheap session that changes nothing (the bench records it as an unresolved `no-work` run)
    assert not quit_changed and worked_changed
    assert quit_["num_turns"] < base["num_turns"] and set(quit_["tool_uses"]) == {"Skill"}
    assert quit_["cost_usd"] < 0.85 * base["cost_usd"] and worked["num_turns"] == base["num_turns"]
    # a warm window: the first request reads the tools-and-system prefix another session left in the cache
    assert cold["cost_usd"] == base["cost_usd"]  # a moment alone changes nothing under a profile without drift
    assert warm["cache_read_input_tokens"] - cold["cache_read_input_tokens"] > 10_000
    assert warm["cache_creation_input_tokens"] < cold["cache_creation_input_tokens"] - 10_000
    assert 0.03 < cold["cost_usd"] - warm["cost_usd"] < 0.06  # about $0.046 on Sonnet 4.6 (docs/simulator.md)
    assert not session_processes()
