"""The gate's side of sequential candidate runs: the stopped look's levels, the record read from bench.json and
refused when it does not fit its rows, and both bound into promotion.json, recomputed by apply, and shown.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skillevo import stats
from skillevo.core.config import Policy
from skillevo.core.results import Side, aggregate, load_side, sequential_record
from skillevo.files.errors import BadInput
from skillevo.files.schemas import first_error, schema_validator
from skillevo.gate import PromotionRefused, build_promotion, decide_arm, pipeline_bindings, validate_for_apply
from skillevo.gate.looks import Levels, levels
from skillevo.gate.looks import binding as looks_binding
from skillevo.gate.report import render_report
from tests.gate_rows import CANDIDATE, INCUMBENT, bench, controls, freeze, runs, sides, write_side

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
MODEL = "skillevo-sim-1"
# few runs: let the cost test decide; alpha 0.04, the level these cases were built at
WIDE = Policy.from_dict({"max_resolution_drop_pct": 90, "min_total_runs": 1, "alpha": 0.04, "test": "betting"})
TASKS = ("t1", "t2", "t3")
INC = [1.0, 1.1, 0.9, 1.05, 0.95] * 2
SPREAD = (0.97, 1.0, 1.03, 0.99, 1.01) * 2


def record(looks=(3, 5), look=1, reason="futility"):
    return {"looks": list(looks), "stopped_at_look": look, "reason": reason}


def rows(candidate_runs: int, scale: float = 0.93) -> list[dict]:
    out = []
    for i, task in enumerate(TASKS):
        out += runs(task, INCUMBENT, [round((1 + i) * v, 6) for v in INC])
        out += runs(task, CANDIDATE, [round((1 + i) * scale * m, 6) for m in SPREAD][:candidate_runs])
    return out


def sequential_sides(candidate_runs: int, found: dict | None, scale: float = 0.93, runs_: int = 5
                     ) -> tuple[Side, Side]:
    incumbent, candidate = sides(rows(candidate_runs, scale))
    incumbent = Side(incumbent.directory, {**incumbent.bench, "runs": runs_}, incumbent.rows, incumbent.digests)
    candidate = Side(candidate.directory, {**candidate.bench, "runs": runs_, "sequential": found}, candidate.rows,
                     candidate.digests)
    return incumbent, candidate


def decide(aggregates, policy=WIDE, sequential=None):
    return decide_arm(aggregates, policy, benchmark_model=MODEL, incumbent_arm=INCUMBENT, candidate_arm=CANDIDATE,
                      sequential=sequential)


# --- the levels ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("found, boundary, expected", [
    (None, "spending", Levels(0.05, 0.05)),
    (record((5,), 1, "max"), "spending", Levels(0.05, 0.05)),
    (record((3, 5), 1), "spending", Levels(0.05, stats.look_levels((3, 5), 0.05)[0])),
    (record((3, 5), 2, "max"), "spending", Levels(0.05, stats.look_levels((3, 5), 0.05)[1])),
    (record((3, 5, 7), 2, "promote"), "bonferroni", Levels(0.05, stats.look_levels((3, 5, 7), 0.05, "bonferroni")[1])),
])
def test_levels(found, boundary, expected):
    """The test by betting holds alpha at every look (skillevo/stats/betting.py); the resolution drop's bound and
    the geometric policy's p-value are spent over the looks."""
    got = levels(Policy.from_dict({"look_boundary": boundary, "test": "betting"}), found)
    assert got == pytest.approx(expected)
    for other in ({"policy": "geometric"}, {"test": "bootstrap"}):  # p-values, spent over the looks
        spent = levels(Policy.from_dict({"look_boundary": boundary, **other}), found)
        assert spent.cost == pytest.approx(expected.drop)
    if found and len(found["looks"]) > 1:
        assert got.drop < 0.05  # a stopped look bounds the drop more strictly than a fixed bench


def test_a_stopped_side_is_judged_by_the_same_test_at_every_look():
    """Anytime-valid: the look a side stopped at does not change the cost test's verdict on the same runs."""
    aggregates = aggregate(rows(8, 0.5), dict.fromkeys(TASKS, "trivial"), [INCUMBENT, CANDIDATE])
    fixed = decide(aggregates)
    assert fixed["decision"] == "promote", fixed["reasons"]
    stopped = decide(aggregates, sequential=record((8, 10), 1, "promote"))
    assert stopped["decision"] == "promote" and stopped["test"] == fixed["test"]
    assert "the candidate side stopped at look 1 of 2 (promote); tested at that look's spending level" in \
        stopped["reasons"]
    assert decide(aggregate(rows(3, 0.5), dict.fromkeys(TASKS, "trivial"), [INCUMBENT, CANDIDATE]),
                  sequential=record((3, 5), 1, "promote"))["decision"] == "keep_incumbent"  # 3 rounds: too few


def test_resolution_alone_promotes_at_no_look():
    tasks = dict.fromkeys(TASKS, "trivial")
    out = []
    for task in TASKS:
        out += runs(task, INCUMBENT, INC * 2, kinds=[None] * 8 + ["oracle-failed"] * 12)
        out += runs(task, CANDIDATE, INC * 2)
    aggregates = aggregate(out, tasks, [INCUMBENT, CANDIDATE])
    policy = Policy.from_dict({"policy": "geometric"})  # its claim is per run: more resolution alone is no saving
    for look in (1, 2):
        assert decide(aggregates, policy, record((10, 20), look, "max" if look == 2 else "promote"))["decision"] \
            == "keep_incumbent"


def test_the_seed_rule_says_it_takes_no_account_of_the_looks():
    aggregates = aggregate(rows(3), dict.fromkeys(TASKS, "trivial"), [INCUMBENT, CANDIDATE])
    decision = decide(aggregates, Policy.from_dict({"policy": "seed"}), record())
    assert any("the seed rule takes no account of it" in r for r in decision["reasons"])


# --- the record on a side --------------------------------------------------------------------------------------


def test_a_fixed_side_has_no_record_and_a_stopped_one_reads_back():
    incumbent, candidate = sequential_sides(3, record())
    assert sequential_record(incumbent) is None
    found = sequential_record(candidate)
    assert (found.looks, found.stopped_at_look, found.reason, found.runs, found.last) == ((3, 5), 1, "futility", 3,
                                                                                           False)


@pytest.mark.parametrize("candidate_runs, found, runs_, message", [
    (3, record((3, 4)), 5, r"looks: \[3, 4\] must increase and end at the side's runs 5"),
    (3, record((3, 3, 5)), 5, "must increase"),
    (3, record((3, 5), 3, "max"), 5, "stopped at look 3 of 2"),
    (3, record((3, 5), 1, "max"), 5, "for 'max' at the last one only"),
    (5, record((3, 5), 2, "futility"), 5, None),  # futility may be said at the last look too: no refusal
    (5, record((3, 5), 1), 5, "look 1 is 3 runs per cell but the rows reach run 5"),  # rows past the look
    (3, record((3, 5), 2, "max"), 5, "look 2 is 5 runs per cell but the rows reach run 3"),  # a later look claimed
])
def test_a_record_that_does_not_fit_its_side_is_refused(candidate_runs, found, runs_, message):
    _, candidate = sequential_sides(candidate_runs, found, runs_=runs_)
    if message is None:
        assert sequential_record(candidate) is not None
        return
    with pytest.raises(BadInput, match=message) as error:
        sequential_record(candidate)
    assert "bench-candidate/bench.json: $.sequential" in str(error.value)


def test_only_the_candidate_side_runs_in_looks():
    incumbent, candidate = sequential_sides(3, record())
    stopped = Side(incumbent.directory, {**incumbent.bench, "sequential": record((3, 5), 2, "max")}, incumbent.rows)
    with pytest.raises(BadInput, match="only the candidate side runs in looks"):
        build_promotion(stopped, candidate, freeze(), WIDE, now=NOW)


def test_the_controls_stop_where_the_candidate_stopped():
    """Controls run in the same blocks as the candidate, look by look: controls past the stopped look (say, the
    stored incumbent side's later runs added to the control) are refused."""
    incumbent, candidate = sequential_sides(3, record())
    extra = [{**r, "side": "candidate"} for r in incumbent.rows if r["run"] > 3]
    longer = Side(candidate.directory, candidate.bench, (*candidate.rows, *extra), candidate.digests)
    with pytest.raises(BadInput, match=r"look 1 is 3 runs per cell but the rows reach run 10"):
        build_promotion(incumbent, longer, freeze(), WIDE, now=NOW)


def test_load_side_refuses_a_bad_record_naming_the_file(tmp_path: Path):
    every = rows(5)
    side_rows = controls([r for r in every if r["arm"] == INCUMBENT], [r for r in every if r["arm"] == CANDIDATE])
    bench_json = bench("candidate", dict.fromkeys(TASKS, "trivial"), runs=5, sequential=record((3, 5), 1))
    directory = write_side(tmp_path / "candidate", bench_json, side_rows)
    with pytest.raises(BadInput, match="rows reach run 5") as error:
        load_side(directory, "candidate")
    assert str(directory / "bench.json") in str(error.value)
    bench_json["sequential"] = record((3, 5), 2, "max")
    write_side(directory, bench_json, side_rows)
    assert sequential_record(load_side(directory, "candidate")).stopped_at_look == 2


@pytest.mark.parametrize("value, ok", [
    (None, True), (record(), True), ({**record(), "reason": "bored"}, False), ({**record(), "looks": []}, False),
    ({**record(), "extra": 1}, False), ({"looks": [3, 5], "stopped_at_look": 1}, False),
])
def test_the_bench_run_schema_states_the_record(value, ok):
    bench_json = bench("candidate", dict.fromkeys(TASKS, "trivial"), sequential=value)
    assert (first_error(bench_json, schema_validator("bench-run")) is None) is ok


# --- promotion.json and apply ----------------------------------------------------------------------------------


def stopped_promotion(found=None, candidate_runs=8, scale=0.5):
    found = found or record((8, 10), 1, "promote")
    incumbent, candidate = sequential_sides(candidate_runs, found, scale, runs_=10)
    promotion = json.loads(json.dumps(build_promotion(incumbent, candidate, freeze(), WIDE, now=NOW)))
    return promotion, pipeline_bindings(freeze(), candidate.bench, WIDE)


def test_the_look_and_its_levels_are_bound_and_recomputed_by_apply():
    promotion, current = stopped_promotion()
    assert first_error(promotion, schema_validator("promotion")) is None
    assert promotion["decisions"][0]["decision"] == "promote", promotion["decisions"][0]["reasons"]
    bound = promotion["sequential"]
    assert bound == {"looks": [8, 10], "stopped_at_look": 1, "reason": "promote", "boundary": "spending",
                     "cost_level": 0.04, "drop_level": round(stats.look_levels((8, 10), 0.04)[0], 9)}
    validate_for_apply(promotion, current, NOW + timedelta(days=1))


@pytest.mark.parametrize("field, value", [
    ("stopped_at_look", 2), ("cost_level", 0.03), ("drop_level", 0.05), ("boundary", "bonferroni"),
    ("looks", [8, 9, 10]),
])
def test_a_tampered_look_is_refused_naming_the_field(field, value):
    promotion, current = stopped_promotion()
    promotion["sequential"][field] = value
    with pytest.raises(PromotionRefused, match=rf"sequential\.{field}"):
        validate_for_apply(promotion, current, NOW + timedelta(days=1))


def test_dropping_the_record_to_claim_the_fixed_level_is_refused():
    promotion, current = stopped_promotion()
    promotion["sequential"] = None
    with pytest.raises(PromotionRefused, match="sequential"):
        validate_for_apply(promotion, current, NOW + timedelta(days=1))


def test_a_record_moved_to_the_last_look_in_both_places_is_refused():
    """A look-1 promotion relabelled as stopped at the last look (where the resolution drop's bound is laxer), with
    promotion.json's record, its levels and the current bindings all rewritten to agree: the embedded aggregates
    hold look 1's runs, and apply refuses."""
    from skillevo.stats.betting import Design
    promotion, current = stopped_promotion()
    forged = copy.deepcopy(promotion)
    last = record((8, 10), 2, "max")
    forged["sequential"] = current["sequential"] = looks_binding(WIDE, last)
    forged["decisions"] = [decide_arm({(a["task"], a["arm"]): a for row in forged["decisions"][0]["tasks"]
                                       for a in (row["incumbent"], row["candidate"])}, WIDE, benchmark_model=MODEL,
                                      incumbent_arm=INCUMBENT, candidate_arm=CANDIDATE, sequential=last,
                                      design=Design.from_dict(forged["design"][INCUMBENT]))]
    with pytest.raises(PromotionRefused, match=r"decisions\[0\]\.tasks: the candidate ran 8 runs in a cell, but "
                                               "look 2 is 10 runs per cell"):
        validate_for_apply(forged, current, NOW + timedelta(days=1))


def test_report_shows_the_look_and_the_level():
    promotion, _ = stopped_promotion()
    totals = {side: {"runs": 1, "sessions": 1, "total_cost_usd": 1.0, "unmeasured_cost_runs": 0}
              for side in ("incumbent", "candidate")}
    text = render_report(promotion, totals)
    level = stats.look_levels((8, 10), 0.04)[0]
    assert "**Sequential:** the candidate side stopped at look 1 of 2 (8 of 10 runs per cell" in text
    assert "the metric is tested at level 0.04 (fixed design: 0.04)" in text
    assert f"the resolution drop bounded at {100 * (1 - level):.4g}% confidence" in text
    fixed, _ = json.loads(json.dumps(build_promotion(*sides(rows(5)), freeze(), WIDE, now=NOW))), None
    assert fixed["sequential"] is None and "Sequential" not in render_report(fixed, totals)
