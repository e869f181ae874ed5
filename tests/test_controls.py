"""The candidate side's contemporaneous controls: the order a candidate side runs in, and what a side must hold
to be read as one (every block whole, each candidate arm with its control and no other arm)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from skillevo.bench import SidePlan, interleaved
from skillevo.core.arms import Arm, Session, candidate
from skillevo.core.errors import BadInput
from skillevo.core.results import load_side
from tests.gate_rows import CANDIDATE, INCUMBENT, bench, controls, runs, write_side


class _Task:
    def __init__(self, task_id: str) -> None:
        self.id = task_id


def _plan(runs_: int = 4, overlay: str = "a" * 64, replicate: int = 0) -> SidePlan:
    work = Arm("workflow", "workflow", (Session("work", "{prompt}"),))
    auto = Arm("auto", "auto", (Session("auto", "{prompt}"),))
    return SidePlan("candidate", Path("tasks.yaml"), {}, {}, [_Task("t1"), _Task("t2"), _Task("t3")], [],
                    [candidate(auto), candidate(work)], runs_, "b" * 64, overlay, None,  # type: ignore[arg-type]
                    controls=[auto, work], replicate=replicate)


def test_every_block_holds_each_arm_once_in_run_order():
    order = interleaved(_plan())
    arms = {"auto", "workflow", "candidate_auto", "candidate_workflow"}
    blocks = [order[i:i + 4] for i in range(0, len(order), 4)]
    assert len(order) == 3 * 4 * 4 and len(blocks) == 12
    for block in blocks:
        assert len({(task, run) for task, _, run in block}) == 1 and {arm for _, arm, _ in block} == arms
    assert [block[0][2] for block in blocks] == sorted(block[0][2] for block in blocks)  # run by run
    assert Counter((task, run) for task, _, run in order) == Counter({(t, r): 4 for t in ("t1", "t2", "t3")
                                                                       for r in range(1, 5)})


def test_the_order_is_random_but_fixed_by_the_overlay_and_the_replicate():
    one = interleaved(_plan())
    assert interleaved(_plan()) == one  # a resumed bench measures the same cells in the same slots
    assert interleaved(_plan(overlay="c" * 64)) != one and interleaved(_plan(replicate=1)) != one
    firsts = Counter(block[0][1] for block in (one[i:i + 4] for i in range(0, len(one), 4)))
    assert len(firsts) > 1  # the control does not always go first, nor the candidate


def test_the_moment_names_the_side_the_overlay_and_the_replicate():
    p = _plan()
    assert p.moment == f"candidate/{'a' * 64}/replicate-0"
    assert replace(p, side="incumbent").moment == f"incumbent/{'b' * 64}/replicate-0"


def _write(tmp_path: Path, rows: list[dict], **changes) -> Path:
    bench_json = {**bench("candidate", {"t1": "trivial", "t2": "trivial"}), **changes}
    return write_side(tmp_path / "cand", bench_json, rows)


def _rows() -> list[dict]:
    incumbent = runs("t1", INCUMBENT, [1.0, 1.1, 0.9]) + runs("t2", INCUMBENT, [2.0, 2.1, 1.9])
    return controls(incumbent, runs("t1", CANDIDATE, [0.8, 0.9, 0.7]) + runs("t2", CANDIDATE, [1.8, 1.7, 1.9]))


def test_a_whole_side_reads_back_with_its_controls(tmp_path):
    side = load_side(_write(tmp_path, _rows()), "candidate")
    assert Counter(r["arm"] for r in side.rows) == {INCUMBENT: 6, CANDIDATE: 6}
    assert all(r["overlay_digest"] is None for r in side.rows if r["arm"] == INCUMBENT)


@pytest.mark.parametrize("change, message", [
    ({"controls": None}, r"\$\.controls None"),
    ({"arms": [{"name": CANDIDATE, "incumbent_arm": INCUMBENT, "skills": ["work"]}]}, r"controls \[\] for candidate"),
    ({"arms": [{"name": INCUMBENT, "incumbent_arm": INCUMBENT, "skills": ["work"]},
               {"name": "auto", "incumbent_arm": "auto", "skills": ["work"]},
               {"name": CANDIDATE, "incumbent_arm": INCUMBENT, "skills": ["work"]}]},
     r"controls \['auto', 'workflow'\]"),
])
def test_a_side_without_its_controls_or_with_another_arm_is_refused(tmp_path, change, message):
    rows = _rows() if "arms" not in change or any(a["name"] == INCUMBENT for a in change["arms"]) else [
        r for r in _rows() if r["arm"] == CANDIDATE]
    with pytest.raises(BadInput, match=message + r".*\(rule: contemporaneous controls\)"):
        load_side(_write(tmp_path, rows, **change), "candidate")


def test_a_control_that_installed_the_overlay_is_refused(tmp_path):
    rows = [{**r, "overlay_digest": "a" * 64} if r["arm"] == INCUMBENT and r["run"] == 2 else r for r in _rows()]
    with pytest.raises(BadInput, match="none for a control"):
        load_side(_write(tmp_path, rows), "candidate")


def test_a_block_missing_a_row_is_refused(tmp_path):
    rows = [r for r in _rows() if not (r["arm"] == CANDIDATE and r["task"] == "t2" and r["run"] == 3)]
    with pytest.raises(BadInput, match=r"task 't2' run 3 has rows for \['workflow'\].*contemporaneous controls"):
        load_side(_write(tmp_path, rows), "candidate")
    assert json.loads((tmp_path / "cand" / "bench.json").read_text())["controls"] == "interleaved"


def test_a_cell_names_its_moment_and_slot_to_the_simulator_and_a_control_its_candidate():
    """The route is set on the host, out of the agent's reach: the simulator draws a bench's drift from the moment
    and a cache window from the slot, so a candidate and the control beside it share both."""
    from types import SimpleNamespace

    from skillevo.backends import session_endpoint
    from skillevo.bench.cell import _session_ref
    from skillevo.core.models import Model
    from skillevo.simulator.noise import ROUTE_HEADER, Route, parse_route

    def _endpoint(spec, session):
        return session_endpoint(spec.model, _session_ref(spec, session)).url

    model = Model("simulator", "claude-sonnet-4-6", "http://127.0.0.1:9")
    base = dict(task=SimpleNamespace(id="t1"), run=2, model=model, moment="candidate/abc/replicate-0", slot=7)
    control = SimpleNamespace(arm=SimpleNamespace(name="workflow"), overlay_digest=None, control_for="a" * 64, **base)
    cand = SimpleNamespace(arm=SimpleNamespace(name="candidate_workflow"), overlay_digest="a" * 64,
                           control_for=None, **base)
    routes = [parse_route(_endpoint(spec, 1).removeprefix("http://127.0.0.1:9") + "/v1/messages")
              for spec in (control, cand)]
    assert all(isinstance(r, Route) for r in routes)
    assert routes[0].moment == routes[1].moment and routes[0].slot == routes[1].slot == 7
    assert routes[0].cell != routes[1].cell  # each arm's sessions draw their own noise
    real = SimpleNamespace(**{**vars(cand), "model": Model("anthropic", "claude-sonnet-4-6", "https://api.example")})
    assert _endpoint(real, 1) == "https://api.example"  # a real model is never told any of it
    # behind a gateway the proxy keeps no path: the same route goes in a header the host-side relay adds
    gated = SimpleNamespace(**{**vars(cand), "model": Model("openai", "gpt-5-mini", "http://127.0.0.1:7",
                                                             upstream="simulator")})
    ep = session_endpoint(gated.model, _session_ref(gated, 1))
    assert ep.url == "http://127.0.0.1:7" and dict(ep.headers)[ROUTE_HEADER] == _endpoint(cand, 1).removeprefix(
        "http://127.0.0.1:9")
    openai = SimpleNamespace(**{**vars(cand), "model": Model("openai", "gpt-5-mini", "http://127.0.0.1:7",
                                                              upstream="openai/gpt-5-mini")})
    assert session_endpoint(openai.model, _session_ref(openai, 1)).headers == ()
