"""The tested rules (`gate.policy: per_resolved`, the default, and `geometric`) and the statistics under them,
checked against independent computations (closed forms, scipy's own t-test) and one case per reason.

Error rates are not asserted here beyond a coarse calibration check: `make gate-study` measures them by
simulation against this same code.
"""

from __future__ import annotations

import json
import math
import random

import pytest
from scipy import stats as sps

from skillevo import stats
from skillevo.core.config import Policy
from skillevo.core.results import aggregate
from skillevo.files import schemas
from skillevo.gate import decide_arm, report
from tests.gate_rows import CANDIDATE, INCUMBENT, runs

MODEL = "skillevo-sim-1"


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


def resolved(values: list[float], failed: int = 0) -> list[tuple[float, bool]]:
    return [(v, i >= failed) for i, v in enumerate(values)]


# --- per_resolved: the estimand and its test -----------------------------------------------------------------


def test_the_estimate_is_dollars_per_resolved_task_over_the_task_set():
    inc = [resolved([1.0, 3.0]), resolved([10.0, 14.0], failed=1)]  # 2 + 12 dollars a round, 1 + 0.5 resolved
    cand = [resolved([2.0, 2.0], failed=1), resolved([9.0, 11.0])]  # 2 + 10 dollars, 0.5 + 1 resolved
    est = stats.per_resolved([(inc[0], cand[0]), (inc[1], cand[1])], alpha=0.04)
    assert est.per_resolved == pytest.approx((14 / 1.5, 12 / 1.5))
    assert est.ratio == pytest.approx(12 / 14) and est.improvement_pct == pytest.approx(100 * (1 - 12 / 14))
    assert est.estimand == "per_resolved" and est.method == "bootstrap-t" and est.resamples == 1999


def test_a_saving_on_the_dearest_task_counts_in_dollars_where_the_geometric_mean_dilutes_it():
    rng = random.Random(11)
    strata = [(noisy(12, base, rng, 0.1), noisy(12, base * (0.7 if base == 8 else 1.0), rng, 0.1))
              for base in (0.5, 1, 2, 8)]
    dollars = stats.per_resolved([(resolved(a), resolved(b)) for a, b in strata], 0.04)
    geometric = stats.log_ratio(strata, 0.04)
    assert 22 < dollars.improvement_pct < 28  # 30% of 8 / 11.5 dollars
    assert 5 < geometric.improvement_pct < 11  # one task of four


def test_a_wider_spread_with_the_same_mean_dollars_is_no_saving_in_dollars():
    """Twice the log spread at the same mean: the geometric mean reads it as cheaper, dollars do not."""
    rng = random.Random(12)
    sigma = 0.35

    def draw(s: float) -> list[float]:
        return [math.exp(rng.gauss(-s * s / 2, s)) for _ in range(4000)]

    strata = [(draw(sigma), draw(2 * sigma))]
    assert stats.log_ratio(strata, 0.04).improvement_pct > 10
    assert abs(stats.per_resolved([(resolved(a), resolved(b)) for a, b in strata], 0.04).improvement_pct) < 5


def test_the_same_runs_give_the_same_p_value_and_order_does_not_matter():
    rng = random.Random(13)
    strata = [(resolved(noisy(6, b, rng, 0.3), 1), resolved(noisy(6, 0.8 * b, rng, 0.3))) for b in (1, 2, 4)]
    one, again = stats.per_resolved(strata, 0.04), stats.per_resolved(strata, 0.04)
    assert one == again
    low, high = one.interval_pct
    assert low < one.improvement_pct < high and 0 < one.p_value < 1



def test_several_levels_from_one_resampling_are_each_level_on_its_own():
    """A look asks for its estimate and its futility bound from one resampling (per_resolved_at): each must be what
    the gate computes at that level alone, interval and per-task intervals too, and a wider level a wider interval."""
    rng = random.Random(15)
    strata = [(resolved(noisy(7, b, rng, 0.4), 1), resolved(noisy(7, 0.85 * b, rng, 0.4))) for b in (1, 3)]
    both = stats.per_resolved_at(strata, (0.04, 0.2))
    assert both == (stats.per_resolved(strata, 0.04), stats.per_resolved(strata, 0.2))
    assert both[0].interval_pct[0] < both[1].interval_pct[0] < both[1].interval_pct[1] < both[0].interval_pct[1]
    assert stats.per_resolved_at([([(1.0, True)], [(0.5, True)])], (0.04, 0.2)) is None

def test_a_tail_seen_on_another_task_widens_a_task_whose_runs_missed_it():
    """The dear task's runs look tight and 20% cheaper; a 5x retry loop shows on a cheap task. Pooled, the loop says
    the dear task's few runs are not precise: the p-value rises."""
    rng = random.Random(14)
    dear = (resolved(noisy(10, 4.0, rng, 0.3)), resolved(noisy(10, 3.2, rng, 0.3)))
    cheap_inc, cheap_cand = noisy(10, 0.5, rng, 0.3), noisy(10, 0.4, rng, 0.3)
    looped = cheap_cand[:-1] + [cheap_cand[-1] * 5]
    without = stats.per_resolved([dear, (resolved(cheap_inc), resolved(cheap_cand))], 0.04)
    with_loop = stats.per_resolved([dear, (resolved(cheap_inc), resolved(looped))], 0.04)
    assert with_loop.p_value > 2 * without.p_value


def test_no_estimate_where_cost_per_resolved_task_is_undefined():
    assert stats.per_resolved([([(1.0, True)], [(0.5, True)])], 0.04) is None  # no spread to estimate
    assert stats.per_resolved([(resolved([1.0, 2.0]), resolved([1.0, 2.0], failed=2))], 0.04) is None
    assert stats.per_resolved([(resolved([1.0, 2.0]), resolved([0.0, 0.0]))], 0.04) is None
    free = stats.per_resolved([(resolved([1.0, 1.1, 0.9]), resolved([0.0, 0.5, 0.6]))], 0.04)
    assert free is not None and free.improvement_pct > 0  # a free run is a run, unlike on a log scale
    exact = stats.per_resolved([(resolved([1.0, 1.0]), resolved([0.5, 0.5]))], 0.04)
    assert (exact.p_value, exact.improvement_pct, exact.resamples) == (0.0, 50.0, 0)


def test_a_task_its_candidate_never_resolved_has_no_estimate_of_its_own():
    est = stats.per_resolved([(resolved([1.0, 1.2, 0.9]), resolved([0.5, 0.6, 0.5], failed=3)),
                              (resolved([2.0, 2.1, 1.9]), resolved([1.5, 1.6, 1.4]))], 0.04)
    assert est.per_task[0] is None and est.per_task[1] is not None


def test_the_level_holds_on_seeded_identical_arms():
    """A coarse calibration check (the study measures it properly): over 200 seeded benches of two identical
    lognormal arms, 4 tasks of 10 runs, rejections at 0.04 stay near 0.04."""
    rng = random.Random(15)
    rejected = 0
    for _ in range(200):
        strata = [(resolved(noisy(10, b, rng, 0.35)), resolved(noisy(10, b, rng, 0.35))) for b in (0.5, 1, 2, 4)]
        rejected += stats.per_resolved(strata, 0.04).p_value <= 0.04
    assert rejected <= 16  # 8% of 200: alpha 0.04 plus three standard errors


# --- geometric: the earlier test, kept for comparison --------------------------------------------------------


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


def test_no_spread_no_positive_values_no_geometric_estimate():
    assert stats.log_ratio([([1.0], [0.5])], 0.05) is None  # no degrees of freedom
    assert stats.log_ratio([([1.0, 0.0], [0.5, 0.4])], 0.05) is None  # a zero has no log
    exact = stats.log_ratio([([1.0, 1.0], [0.5, 0.5])], 0.05)
    assert (exact.p_value, exact.improvement_pct) == (0.0, 50.0)


# --- resolution and power -------------------------------------------------------------------------------------


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


def test_p_values_keep_their_significant_figures():
    assert stats.significant(1.8812e-11) == 1.88e-11 and stats.significant(0.0) == 0.0
    assert stats.significant(0.123456) == 0.123
    # the bootstrap's smallest p-value means no resample was as extreme: at most that, and said so
    assert stats.p_text({"p_value": 0.0005, "resamples": 1999}) == "p<=0.0005"
    assert stats.p_text({"p_value": 0.0035, "resamples": 1999}) == "p=0.0035"
    assert stats.p_text({"p_value": 1.88e-11, "resamples": None}) == "p=1.88e-11"


# --- the rule, one case per reason ---------------------------------------------------------------------------

RNG = random.Random(7)
FOUR = {f"t{i}": (noisy(10, 1.0 + i, RNG), noisy(10, 0.7 * (1.0 + i), RNG)) for i in range(4)}
SAME = {f"t{i}": (noisy(10, 1.0, RNG, 0.4), noisy(10, 1.0, RNG, 0.4)) for i in range(4)}
FEW = {"min_total_runs": 1}


def test_a_clearly_cheaper_candidate_is_promoted_with_its_estimate():
    decision = decide(cells(FOUR))
    assert decision["decision"] == "promote", decision["reasons"]
    estimate = decision["estimate"]
    assert estimate["estimand"] == "per_resolved" and estimate["p_value"] < 0.04
    assert 20 < estimate["improvement_pct"] < 40 and estimate["per_resolved"]["candidate"] < estimate[
        "per_resolved"]["incumbent"]
    assert estimate["confidence"] == 0.9  # one-sided at alpha on each side
    assert "cost_usd per resolved task: estimated improvement" in decision["reasons"][0]
    assert [row["task"] for row in decision["tasks"]] == ["t0", "t1", "t2", "t3"]
    assert all(row["interval_pct"][0] < row["improvement_pct"] < row["interval_pct"][1] for row in decision["tasks"])
    assert decision["seed"] is None and decision["exclusion_bound"] is None
    assert decision["claim"] == ("the candidate is cheaper per resolved task than its control, in cost_usd over the "
                                 "gate's tasks, by at least 5% as estimated, with a false-promotion rate of at most "
                                 "0.05, and resolves no less within 20 points")
    assert decide(cells(SAME))["claim"] is None


def test_below_min_total_runs_only_a_significant_drop_answers():
    """With too few runs the answer is insufficient_evidence, whatever the resolution bound says; a significant
    drop in resolution may still keep the incumbent (it needs no tail to be seen)."""
    few = {f"t{i}": ([1.0, 1.1, 0.9, 1.05, 0.95], [1.0, 1.1, 0.9, 1.05, 0.95]) for i in range(3)}
    unbounded = decide(cells(few, cand_kinds={"t0": ["oracle-failed"] + [None] * 4}), min_total_runs=40)
    assert unbounded["decision"] == "insufficient_evidence", unbounded["reasons"]
    assert "gate.min_total_runs" in unbounded["reasons"][0]
    fell = decide(cells(few, cand_kinds={t: ["oracle-failed"] * 4 + [None] for t in few}), min_total_runs=40)
    assert fell["decision"] == "keep_incumbent" and fell["reasons"][0].startswith("resolution fell"), fell["reasons"]


@pytest.mark.parametrize("name, tasks, kinds, policy, expected, reason", [
    ("noise is not an improvement", SAME, {}, {}, "keep_incumbent", "not significant"),
    ("significant but too small", FOUR, {}, {"min_improvement_pct": 60}, "keep_incumbent",
     "significant, but below the required 60%"),
    ("too few runs", {"t": ([1.0, 1.1], [0.5, 0.6])}, {}, FEW, "insufficient_evidence",
     "t: needs at least 3 valid runs per arm (got 2/2)"),
    ("too few runs for the estimate", {f"t{i}": ([1.0, 1.1, 0.9] * 2, [0.5, 0.55, 0.45] * 2) for i in range(3)}, {},
     {"min_total_runs": 40}, "insufficient_evidence", "18 valid runs in an arm over the 3 gate task(s) (incumbent 18, "
     "candidate 18): a promotion's estimate is stated on at least 40 (gate.min_total_runs)"),
    ("an unmeasured run", {"t": ([1.0] * 14, [0.5] * 13 + [None])}, {}, FEW, "insufficient_evidence",
     "t: cost_usd was not measured in 1 valid run(s)"),
    ("a free run is measured", {"t": ([1.0, 1.1, 0.9] * 5, [0.5, 0.55, 0.45] * 4 + [0.0, 0.5, 0.5])}, {}, FEW,
     "promote", "per resolved task"),
    ("a free run on a log scale", {"t": ([1.0] * 14, [0.5] * 13 + [0.0])}, {}, {"policy": "geometric"},
     "insufficient_evidence", "t: cost_usd is zero in 1 valid run(s)"),
    ("one run each cannot show a spread", {"t": ([1.0], [0.5])}, {}, {"min_runs": 1, "min_total_runs": 1},
     "insufficient_evidence", "the spread of cost_usd cannot be estimated"),
    ("too few runs to bound a drop", {"t": ([1.0, 1.1, 0.9] * 4, [0.5, 0.55, 0.45] * 4)}, {},
     {**FEW, "test": "bootstrap"},
     "insufficient_evidence", "even with every run resolved it takes at least 14 valid runs per arm"),
    ("too few runs to bet against a drop", {"t": ([1.0, 1.1, 0.9] * 4, [0.5, 0.55, 0.45] * 4)}, {},
     {**FEW, "test": "betting"}, "insufficient_evidence",
     "a resolution drop of 20 points or more cannot be ruled out: the bet against it"),
    ("a wider margin needs fewer runs", {"t": ([1.0, 1.1, 0.9] * 4, [0.5, 0.55, 0.45] * 4)}, {},
     {"max_resolution_drop_pct": 30, "min_total_runs": 1}, "promote", "estimated improvement 50.0%"),
])
def test_rule(name, tasks, kinds, policy, expected, reason):
    decision = decide(cells(tasks, cand_kinds=kinds), **policy)
    assert decision["decision"] == expected, decision["reasons"]
    assert any(reason in r for r in decision["reasons"]), decision["reasons"]


def test_a_cheaper_candidate_that_resolves_less_is_kept():
    tasks = {f"t{i}": ([1.0, 1.1, 0.9, 1.05, 0.95] * 2, [0.6, 0.66, 0.54, 0.63, 0.57] * 2) for i in range(3)}
    failed = {f"t{i}": [None] * 6 + ["oracle-failed"] * 4 for i in range(3)}
    decision = decide(cells(tasks, cand_kinds=failed), **FEW)
    assert decision["decision"] == "keep_incumbent"
    assert "resolution fell (30/30 -> 18/30 resolved): the stratified test for a decrease" in decision["reasons"][0]
    assert abs(decision["estimate"]["improvement_pct"]) < 1  # 40% cheaper per run, as dear per resolved task


def test_cheaper_per_run_but_dearer_per_resolved_task_is_kept():
    """10% cheaper per run, but a third of its runs fail: per resolved task it costs more."""
    tasks = {f"t{i}": ([1.0, 1.1, 0.9, 1.05, 0.95] * 3, [0.9, 0.99, 0.81, 0.945, 0.855] * 3) for i in range(4)}
    failed = {f"t{i}": [None] * 10 + ["oracle-failed"] * 5 for i in range(4)}
    decision = decide(cells(tasks, cand_kinds=failed), quality_alpha=1e-9, max_resolution_drop_pct=100)
    assert decision["decision"] == "keep_incumbent", decision["reasons"]
    assert decision["estimate"]["improvement_pct"] < 0
    assert decide(cells(tasks, cand_kinds=failed), policy="geometric", quality_alpha=1e-9,
                  max_resolution_drop_pct=100)["estimate"]["improvement_pct"] > 9  # per run it looked cheaper


def test_a_small_unbounded_drop_keeps_the_incumbent():
    tasks = {f"t{i}": ([1.0, 1.1, 0.9], [0.6, 0.66, 0.54]) for i in range(4)}
    one_fail = {"t0": [None] * 2 + ["verify-failed"]}
    decision = decide(cells(tasks, cand_kinds=one_fail), **FEW, test="betting")
    assert decision["decision"] == "keep_incumbent"
    assert decision["reasons"][0].startswith("resolution fell by 8.3 points and a resolution drop of 20 points or "
                                             "more cannot be ruled out"), decision["reasons"]


def test_resolving_more_never_promotes_on_its_own():
    """A candidate that resolves far more but costs the same per run is no cheaper per run: the geometric policy,
    whose claim is per run, keeps the incumbent; no path promotes on resolution alone (docs/gate.md, claims)."""
    tasks = {f"t{i}": ([1.0, 1.1, 0.9, 1.05, 0.95] * 4, [1.0, 1.1, 0.9, 1.05, 0.95] * 4) for i in range(3)}
    worse = {f"t{i}": [None] * 8 + ["oracle-failed"] * 12 for i in range(3)}
    decision = decide(cells(tasks, inc_kinds=worse), policy="geometric")
    assert decision["decision"] == "keep_incumbent", decision["reasons"]
    assert decision["claim"] is None


def test_resolving_more_but_dearer_per_resolved_task_is_kept():
    """Resolution rises 20 points, but each run costs 40% more: 1.4 / 1.25 = 12% dearer per resolved task. The
    old resolves-more path promoted such a candidate; its one claim, cheaper per resolved task, is false here."""
    tasks = {f"t{i}": ([1.0, 1.1, 0.9, 1.05, 0.95] * 4, [1.4, 1.54, 1.26, 1.47, 1.33] * 4) for i in range(3)}
    worse = {f"t{i}": [None] * 16 + ["oracle-failed"] * 4 for i in range(3)}
    decision = decide(cells(tasks, inc_kinds=worse))
    assert decision["decision"] == "keep_incumbent", decision["reasons"]
    assert decision["estimate"]["improvement_pct"] < 0


def test_resolving_more_at_the_same_cost_per_run_is_cheaper_per_resolved_task():
    tasks = {f"t{i}": ([1.0, 1.1, 0.9, 1.05, 0.95] * 4, [1.0, 1.1, 0.9, 1.05, 0.95] * 4) for i in range(3)}
    worse = {f"t{i}": [None] * 8 + ["oracle-failed"] * 12 for i in range(3)}
    decision = decide(cells(tasks, inc_kinds=worse))
    assert decision["decision"] == "promote", decision["reasons"]
    assert decision["estimate"]["improvement_pct"] == pytest.approx(60.0)  # 24 -> 60 resolved for the same dollars


def test_per_protocol_leaves_out_runs_whose_skill_did_not_load_and_is_not_decided_on():
    tasks = {f"t{i}": ([1.0, 1.1, 0.9, 1.05, 0.95] * 3, [0.6, 0.66, 0.54, 0.63, 0.57] * 3) for i in range(2)}
    skipped = {f"t{i}": ["skill-not-invoked"] * 3 + [None] * 12 for i in range(2)}
    decision = decide(cells(tasks, cand_kinds=skipped), **FEW)
    assert decision["decision"] == "keep_incumbent"  # the skipped runs are failures: quality decides
    protocol, overall = decision["per_protocol"], decision["estimate"]
    assert protocol["improvement_pct"] > overall["improvement_pct"]  # the failures cost, and resolved nothing


def test_an_excluded_run_must_not_flatter_the_candidate():
    """The candidate's costliest run per task is lost to a 'harness fault': as it stands the candidate promotes,
    but not with each lost run counted unresolved at its task's highest observed cost."""
    rng = random.Random(16)
    tasks = {f"t{i}": (noisy(11, 1.0 + i, rng, 0.3), noisy(11, 0.85 * (1.0 + i), rng, 0.3)) for i in range(4)}
    lost = {task: ["infra-error" if v == max(cand) else None for v in cand] for task, (_, cand) in tasks.items()}
    as_is = decide(cells(tasks, cand_kinds=lost), max_resolution_drop_pct=100, quality_alpha=1e-9, test="betting")
    assert as_is["decision"] == "keep_incumbent", as_is["reasons"]
    assert as_is["exclusion_bound"] is None  # the test by betting counts each lost run at its worst itself
    assert "4 run(s) excluded as harness faults (docs/formats.md, missing data)" in as_is["reasons"]
    kept = [[v for v in cand if v != max(cand)] for _, cand in tasks.values()]
    dropped = {task: (inc[:10], k) for (task, (inc, _)), k in zip(tasks.items(), kept, strict=True)}
    assert decide(cells(dropped), max_resolution_drop_pct=100, quality_alpha=1e-9, test="betting")["decision"] \
        == "promote"
    bootstrap = decide(cells(tasks, cand_kinds=lost), max_resolution_drop_pct=100, quality_alpha=1e-9,
                       test="bootstrap")
    assert bootstrap["decision"] == "keep_incumbent" and bootstrap["exclusion_bound"]["imputed_candidate_runs"] == 4


def test_an_excluded_run_that_changes_nothing_leaves_a_promotion_standing():
    tasks = {f"t{i}": ([1.0, 1.1, 0.9, 1.05, 0.95] * 2 + [1.0], [0.6, 0.66, 0.54, 0.63, 0.57] * 2 + [0.6])
             for i in range(4)}
    infra = {"t0": ["infra-error"] + [None] * 10}
    decision = decide(cells(tasks, cand_kinds=infra), max_resolution_drop_pct=100, test="betting")
    assert decision["decision"] == "promote", decision["reasons"]
    assert decision["exclusion_bound"] is None and decision["test"]["e_value"] >= 20
    assert decision["quality"]["candidate"] == {"resolved": 43, "valid_runs": 43}


def test_the_decision_does_not_depend_on_row_order():
    rows = []
    for task, (inc, cand) in FOUR.items():
        rows += runs(task, INCUMBENT, inc) + runs(task, CANDIDATE, cand)
    classes = dict.fromkeys(FOUR, "trivial")
    forward = decide(aggregate(rows, classes, [INCUMBENT, CANDIDATE]))
    backward = decide(aggregate(rows[::-1], classes, [INCUMBENT, CANDIDATE]))
    assert forward == backward


def test_an_unbounded_interval_is_null_in_promotion_json_and_reads_as_unbounded():
    """Three runs a cell, a task whose resamples often resolve nothing: its bootstrap-t quantile is infinite. JSON
    has no infinity, so the gate once crashed writing promotion.json (CI, realistic noise at 3 runs)."""
    inc = {"t0": [(2.1183, False), (1.2341, True), (0.7868, True)], "t1": [(0.2924, True), (0.8988, True),
           (0.9267, False)], "t2": [(1.2455, True), (0.5693, True), (2.5802, True)]}
    cand = {"t0": [(1.2085, False), (1.0834, False), (0.5392, True)], "t1": [(1.8692, True), (1.2147, False),
            (0.4041, True)], "t2": [(1.4174, True), (0.5623, True), (0.9831, True)]}
    rows = []
    for task in inc:
        for arm, runs_ in ((INCUMBENT, inc[task]), (CANDIDATE, cand[task])):
            rows += runs(task, arm, [c for c, _ in runs_], kinds=[None if ok else "verify-failed" for _, ok in runs_])
    decision = decide(aggregate(rows, dict.fromkeys(inc, "trivial"), [INCUMBENT, CANDIDATE]), **FEW,
                      max_resolution_drop_pct=100)
    assert decision["tasks"][0]["interval_pct"][0] is None  # t0: no finite bound on how much dearer
    json.dumps(decision, allow_nan=False)
    schemas.schema_validator("promotion", "decision").validate(decision)
    assert any(line.startswith("| t0 |") and "unbounded to" in line for line in report._decision_section(decision))
