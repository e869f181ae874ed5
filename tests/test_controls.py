"""The candidate side's contemporaneous controls: the order a candidate side runs in, and what a side must hold
to be read as one (every block whole, each candidate arm with its control and no other arm)."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from skillevo.bench import SidePlan, interleaved
from skillevo.core.arms import Arm, Session, candidate
from skillevo.core.results import load_side
from skillevo.files.errors import BadInput
from tests.gate_rows import CANDIDATE, INCUMBENT, RECORDED_AT, bench, controls, designed, freeze, runs, write_side


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


# --- controls the gate checks: forged sides through the real gate stage ----------------------------------------

DAY_BEFORE = "2025-02-28T12:00:00+00:00"


def _gate(tmp_path: Path, edit=None, *, env_key: str | None = None, monkeypatch=None) -> tuple[int, str]:
    """A candidate side written as the bench writes it, `edit`ed as a forger would (rows, then bench.json's
    results_sha256 made to match, unless the edit says otherwise), then the real gate stage on it."""
    from skillevo.files.digests import sha256_bytes
    from skillevo.stages import gate as stage

    incumbent = [{**r, "started_at": DAY_BEFORE, "recorded_at": DAY_BEFORE}
                 for r in runs("t1", INCUMBENT, [1.0, 1.1, 0.9]) + runs("t2", INCUMBENT, [2.0, 2.1, 1.9])]
    cand = runs("t1", CANDIDATE, [0.8, 0.9, 0.7]) + runs("t2", CANDIDATE, [1.8, 1.7, 1.9])
    write_side(tmp_path / "inc", bench("incumbent", {"t1": "trivial", "t2": "trivial"}), incumbent)
    fresh = [{**r, "started_at": RECORDED_AT, "recorded_at": RECORDED_AT} for r in incumbent]
    side = write_side(tmp_path / "cand", designed(bench("candidate", {"t1": "trivial", "t2": "trivial"}), incumbent),
                      controls(fresh, cand))
    if edit is not None:
        rows = [json.loads(line) for line in (side / "results.jsonl").read_text().splitlines()]
        bench_json = json.loads((side / "bench.json").read_text())
        rows, keep_digest = edit(rows, incumbent), False
        if isinstance(rows, tuple):
            rows, keep_digest = rows
        data = "".join(json.dumps(r) + "\n" for r in rows).encode()
        (side / "results.jsonl").write_bytes(data)
        if not keep_digest:
            (side / "bench.json").write_text(json.dumps({**bench_json, "results_sha256": sha256_bytes(data)}))
    (tmp_path / "manifest.json").write_text(json.dumps(freeze()), encoding="utf-8")
    (tmp_path / "params.yaml").write_text("arms: {workflow: {sessions: [{skill: work, prompt: '{prompt}'}]}}\n"
                                          "tasks: {gate: [t1, t2], evidence: []}\n"
                                          "gate: {min_runs: 2, min_total_runs: 2}\n", encoding="utf-8")
    if monkeypatch is not None:
        monkeypatch.setenv("SKILLEVO_CELL_KEY", env_key) if env_key else monkeypatch.delenv("SKILLEVO_CELL_KEY",
                                                                                             raising=False)
    import contextlib
    import io
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = stage.main(["--incumbent", str(tmp_path / "inc"), "--candidate", str(side), "--freeze",
                           str(tmp_path / "manifest.json"), "--params", str(tmp_path / "params.yaml"), "--out",
                           str(tmp_path / "out")])
    return code, err.getvalue()


def _swap_block_order(rows, _):
    """Two cells of one block trade slots: the block ran in another order than the seed draws."""
    block = sorted((r for r in rows if r["task"] == "t1" and r["run"] == 2), key=lambda r: r["slot"])
    block[0]["slot"], block[1]["slot"] = block[1]["slot"], block[0]["slot"]
    return rows


def _relabel_stored(rows, incumbent, forge_pairing=False):
    """The incumbent side's own stored rows, measured a day before, stand in as the controls."""
    stored = {(r["task"], r["run"]): r for r in incumbent}
    out = []
    for r in rows:
        if r["arm"] == INCUMBENT:
            old = {**stored[(r["task"], r["run"])], "side": "candidate", "slot": r["slot"] if forge_pairing else None,
                   "control_for": r["control_for"] if forge_pairing else None, "transcripts": r["transcripts"],
                   "session_ids": r["session_ids"]}
            out.append(old)
        else:
            out.append(r)
    return out


@pytest.mark.parametrize("edit, message", [
    (_swap_block_order, r"ran in slot \d+, but the order drawn from the side's seed puts it in slot \d+"),
    (lambda rows, inc: _relabel_stored(rows, inc), r"control_for is None, not this candidate's overlay"),
    (lambda rows, inc: _relabel_stored(rows, inc, forge_pairing=True), r"did not run inside its block's window"),
    (lambda rows, _: [{**r, "control_for": "e" * 64} if r["arm"] == INCUMBENT else r for r in rows],
     r"a control that did not run beside this candidate"),
    (lambda rows, _: [{**r, "started_at": "2025-01-30T12:00:00+00:00", "recorded_at": "2025-01-30T12:00:10+00:00"}
                      if r["arm"] == INCUMBENT and r["run"] == 3 else r for r in rows],
     r"block t\d/run3: .* did not run inside its block's window"),
    (lambda rows, _: ([{**r, "cost_usd": r["cost_usd"]} for r in rows[::-1]], True),
     r"results.jsonl: is not the file the bench wrote"),
])
def test_the_gate_refuses_controls_it_cannot_verify(tmp_path, monkeypatch, edit, message):
    assert _gate(tmp_path / "honest", monkeypatch=monkeypatch)[0] == 0  # the same side, unedited, is decided
    code, err = _gate(tmp_path / "forged", edit, monkeypatch=monkeypatch)
    assert code == 2 and re.search(message + r".*\(rule: contemporaneous controls\)", err), err


def test_with_a_team_key_only_a_side_signed_under_it_is_decided(tmp_path, monkeypatch):
    key = "k" * 32
    code, err = _gate(tmp_path / "unsigned", env_key=key, monkeypatch=monkeypatch)
    assert code == 2 and "$.mac: does not verify under this team's key SKILLEVO_CELL_KEY" in err, err
    from skillevo.core import controls as controls_mod

    def signed(rows, _):
        return rows  # unchanged rows, bench.json signed below as a bench holding the key would

    code, _ = _gate(tmp_path / "signed", signed, env_key=key, monkeypatch=monkeypatch)
    assert code == 2  # the fixture's bench.json carries no mac yet
    side = tmp_path / "signed" / "cand"
    bench_json = json.loads((side / "bench.json").read_text())
    bench_json["mac"] = controls_mod.sign(bench_json["results_sha256"], bench_json)
    (side / "bench.json").write_text(json.dumps(bench_json))
    args = ["--incumbent", str(tmp_path / "signed" / "inc"), "--candidate", str(side), "--freeze",
            str(tmp_path / "signed" / "manifest.json"), "--params", str(tmp_path / "signed" / "params.yaml"),
            "--out", str(tmp_path / "signed" / "out2")]
    from skillevo.stages import gate as stage
    assert stage.main(args) == 0
    # a forger without the key rewrites a row and the digest: the mac no longer verifies
    rows = (side / "results.jsonl").read_text().splitlines()
    forged = "".join(line.replace('"cost_usd": 0.8', '"cost_usd": 0.08') + "\n" for line in rows).encode()
    (side / "results.jsonl").write_bytes(forged)
    from skillevo.files.digests import sha256_bytes
    (side / "bench.json").write_text(json.dumps({**bench_json, "results_sha256": sha256_bytes(forged)}))
    assert stage.main([*args[:-1], str(tmp_path / "signed" / "out3")]) == 2


# --- faults measured again: a re-run block stands in the place of the block a fault spoiled -----------------------

def _blind(r: dict) -> dict:
    """A row lost to a harness fault before the model answered anything: no token, no cost, no session."""
    return {**r, "error_kind": "infra-error", "resolved": False, "ok": False, "verify_passed": False,
            "oracle_passed": False, "cost_usd": None, "session_ids": [], "num_turns": 0, "duration_s": 0.0,
            "skill_invoked": None,
            "skills_loaded": [], "tool_uses": {}, **{f: 0 for f in ("input_tokens", "output_tokens",
                                                                     "cache_creation_input_tokens",
                                                                     "cache_read_input_tokens")}}


def _rerun_gate(tmp_path: Path, forge=None, pct: float = 25.0) -> tuple[int, str, Path]:
    """A candidate side whose t1/run2 candidate cell was lost before the model answered and whose block was
    measured again whole as run 4 (replaces 2), as the bench writes it; `forge(rows)` edits it first. Then the
    real gate stage."""
    from skillevo.stages import gate as stage

    incumbent = [{**r, "started_at": DAY_BEFORE, "recorded_at": DAY_BEFORE}
                 for r in runs("t1", INCUMBENT, [1.0, 1.1, 0.9]) + runs("t2", INCUMBENT, [2.0, 2.1, 1.9])]
    write_side(tmp_path / "inc", bench("incumbent", {"t1": "trivial", "t2": "trivial"}), incumbent)
    cand = runs("t1", CANDIDATE, [0.8, 0.9, 0.7]) + runs("t2", CANDIDATE, [1.8, 1.7, 1.9])
    fresh = [{**r, "started_at": RECORDED_AT, "recorded_at": RECORDED_AT} for r in incumbent]
    rows = [_blind(r) if (r["task"], r["arm"], r["run"]) == ("t1", CANDIDATE, 2) else r
            for r in controls(fresh, cand)]
    again = [{**r, "run": 4, "replaces": 2, "session_ids": [f"again-{r['arm']}"]}
             for r in controls(fresh[:1], cand[:1])]  # t1's block, both arms, measured again
    rows += again
    if forge is not None:
        rows = forge(rows)
    side = write_side(tmp_path / "cand", designed(bench("candidate", {"t1": "trivial", "t2": "trivial"},
                                                        fault_reruns={"pct": pct, "blocks": 1}), incumbent), rows)
    (tmp_path / "manifest.json").write_text(json.dumps(freeze()), encoding="utf-8")
    (tmp_path / "params.yaml").write_text("arms: {workflow: {sessions: [{skill: work, prompt: '{prompt}'}]}}\n"
                                          "tasks: {gate: [t1, t2], evidence: []}\n"
                                          "gate: {min_runs: 2, min_total_runs: 2}\n", encoding="utf-8")
    import contextlib
    import io
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = stage.main(["--incumbent", str(tmp_path / "inc"), "--candidate", str(side), "--freeze",
                           str(tmp_path / "manifest.json"), "--params", str(tmp_path / "params.yaml"), "--out",
                           str(tmp_path / "out")])
    return code, err.getvalue(), tmp_path / "out"


def test_a_block_measured_again_stands_in_the_place_of_the_one_a_fault_spoiled(tmp_path):
    code, err, out = _rerun_gate(tmp_path)
    assert code == 0, err
    promotion = json.loads((out / "promotion.json").read_text())
    (decision,) = promotion["decisions"]
    t1 = next(t for t in decision["tasks"] if t["task"] == "t1")
    # three valid runs a side, none excluded: the spoiled block left, the re-run took its place in round 2
    assert (t1["incumbent"]["valid_runs"], t1["candidate"]["valid_runs"]) == (3, 3), t1
    assert t1["incumbent"]["excluded_runs"] == t1["candidate"]["excluded_runs"] == 0
    assert sorted(s["run"] for s in t1["candidate"]["samples"]) == [1, 2, 3]


def _mid_run(rows):
    """The spoiled run had spent money before the fault: the fault may have struck because the run was long."""
    return [{**r, "cost_usd": 0.5, "input_tokens": 10, "session_ids": ["spent"]} if r["error_kind"] == "infra-error"
            else r for r in rows]


@pytest.mark.parametrize("forge, pct, message", [
    (_mid_run, 25.0, r"replaces block t1/run2, which no fault spoiled before the model answered"),
    (lambda rows: [{**r, "replaces": None} if r["run"] == 4 and r["arm"] == INCUMBENT else r for r in rows], 25.0,
     r"its rows disagree on the block they replace"),
    (lambda rows: rows + [{**r, "run": 5} for r in rows if r["run"] == 4], 25.0,
     r"block t1/run2 is replaced twice"),
    (lambda rows: rows, 10.0, r"1 re-run blocks; bench.json's fault_reruns says 1, at most 10% of the 6 scheduled"),
    (lambda rows: [{**r, "replaces": 3} if r["run"] == 4 else r for r in rows], 25.0,
     r"replaces block t1/run3, which no fault spoiled"),
])
def test_the_gate_refuses_a_re_run_that_replaces_what_no_blind_fault_spoiled(tmp_path, forge, pct, message):
    code, err, _ = _rerun_gate(tmp_path, forge, pct)
    assert code == 2 and re.search(message + r".*\(rule: contemporaneous controls\)", err), err


def test_settle_follows_a_re_run_of_a_re_run_home():
    from skillevo.core.controls import settle

    def cell(run, arm, replaces=None, kind=None):
        return {"task": "t", "arm": arm, "run": run, "replaces": replaces, "error_kind": kind, "cost_usd": run}

    rows = [cell(1, "a"), cell(1, "b"), cell(2, "a", kind="infra-error"), cell(2, "b"),
            cell(5, "a", 2), cell(5, "b", 2, "session-error"), cell(6, "a", 5), cell(6, "b", 5)]
    settled = settle(rows)
    assert [(r["arm"], r["run"], r["cost_usd"]) for r in settled] == [("a", 1, 1), ("a", 2, 6), ("b", 1, 1),
                                                                       ("b", 2, 6)]
    assert settle(rows[:4]) == sorted(rows[:4], key=lambda r: (r["task"], r["arm"], r["run"]))
    assert settle(settled) == settled  # the statistics' view is settled once and for all
