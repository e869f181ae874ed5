"""Properties of the gate over generated benches: what must hold whatever the runs look like."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skillevo.core.config import Policy
from skillevo.core.results import EXCLUDED_ERROR_KINDS, aggregate
from skillevo.files.errors import BadInput
from skillevo.gate import build_promotion, decide_arm, recompute_decisions
from tests.gate_rows import CANDIDATE, INCUMBENT, freeze, row, sides

NOW = datetime(2025, 3, 1, tzinfo=UTC)
PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, database=None)
# Half the benches are clean (every run resolved and measured), so promotions are common enough to bite.
KINDS = [None] * 6 + ["verify-failed", "oracle-failed", "skill-not-invoked", "session-error", "cancelled"]
COSTS = [0.7, 0.8, 0.9, 1.0, 1.0, 1.1, 1.3]


@st.composite
def benches(draw):
    """Rows for 1-3 tasks, both arms, 2-4 runs per cell; the candidate's costs are the incumbent's scaled."""
    tasks = draw(st.lists(st.sampled_from(["t1", "t2", "t3"]), min_size=1, max_size=3, unique=True))
    clean = draw(st.booleans())
    kinds = st.just(None) if clean else st.sampled_from(KINDS)
    costs = st.sampled_from(COSTS) if clean else st.sampled_from([*COSTS, None])
    rows = []
    for task in sorted(tasks):
        count = draw(st.sampled_from([3, 3, 3, 2, 4]))
        for arm, scale in ((INCUMBENT, 1.0), (CANDIDATE, draw(st.sampled_from([0.8, 0.9, 1.0, 1.2])))):
            for run in range(1, count + 1):
                cost = draw(costs)
                cost = None if cost is None else round(cost * scale, 4)
                rows.append(row(task, arm, run, error_kind=draw(kinds), cost_usd=cost))
    return rows


SEED, STRATIFIED = (Policy.from_dict({"policy": "seed"}),
                    Policy.from_dict({"max_resolution_drop_pct": 60, "min_total_runs": 1}))
POLICIES = st.sampled_from([SEED, STRATIFIED])  # a wide margin: these benches are small, promotions must happen


def decide_rows(rows, policy=SEED):
    tasks = {r["task"]: r["class"] for r in rows}
    return decide_arm(
        aggregate(rows, tasks, [INCUMBENT, CANDIDATE]),
        policy,
        benchmark_model="skillevo-sim-1",
        incumbent_arm=INCUMBENT,
        candidate_arm=CANDIDATE,
    )


def _rate(agg):
    return Fraction(agg["resolved"], agg["valid_runs"]) if agg["valid_runs"] else Fraction(0)


@PROPERTY
@given(benches(), st.data())
def test_never_promote_when_a_gated_tasks_resolution_rate_drops(rows, data):
    decision = decide_rows(rows)
    if any(t["seed"]["gated"] and _rate(t["candidate"]) < _rate(t["incumbent"]) for t in decision["tasks"]):
        assert decision["decision"] != "promote"
    # Force a drop on one task: the incumbent resolves every run, the candidate fails one of them.
    task = data.draw(st.sampled_from(sorted({r["task"] for r in rows})))
    for r in rows:
        if r["task"] == task and r["arm"] == INCUMBENT:
            r.update(error_kind=None, resolved=True)
    victim = data.draw(st.sampled_from([r for r in rows if r["task"] == task and r["arm"] == CANDIDATE]))
    victim.update(error_kind="oracle-failed", resolved=False)
    decision = decide_rows(rows)
    assert any(t["seed"]["gated"] and _rate(t["candidate"]) < _rate(t["incumbent"]) for t in decision["tasks"])
    assert decision["decision"] != "promote"


@PROPERTY
@given(benches(), st.data(), st.sampled_from(sorted(EXCLUDED_ERROR_KINDS)))
def test_never_promote_with_an_excluded_run_in_a_gated_task(rows, data, kind):
    victim = data.draw(st.sampled_from(rows))
    victim.update(error_kind=kind, resolved=False)
    decision = decide_rows(rows)
    row_of_task = next((t for t in decision["tasks"] if t["task"] == victim["task"]), None)
    assert row_of_task is not None and row_of_task["seed"]["gated"], \
        "a task with an excluded run is never fully measured"
    assert decision["decision"] != "promote"


@PROPERTY
@given(benches(), st.randoms(use_true_random=False), POLICIES)
def test_decision_is_invariant_to_row_order(rows, rng, policy):
    shuffled = list(rows)
    rng.shuffle(shuffled)
    first, second = decide_rows(rows, policy), decide_rows(shuffled, policy)
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)


def _scaled(rows, factor, arm=None):
    """Every cost (or only `arm`'s) times `factor`; an unmeasured cost stays unmeasured."""
    return [{**r, "cost_usd": r["cost_usd"] * factor} if r["cost_usd"] is not None and arm in (None, r["arm"]) else r
            for r in rows]


@PROPERTY
@given(benches(), st.sampled_from([0.001, 0.37, 3.0, 1000.0]))
def test_the_tested_decision_does_not_depend_on_the_currency(rows, factor):
    """Both tests compare ratios: every cost times a constant (cents, a price change) decides the same."""
    assert decide_rows(rows, STRATIFIED)["decision"] == decide_rows(_scaled(rows, factor), STRATIFIED)["decision"]


@PROPERTY
@given(benches())
def test_a_uniformly_cheaper_candidate_never_loses_a_promotion(rows):
    if decide_rows(rows, STRATIFIED)["decision"] == "promote":
        assert decide_rows(_scaled(rows, 0.9, CANDIDATE), STRATIFIED)["decision"] == "promote"


@PROPERTY
@given(benches(), POLICIES)
def test_recomputation_from_the_stored_file_equals_the_stored_decision(rows, policy):
    incumbent, candidate = sides(rows)
    if candidate.bench["design"] is None and policy.policy == "per_resolved" and policy.test == "betting":
        with pytest.raises(BadInput, match=r"\$\.design: the candidate side ran without a design .*\(rule: design\)"):
            build_promotion(incumbent, candidate, freeze(), policy, now=NOW)
        return
    promotion = build_promotion(incumbent, candidate, freeze(), policy, now=NOW)
    from_file = json.loads(json.dumps(promotion, sort_keys=True))
    assert recompute_decisions(from_file) == from_file["decisions"]
    assert from_file["decisions"] == promotion["decisions"]
