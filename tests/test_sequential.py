"""Sequential candidate runs: the look boundaries against published values and exact probabilities, the planned
looks, interim's stopping rule one case per reason, and the bench.json record it writes.

Error rates under the bench's stopping are not asserted here: `make gate-study` (sequential mode) measures
them by simulation against this same code and the gate's.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from skillevo import stats
from skillevo.core import sampling
from skillevo.core.config import LOOKS_READ_FROM_GATE, SamplingParams, section
from skillevo.files.errors import BadInput
from skillevo.stats.looks import _boundaries
from tests.gate_rows import CANDIDATE, INCUMBENT, runs

OTHER_INCUMBENT, OTHER = "auto", "candidate_auto"


def plan(runs_: int = 10, **knobs) -> SamplingParams:
    """Looks on; these benches are small, so the heavy-tail minimum (tested with the gate) is off unless given, and
    the level, the first look and futility are the figures these cases were built at. A knob the looks read from
    the gate (config.LOOKS_READ_FROM_GATE) goes to the gate's section, the others to sampling.sequential."""
    gate = {"min_total_runs": 1, "alpha": 0.04, **{k: v for k, v in knobs.items() if k in LOOKS_READ_FROM_GATE}}
    sequential = {k: v for k, v in knobs.items() if k not in LOOKS_READ_FROM_GATE}
    return section(SamplingParams, "sampling", {"runs": runs_, "sequential": {
        "enabled": True, "first": 3, "batch": 2, "futility_p_value": 0.5, "futility_below_pct": 10,
        **sequential}}, "test plan", gate=gate)


def increasing_looks(draw_max: int = 30):
    return st.lists(st.integers(1, draw_max), min_size=1, max_size=6, unique=True).map(lambda xs: tuple(sorted(xs)))


# --- boundaries ------------------------------------------------------------------------------------------------


def test_the_recursion_reproduces_published_obrien_fleming_spending_boundaries():
    # Lan-DeMets O'Brien-Fleming spending, 5 equally spaced looks, one-sided 0.025: gsDesign's sfLDOF bounds
    fractions = [0.2, 0.4, 0.6, 0.8, 1.0]
    cumulative = [stats.spent(t, 0.025) for t in fractions]
    increments = [b - a for a, b in zip([0.0, *cumulative], cumulative, strict=False)]
    published = [4.8769, 3.3569, 2.6803, 2.2898, 2.0310]
    assert _boundaries(fractions, increments) == pytest.approx(published, abs=2e-4)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 20), st.integers(1, 20), st.floats(0.005, 0.2))
def test_two_looks_spend_exactly_alpha_under_their_joint_normal_law(first, more, alpha):
    looks = (first, first + more)
    levels = stats.look_levels(looks, alpha)
    t1, t2 = stats.look_fractions(looks)
    c = [sps.norm.isf(level) for level in levels]
    joint = sps.multivariate_normal(mean=[0, 0], cov=[[1, math.sqrt(t1 / t2)], [math.sqrt(t1 / t2), 1]])
    rejected_somewhere = 1 - joint.cdf(c)
    assert rejected_somewhere == pytest.approx(alpha, abs=2e-5)
    assert levels[0] == pytest.approx(stats.spent(first / looks[-1], alpha), rel=1e-9)  # nothing to share yet


def test_three_looks_spend_exactly_alpha_by_simulation():
    looks, alpha = (3, 5, 7), 0.05
    levels = stats.look_levels(looks, alpha)
    rng = random.Random(4)
    n, hits = 200_000, 0
    crit = [sps.norm.isf(level) for level in levels]
    for _ in range(n):
        # the looks' statistics built from runs, not from the canonical law: shared incumbent, growing candidate
        inc = sum(rng.gauss(0, 1) for _ in range(looks[-1])) / looks[-1]
        total, previous, crossed = 0.0, 0, False
        for runs_, c in zip(looks, crit, strict=True):
            total += sum(rng.gauss(0, 1) for _ in range(runs_ - previous))
            previous = runs_
            z = (inc - total / runs_) / math.sqrt(1 / runs_ + 1 / looks[-1])
            crossed = crossed or z >= c
        hits += crossed
    assert abs(hits / n - alpha) < 4 * math.sqrt(alpha * (1 - alpha) / n)


@settings(max_examples=50, deadline=None)
@given(increasing_looks(), st.floats(0.001, 0.3))
def test_bonferroni_levels_sum_to_alpha_and_the_exact_ones_are_never_stricter(looks, alpha):
    bonferroni = stats.look_levels(looks, alpha, "bonferroni")
    exact = stats.look_levels(looks, alpha, "spending")
    assert sum(bonferroni) == pytest.approx(alpha, rel=1e-9)
    assert all(level >= 0 for level in bonferroni)
    # P(Z_j >= c_j) >= P(the first crossing is at j) = the alpha spent at j
    assert all(e >= b - 1e-9 for e, b in zip(exact, bonferroni, strict=True))
    assert all(e <= alpha + 1e-12 for e in exact)


@pytest.mark.parametrize("looks", [(5,), (1,), (100,)])
def test_one_look_is_the_fixed_design(looks):
    assert stats.look_levels(looks, 0.04) == (pytest.approx(0.04),)
    assert stats.look_levels(looks, 0.04, "bonferroni") == (pytest.approx(0.04),)


def test_the_fractions_are_the_correlations_of_looks_that_share_the_incumbent():
    looks, n = (2, 6, 9), 9
    fractions = stats.look_fractions(looks)
    variance = [1 / k + 1 / n for k in looks]
    for i in range(3):
        for j in range(i + 1, 3):
            covariance = 1 / looks[j] + 1 / n  # the later mean shares the earlier runs; the incumbent is shared
            correlation = covariance / math.sqrt(variance[i] * variance[j])
            assert correlation == pytest.approx(math.sqrt(fractions[i] / fractions[j]))
    assert fractions[-1] == 1.0


@pytest.mark.parametrize("looks", [(), (3, 3), (5, 3), (0, 2)])
def test_looks_must_be_increasing_positive_counts(looks):
    with pytest.raises(ValueError, match="increasing positive"):
        stats.look_fractions(looks)


def test_an_unknown_boundary_is_refused():
    with pytest.raises(ValueError, match="unknown look boundary"):
        stats.look_levels((3, 5), 0.04, "pocock")


# --- the planned looks and the record ------------------------------------------------------------------------


@pytest.mark.parametrize("runs_, sequential, expected", [
    (5, {"enabled": False}, (5,)),
    (5, {}, (3, 5)),
    (10, {}, (3, 5, 7, 9, 10)),
    (10, {"first": 4, "batch": 3}, (4, 7, 10)),
    (3, {}, (3,)),
    (2, {}, (2,)),
    (6, {"first": 1, "batch": 1}, (1, 2, 3, 4, 5, 6)),
])
def test_planned_looks(runs_, sequential, expected):
    assert sampling.looks(plan(runs_, **sequential)) == expected


@pytest.mark.parametrize("look, action, expected", [
    (1, sampling.FUTILITY, "futility"),
    (2, sampling.PROMOTE, "promote"),
    (5, sampling.CONTINUE, "max"),
    (5, sampling.PROMOTE, "promote"),
])
def test_the_record_names_the_look_and_the_reason(look, action, expected):
    assert sampling.record(plan(), look, action) == {"looks": [3, 5, 7, 9, 10], "stopped_at_look": look,
                                                      "reason": expected}


@pytest.mark.parametrize("look, action", [(2, sampling.CONTINUE), (0, sampling.PROMOTE), (6, sampling.FUTILITY),
                                          (1, "stop")])
def test_a_record_of_no_stop_is_refused(look, action):
    with pytest.raises(BadInput, match="rule: planned looks"):
        sampling.record(plan(), look, action)


# --- interim, one case per reason ----------------------------------------------------------------------------

RNG = random.Random(11)
TASKS = ("t1", "t2", "t3")


def noisy(n: int, scale: float, sd: float = 0.1) -> list[float]:
    return [round(scale * math.exp(RNG.gauss(0, sd)), 6) for _ in range(n)]


def side(arm: str, ratio: float, n: int, *, kinds=None, costs=None) -> list[dict]:
    rows = []
    for i, task in enumerate(TASKS):
        values = (costs or {}).get(task) or noisy(n, (1 + i) * ratio)
        rows += runs(task, arm, values, kinds=(kinds or {}).get(task))
    return rows


INC = side(INCUMBENT, 1.0, 10)
INC_OTHER = side(OTHER_INCUMBENT, 1.0, 10)
CHEAPER_7 = side(CANDIDATE, 0.6, 7)  # 21 valid runs: a drop bound within 20 points is possible
CHEAPER_3 = side(CANDIDATE, 0.6, 3)  # 9 runs: even a perfect record cannot bound it
DEARER_3 = side(CANDIDATE, 1.5, 3)
SAME_5 = side(CANDIDATE, 1.0, 5, costs={t: [1.0 * (1 + i)] * 5 for i, t in enumerate(TASKS)})
PAIR = {CANDIDATE: INCUMBENT}


@pytest.mark.parametrize("name, incumbent, candidate, pairs, look, sequential, action, reason", [
    ("clearly cheaper with enough runs", INC, CHEAPER_7, PAIR, 3, {}, sampling.PROMOTE, "efficacious"),
    ("cheaper, but too few runs to bound a drop", INC, CHEAPER_3, PAIR, 1, {}, sampling.CONTINUE,
     "undecided"),
    ("a wider drop margin lets it stop", INC, CHEAPER_7, PAIR, 3, {"max_resolution_drop_pct": 70},
     sampling.PROMOTE, "efficacious"),
    ("cheaper, but too few runs for heavy tails", INC, CHEAPER_7, PAIR, 3, {"min_total_runs": 40},
     sampling.CONTINUE, "undecided"),
    ("cheaper, but below the required improvement", INC, CHEAPER_7, PAIR, 3,
     {"min_improvement_pct": 60, "futility_confidence": 0}, sampling.CONTINUE, "undecided"),
    ("a saving that cannot plausibly reach what the remaining runs are for: futile", INC, CHEAPER_7, PAIR, 3,
     {"futility_below_pct": 60, "max_resolution_drop_pct": 0.1}, sampling.FUTILITY, "below futility_below_pct 60"),
    ("the same saving, with the runs for a smaller one: undecided", INC, CHEAPER_7, PAIR, 3,
     {"futility_below_pct": 30, "max_resolution_drop_pct": 0.1}, sampling.CONTINUE, "undecided"),
    ("dearer: futile", INC, DEARER_3, PAIR, 1, {}, sampling.FUTILITY, "futile"),
    ("dearer, with futility off", INC, DEARER_3, PAIR, 1, {"futility_p_value": 1, "futility_confidence": 0},
     sampling.CONTINUE, "undecided"),
    ("no saving at the last look is not futility: the side stops anyway", INC, side(CANDIDATE, 1.5, 10), PAIR,
     5, {}, sampling.CONTINUE, "undecided"),
    ("one futile arm stops the side", INC + INC_OTHER, CHEAPER_7 + side(OTHER, 1.5, 7),
     {CANDIDATE: INCUMBENT, OTHER: OTHER_INCUMBENT}, 3, {}, sampling.FUTILITY, "candidate_auto: futile"),
    ("every arm efficacious", INC + INC_OTHER, CHEAPER_7 + side(OTHER, 0.6, 7),
     {CANDIDATE: INCUMBENT, OTHER: OTHER_INCUMBENT}, 3, {}, sampling.PROMOTE, "candidate_auto: efficacious"),
    ("one arm undecided holds the side", INC + INC_OTHER, CHEAPER_7 + side(OTHER, 0.97, 7),
     {CANDIDATE: INCUMBENT, OTHER: OTHER_INCUMBENT}, 3, {"futility_below_pct": 2}, sampling.CONTINUE,
     "candidate_auto: undecided"),
    ("a task without a valid run yet", INC, side(CANDIDATE, 1.5, 3, kinds={"t2": ["infra-error"] * 3}), PAIR, 1,
     {}, sampling.CONTINUE, "t2: no valid run yet in candidate_workflow"),
    ("an unmeasured run can never be promoted", INC, side(CANDIDATE, 0.6, 3, costs={"t1": [0.5, None, 0.5]}),
     PAIR, 1, {}, sampling.FUTILITY, "t1: cost_usd is unmeasured"),
    ("identical costs: no spread in the candidate, the incumbent's carries the test", INC, SAME_5, PAIR, 2,
     {"futility_p_value": 1, "futility_confidence": 0}, sampling.CONTINUE, "undecided"),
    ("another metric: equal turns are no saving", INC, CHEAPER_7, PAIR, 3, {"metric": "num_turns"},
     sampling.FUTILITY, "num_turns per resolved task 0.0% cheaper"),
])
def test_interim(name, incumbent, candidate, pairs, look, sequential, action, reason):
    found = sampling.interim(incumbent, candidate, pairs, look, plan(10, **sequential))
    assert found.action == action, found.reasons
    assert any(reason in r for r in found.reasons), found.reasons


def test_excluded_runs_are_left_out_of_the_look():
    faults = {task: ["infra-error"] + [None] * 6 for task in TASKS}
    rows = side(CANDIDATE, 0.6, 7, kinds=faults)
    for row in rows:
        if row["error_kind"] == "infra-error":
            row["cost_usd"] = 1000.0  # what a fault cost must not count
    found = sampling.interim(INC, rows, PAIR, 3, plan())
    assert found.action == sampling.CONTINUE  # 18 valid runs cannot bound the drop at the look's level
    assert "% cheaper" in found.reasons[0] and "undecided" in found.reasons[0]


def test_evidence_tasks_on_the_incumbent_side_are_ignored():
    evidence = runs("evidence-only", INCUMBENT, [100.0] * 10)
    assert sampling.interim(INC + evidence, CHEAPER_7, PAIR, 3, plan()) == sampling.interim(INC, CHEAPER_7, PAIR, 3,
                                                                                            plan())


@pytest.mark.parametrize("candidate, look, sampling_plan, message", [
    (CHEAPER_7, 2, plan(), "past look 2's 5 runs"),
    (CHEAPER_3, 0, plan(), "look 0 is not one of the 5 planned looks"),
    (CHEAPER_3, 6, plan(), "look 6 is not one of the 5 planned looks"),
    (CHEAPER_3, 1, plan(enabled=False), "sampling.sequential.enabled is false"),
])
def test_interim_refuses_what_is_not_a_look(candidate, look, sampling_plan, message):
    with pytest.raises(BadInput, match=message):
        sampling.interim(INC, candidate, PAIR, look, sampling_plan)


def test_the_wealth_decides_at_alpha_at_every_look():
    """The test by betting holds alpha however often it is looked at: the same runs stop to promote at an early
    look of a long plan as at the last look of a short one, with the same e-value (skillevo/stats/betting.py)."""
    wide = {"max_resolution_drop_pct": 100, "futility_p_value": 1, "futility_confidence": 0}
    early = sampling.interim(INC, CHEAPER_7, PAIR, 3, plan(10, **wide))  # looks 3, 5, 7, 9, 10: the third of five
    last = sampling.interim(INC, CHEAPER_7, PAIR, 3, plan(7, **wide))  # looks 3, 5, 7: the last
    assert early.action == last.action == sampling.PROMOTE, early.reasons
    assert early.reasons[0].split(" (bound")[0] == last.reasons[0].split(" (bound")[0]
    few = sampling.interim(INC, CHEAPER_3, PAIR, 1, plan(10, **wide))
    assert few.action == sampling.CONTINUE and "of 25 needed" in few.reasons[0]  # three rounds bet too little


# --- the preflight warns where interim and the gate disagree -------------------------------------------------


def test_preflight_warns_when_interim_and_the_gate_disagree():
    from skillevo.core.config import Policy
    policy = Policy.from_dict({"min_total_runs": 1, "alpha": 0.04, "test": "betting"})  # as plan() has it
    assert sampling.sequential_warnings(plan(), policy) == []
    assert any("gate.policy geometric with gate.test betting is not per_resolved's test by betting" in w
               for w in sampling.sequential_warnings(plan(), Policy.from_dict({"policy": "geometric", "test": "betting",
                                                                                "min_total_runs": 1})))
    assert any("gate.test bootstrap is not per_resolved's test by betting" in w
               for w in sampling.sequential_warnings(plan(), Policy.from_dict({"min_total_runs": 1, "alpha": 0.04,
                                                                                "test": "bootstrap"})))
    assert sampling.sequential_warnings(plan(enabled=False), policy) == []
    warnings = sampling.sequential_warnings(plan(first=2), policy)
    assert any("sampling.sequential.first 2 is below gate.min_runs 3" in w for w in warnings)


def test_the_looks_read_the_gates_own_knobs_and_a_copy_of_one_is_refused():
    """Issue 31, item 1: the looks once kept five of the gate's knobs under sampling.sequential, with "keep it
    gate.X" comments; one edited on one side only let the bench stop where the gate would not decide. Now there is
    one copy: the gate's, and a params file that still has the other is refused naming the key and what to do."""
    from skillevo.core import config
    from tests.bench_fixtures import params_doc

    doc = params_doc()
    doc["gate"].update(metric="num_turns", alpha=0.02, min_improvement_pct=7, max_resolution_drop_pct=15,
                       min_total_runs=30)
    looks = config.parse(doc).sampling.sequential
    assert (looks.metric, looks.alpha, looks.min_improvement_pct, looks.max_resolution_drop_pct,
            looks.min_total_runs) == ("num_turns", 0.02, 7, 15, 30)
    for key in LOOKS_READ_FROM_GATE:
        stale = params_doc()
        stale["sampling"]["sequential"][key] = stale["gate"].get(key, 1)
        with pytest.raises(BadInput) as e:
            config.parse(stale)
        assert f"$.sampling.sequential.{key}: this key is retired" in str(e.value)
        assert f"set gate.{key}" in str(e.value) and "(rule: current params)" in str(e.value)


def test_a_looks_line_prints_its_numbers_as_the_gate_does(monkeypatch):
    """A stage line once said 32.3% and p=0 where the status said 32.2% and p=1.48e-24: every line now prints the
    rounded figures promotion.json binds (stats.improvement_text, p_text), never the raw ones."""
    raw = stats.Estimate("per_resolved", 32.2501, (20.0, 40.0), 0.677499, 1.4812e-24, 1.0, (), "bootstrap-t",
                         resamples=1999)
    monkeypatch.setattr(sampling.stats, "per_resolved_at", lambda strata, levels: (raw,) * len(levels))
    rows = {arm: [{"task": "t", "arm": arm, "run": r, "cost_usd": 1.0, "resolved": True, "error_kind": None}
                  for r in range(1, 5)] for arm in ("auto", "candidate_auto")}
    _, line = sampling._look_arm(rows["auto"], rows["candidate_auto"], ["t"], "auto", "candidate_auto", 0.01, False,
                                 plan(4), None)
    shown = raw.to_dict(0.04)
    assert f"{stats.improvement_text(shown)} cheaper, e=" in line, line
    assert "32.2% cheaper, e=" in line  # not the raw 32.2501's "32.3%"
