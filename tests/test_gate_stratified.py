"""The default rule (`gate.policy: stratified`) and the statistics under it, checked against independent
computations (scipy's own two-sample t-test, closed forms) and one case per reason.

Error rates are not asserted here: `make gate-study` measures them by simulation against this same code.
"""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats as sps

from skillevo import stats
from skillevo.config import Policy
from skillevo.gate import decide_arm
from skillevo.results import aggregate
from tests.gate_rows import CANDIDATE, INCUMBENT, runs

MODEL = "skillevo-sim-1"
DEFAULT = Policy.from_dict({})


def cells(tasks: dict[str, tuple[list, list]], *, inc_kinds=None, cand_kinds=None):
    """Aggregates made by the real aggregation from rows: task -> (incumbent costs, candidate costs)."""
    rows = []
    for task, (inc, cand) in tasks.items():
        rows += runs(task, INCUMBENT, inc, kinds=(inc_kinds or {}).get(task))
        rows += runs(task, CANDIDATE, cand, kinds=(cand_kinds or {}).get(task))
    return aggregate(rows, {task: "trivial" for task in tasks}, [INCUMBENT, CANDIDATE])


def decide(aggregates, **policy):
    return decide_arm(aggregates, Policy.from_dict(policy), benchmark_model=MODEL, incumbent_arm=INCUMBENT,
                      candidate_arm=CANDIDATE)


def noisy(n: int, scale: float, rng: random.Random, sd: float = 0.2) -> list[float]:
    return [round(scale * math.exp(rng.gauss(0, sd)), 6) for _ in range(n)]


# --- statistics against independent computations -------------------------------------------------------------


def test_one_task_is_the_pooled_two_sample_t_test_on_logs():
    rng = random.Random(1)
    inc, cand = noisy(6, 1.0, rng), noisy(5, 0.85, rng)
    est = stats.log_ratio([(inc, cand)], alpha=0.05)
    reference = sps.ttest_ind([math.log(v) for v in cand], [math.log(v) for v in inc], alternative="less")
    assert est.p_value == pytest.approx(reference.pvalue, rel=1e-9)
    assert est.df == 9
    ratio = math.exp(sum(map(math.log, cand)) / 5 - sum(map(math.log, inc)) / 6)
    assert est.ratio == pytest.approx(ratio) and est.improvement_pct == pytest.approx(100 * (1 - ratio))


def test_balanced_strata_average_the_task_differences_with_a_pooled_spread():
    rng = random.Random(2)
    strata = [(noisy(4, scale, rng), noisy(4, 0.8 * scale, rng)) for scale in (0.5, 2.0, 7.0)]
    est = stats.log_ratio(strata, alpha=0.05)
    logs = [([math.log(v) for v in a], [math.log(v) for v in b]) for a, b in strata]
    diffs = [sum(b) / 4 - sum(a) / 4 for a, b in logs]
    pooled = sum(sps.tvar(x) * 3 for pair in logs for x in pair) / 18
    t = (sum(diffs) / 3) / (math.sqrt(pooled) * math.sqrt(2 / 4) / math.sqrt(3))
    assert est.df == 18 and est.log_sd == pytest.approx(math.sqrt(pooled))
    assert est.p_value == pytest.approx(sps.t.cdf(t, 18))
    low, high = est.interval_pct
    assert low < est.improvement_pct < high


def test_a_task_s_scale_does_not_weigh_on_the_estimate():
    rng = random.Random(3)
    base = [(noisy(5, 1.0, rng), noisy(5, 0.9, rng)) for _ in range(3)]
    scaled = [(a, b) if i else ([v * 1000 for v in a], [v * 1000 for v in b]) for i, (a, b) in enumerate(base)]
    one, other = stats.log_ratio(base, 0.05), stats.log_ratio(scaled, 0.05)
    assert one.p_value == pytest.approx(other.p_value) and one.ratio == pytest.approx(other.ratio)


def test_no_spread_no_positive_values_no_estimate():
    assert stats.log_ratio([([1.0], [0.5])], 0.05) is None  # no degrees of freedom
    assert stats.log_ratio([([1.0, 0.0], [0.5, 0.4])], 0.05) is None  # a zero has no log
    exact = stats.log_ratio([([1.0, 1.0], [0.5, 0.5])], 0.05)
    assert (exact.p_value, exact.improvement_pct) == (0.0, 50.0)


@pytest.mark.parametrize("n, margin, expected", [(14, 20, 14), (40, 10, 29), (12, 20, 14)])
def test_a_perfect_record_bounds_the_drop_only_with_enough_runs(n, margin, expected):
    q = stats.quality([((n, n), (n, n))], alpha=0.05)
    assert q.drop_upper_pct == pytest.approx(100 * (1 - 0.05 ** (1 / n)))
    assert stats.runs_to_bound_drop(margin, 0.05) == expected
    assert (q.drop_upper_pct <= margin) is (n >= expected)


def test_the_cmh_statistic_matches_its_closed_form_on_one_stratum():
    q = stats.quality([((9, 10), (4, 10))], alpha=0.05)
    # one 2x2 table: E = 10 * 13 / 20, V = 10 * 10 * 13 * 7 / (20^2 * 19)
    z = (4 - 6.5 + 0.5) / math.sqrt(100 * 13 * 7 / (400 * 19))
    assert q.decrease_p_value == pytest.approx(sps.norm.cdf(z))
    assert q.drop_pct == pytest.approx(50.0)


def test_detectable_improvement_shrinks_with_runs_and_grows_with_noise():
    few, many = (stats.detectable_improvement_pct(0.3, 4, runs, 0.05, 0.8) for runs in (3, 10))
    assert few > many > 0
    assert stats.detectable_improvement_pct(0.5, 4, 10, 0.05, 0.8) > many
    assert stats.detectable_improvement_pct(0.3, 4, 1, 0.05, 0.8) is None


# --- the rule, one case per reason ---------------------------------------------------------------------------

RNG = random.Random(7)
FOUR = {f"t{i}": (noisy(5, 1.0 + i, RNG), noisy(5, 0.7 * (1.0 + i), RNG)) for i in range(4)}
SAME = {f"t{i}": (noisy(5, 1.0, RNG, 0.4), noisy(5, 1.0, RNG, 0.4)) for i in range(4)}


def test_a_clearly_cheaper_candidate_is_promoted_with_its_estimate():
    decision = decide(cells(FOUR))
    assert decision["decision"] == "promote", decision["reasons"]
    estimate = decision["estimate"]
    assert estimate["p_value"] < 0.04 and 20 < estimate["improvement_pct"] < 40
    assert estimate["confidence"] == 0.92  # one-sided at alpha - quality_promotion_alpha on each side
    assert [row["task"] for row in decision["tasks"]] == ["t0", "t1", "t2", "t3"]
    assert all(row["interval_pct"][0] < row["improvement_pct"] < row["interval_pct"][1] for row in decision["tasks"])
    assert decision["seed"] is None and all(row["seed"] is None for row in decision["tasks"])


@pytest.mark.parametrize("name, tasks, kinds, policy, expected, reason", [
    ("noise is not an improvement", SAME, {}, {}, "keep_incumbent", "not significant"),
    ("significant but too small", FOUR, {}, {"min_improvement_pct": 60}, "keep_incumbent",
     "significant, but below the required 60%"),
    ("too few runs", {"t": ([1.0, 1.1], [0.5, 0.6])}, {}, {}, "insufficient_evidence",
     "t: needs at least 3 valid runs per arm (got 2/2)"),
    ("an unmeasured run", {"t": ([1.0] * 14, [0.5] * 13 + [None])}, {}, {}, "insufficient_evidence",
     "t: cost_usd was not measured in 1 valid run(s)"),
    ("a free run", {"t": ([1.0] * 14, [0.5] * 13 + [0.0])}, {}, {}, "insufficient_evidence",
     "t: cost_usd is zero in 1 valid run(s)"),
    ("one run each cannot show a spread", {"t": ([1.0], [0.5])}, {}, {"min_runs": 1}, "insufficient_evidence",
     "the spread of cost_usd cannot be estimated"),
    ("too few runs to bound a drop", {"t": ([1.0, 1.1, 0.9] * 4, [0.5, 0.55, 0.45] * 4)}, {}, {},
     "insufficient_evidence", "even with every run resolved it takes at least 14 valid runs per arm"),
    ("a wider margin needs fewer runs", {"t": ([1.0, 1.1, 0.9] * 4, [0.5, 0.55, 0.45] * 4)}, {},
     {"max_resolution_drop_pct": 30}, "promote", "estimated improvement 50.0%"),
])
def test_rule(name, tasks, kinds, policy, expected, reason):
    decision = decide(cells(tasks, cand_kinds=kinds), **policy)
    assert decision["decision"] == expected, decision["reasons"]
    assert any(reason in r for r in decision["reasons"]), decision["reasons"]


def test_a_cheaper_candidate_that_resolves_less_is_kept():
    tasks = {f"t{i}": ([1.0, 1.1, 0.9, 1.05, 0.95] * 2, [0.6, 0.66, 0.54, 0.63, 0.57] * 2) for i in range(3)}
    failed = {f"t{i}": [None] * 6 + ["oracle-failed"] * 4 for i in range(3)}
    decision = decide(cells(tasks, cand_kinds=failed))
    assert decision["decision"] == "keep_incumbent"
    assert "resolution fell (30/30 -> 18/30 resolved): the stratified test for a decrease" in decision["reasons"][0]
    assert decision["estimate"]["improvement_pct"] > 30  # cheaper indeed: quality decided first


def test_a_small_unbounded_drop_keeps_the_incumbent():
    tasks = {f"t{i}": ([1.0, 1.1, 0.9, 1.05, 0.95], [0.6, 0.66, 0.54, 0.63, 0.57]) for i in range(4)}
    one_fail = {"t0": [None] * 4 + ["verify-failed"]}
    decision = decide(cells(tasks, cand_kinds=one_fail))
    assert decision["decision"] == "keep_incumbent"
    assert decision["reasons"][0].startswith("resolution fell by 5.0 points and a resolution drop of up to")


def test_resolution_alone_promotes_only_on_its_own_significant_test():
    tasks = {f"t{i}": ([1.0, 1.1, 0.9, 1.05, 0.95] * 4, [1.0, 1.1, 0.9, 1.05, 0.95] * 4) for i in range(3)}
    worse = {f"t{i}": [None] * 8 + ["oracle-failed"] * 12 for i in range(3)}
    decision = decide(cells(tasks, inc_kinds=worse))
    assert decision["decision"] == "promote", decision["reasons"]
    assert decision["reasons"][0].startswith("resolution rose (24/60 -> 60/60 resolved)")
    assert decide(cells(tasks, inc_kinds=worse), quality_promotion_alpha=0)["decision"] == "keep_incumbent"


def test_per_protocol_leaves_out_runs_whose_skill_did_not_load_and_is_not_decided_on():
    tasks = {f"t{i}": ([1.0, 1.1, 0.9, 1.05, 0.95] * 3, [0.6, 0.66, 0.54, 0.63, 0.57] * 3) for i in range(2)}
    skipped = {f"t{i}": ["skill-not-invoked"] * 3 + [None] * 12 for i in range(2)}
    decision = decide(cells(tasks, cand_kinds=skipped))
    assert decision["decision"] == "keep_incumbent"  # the skipped runs are failures: quality decides
    protocol, overall = decision["per_protocol"], decision["estimate"]
    assert protocol["df"] == overall["df"] - 6  # three runs per task left out of the candidate arm
    assert protocol["improvement_pct"] != overall["improvement_pct"]


def test_excluded_runs_are_reported_and_left_out():
    tasks = {f"t{i}": ([1.0, 1.1, 0.9, 1.05, 0.95] * 3, [0.6, 0.66, 0.54, 0.63, 0.57] * 3) for i in range(2)}
    infra = {"t0": ["infra-error"] + [None] * 14}
    decision = decide(cells(tasks, cand_kinds=infra))
    assert "1 run(s) excluded as harness faults (docs/formats.md, missing data)" in decision["reasons"]
    assert decision["quality"]["candidate"] == {"resolved": 29, "valid_runs": 29}


def test_the_decision_does_not_depend_on_row_order():
    rows = []
    for task, (inc, cand) in FOUR.items():
        rows += runs(task, INCUMBENT, inc) + runs(task, CANDIDATE, cand)
    classes = dict.fromkeys(FOUR, "trivial")
    forward = decide(aggregate(rows, classes, [INCUMBENT, CANDIDATE]))
    backward = decide(aggregate(rows[::-1], classes, [INCUMBENT, CANDIDATE]))
    assert forward == backward
