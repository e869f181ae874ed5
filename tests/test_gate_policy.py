"""Table-driven tests of aggregation, params and the seed rule (`gate.policy: seed`), one case per rule and reason.

The default (per_resolved) rule has its own tests in tests/test_gate_stratified.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from skillevo.core import config
from skillevo.core.config import Policy
from skillevo.core.models import is_floating
from skillevo.core.results import aggregate
from skillevo.files.errors import BadInput
from skillevo.gate import decide, decide_arm
from skillevo.gate.policy import MAIN_LOOP_ONLY_WARNING, improvement_pct
from tests.gate_rows import CANDIDATE, INCUMBENT, paired, row, runs

MODEL = "skillevo-sim-1"
DEFAULT = Policy.from_dict({})
SEED = Policy.from_dict({"policy": "seed"})
ARMS = "arms: {workflow: {sessions: [{skill: work, prompt: '{prompt}'}]}}\n"


def load_policy(path: Path) -> Policy:
    return config.load(path).gate


def decide_one(aggregates, policy=SEED, model=MODEL):
    return decide_arm(aggregates, policy, benchmark_model=model, incumbent_arm=INCUMBENT, candidate_arm=CANDIDATE)


def good(task, cost=0.9):
    """A task where both arms resolve every run and the candidate costs `cost` against 1.0."""
    return paired(task, {}, {"cost": cost})


# --- aggregation -------------------------------------------------------------------------------------------


def test_aggregate_counts_excluded_kinds_apart_and_medians_only_valid_runs():
    rows = [
        row("t", INCUMBENT, 1, cost_usd=1.0),
        row("t", INCUMBENT, 2, cost_usd=3.0, error_kind="verify-failed"),
        row("t", INCUMBENT, 3, cost_usd=2.0, error_kind="skill-not-invoked"),
        row("t", INCUMBENT, 4, cost_usd=None, error_kind="session-error"),
        row("t", INCUMBENT, 5, cost_usd=50.0, error_kind="infra-error", wall_s=999.0),
        row("t", INCUMBENT, 6, cost_usd=50.0, error_kind="evidence-unverified"),
        row("t", INCUMBENT, 7, cost_usd=50.0, error_kind="cancelled", resolved=True),
    ]
    cell = aggregate(rows, {"t": "trivial"}, [INCUMBENT])[("t", INCUMBENT)]
    assert (cell["runs"], cell["valid_runs"], cell["excluded_runs"], cell["resolved"]) == (7, 3, 4, 1)
    assert cell["error_kinds"] == {
        "cancelled": 1, "evidence-unverified": 1, "infra-error": 1, "session-error": 1,
        "skill-not-invoked": 1, "verify-failed": 1,
    }
    assert cell["cost_usd"] == 2.0  # median of 1, 3, 2: the unmeasured and the 50s are excluded runs
    assert cell["wall_s"] == 15.0


@pytest.mark.parametrize(
    "costs, kinds, expected",
    [
        ([1.0, None, 2.0], [None, None, None], None),  # one valid run unmeasured: the median is unknown, not 0
        ([1.0, None, 2.0], [None, "session-error", None], 1.5),  # the unmeasured run is excluded
        ([None, None], ["infra-error", "infra-error"], None),  # no valid runs
        ([0.5, 0.25, 1.0, 2.0], [None] * 4, 0.75),
    ],
)
def test_cost_median_over_valid_runs(costs, kinds, expected):
    rows = runs("t", INCUMBENT, costs, kinds=kinds)
    assert aggregate(rows, {"t": "trivial"}, [INCUMBENT])[("t", INCUMBENT)]["cost_usd"] == expected


def test_aggregate_medians_every_token_turn_time_and_churn_field():
    rows = [
        row("t", INCUMBENT, i, input_tokens=10 * i, output_tokens=i, cache_creation_input_tokens=2 * i,
            cache_read_input_tokens=3 * i, num_turns=i, duration_s=1.5 * i, wall_s=2.0 * i, diff_files=i,
            diff_insertions=5 * i, diff_deletions=7 * i)
        for i in (1, 2, 6)
    ]
    cell = aggregate(rows, {"t": "trivial"}, [INCUMBENT])[("t", INCUMBENT)]
    assert {k: cell[k] for k in (
        "input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "num_turns",
        "duration_s", "wall_s", "diff_files", "diff_insertions", "diff_deletions",
    )} == {
        "input_tokens": 20.0, "output_tokens": 2.0, "cache_creation_input_tokens": 4.0,
        "cache_read_input_tokens": 6.0, "num_turns": 2.0, "duration_s": 3.0, "wall_s": 4.0, "diff_files": 2.0,
        "diff_insertions": 10.0, "diff_deletions": 14.0,
    }


def test_an_arm_without_rows_aggregates_to_zero_runs_and_a_row_outside_the_bindings_fails():
    cells = aggregate(runs("t", INCUMBENT, [1.0]), {"t": "trivial"}, [INCUMBENT, CANDIDATE])
    assert cells[("t", CANDIDATE)]["runs"] == 0 and cells[("t", CANDIDATE)]["cost_usd"] is None
    with pytest.raises(BadInput, match="outside the bound tasks"):
        aggregate(runs("other", INCUMBENT, [1.0]), {"t": "trivial"}, [INCUMBENT])


# --- params ------------------------------------------------------------------------------------------------


def test_params_defaults_and_overrides(tmp_path: Path):
    params = tmp_path / "params.yaml"
    params.write_text(ARMS, encoding="utf-8")
    assert load_policy(params) == DEFAULT
    assert DEFAULT.to_dict() == {
        "policy": "per_resolved", "metric": "cost_usd", "min_runs": 3, "min_total_runs": 12, "alpha": 0.05,
        "test": "betting",
        "min_improvement_pct": 5.0,
        "quality_alpha": 0.1, "max_resolution_drop_pct": 20.0,
        "max_task_regression_pct": 20.0, "max_failed_task_regression_pct": 100.0, "min_gated_task_ratio": 0.5,
        "resolution_margin": 2, "max_age_days": 90, "look_boundary": "spending", "family_alpha": 0.05,
    }
    params.write_text(ARMS + "gate:\n  metric: duration_s\n  min_improvement_pct: 7\n", encoding="utf-8")
    policy = load_policy(params)
    assert policy.metric == "duration_s" and policy.min_improvement_pct == 7.0
    assert isinstance(policy.min_improvement_pct, float)  # one JSON form whether YAML said 7 or 7.0


@pytest.mark.parametrize(
    "gate_yaml, message",
    [
        ("min_run: 5", "'min_run' was unexpected"),
        ("metric: wall_s", "metric"),
        ("min_runs: 0", "min_runs"),
        ("min_runs: true", "min_runs"),
        ("min_gated_task_ratio: 1.5", "min_gated_task_ratio"),
        ("[1, 2]", "is not of type 'object'"),
    ],
)
def test_bad_params_fail_naming_the_file_and_key(tmp_path: Path, gate_yaml, message):
    params = tmp_path / "params.yaml"
    gate = f"gate: {{{gate_yaml}}}\n" if ":" in gate_yaml else f"gate: {gate_yaml}\n"
    params.write_text(ARMS + gate, encoding="utf-8")
    with pytest.raises(BadInput, match=message) as error:
        load_policy(params)
    assert str(params) in str(error.value)


# --- the rules, one case each ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model, named",
    [("skillevo-sim-1", True), ("claude-sonnet-4-5-20250929", True), ("", False), ("   ", False),
     ("claude-sonnet-latest", False), ("auto", False), ("Model-AUTO", False)],
)
def test_named_model_required(model, named):
    assert is_floating(model) is not named
    decision = decide_one({**good("t1"), **good("t2")}, model=model)
    assert (decision["decision"] == "promote") is named
    if not named:
        assert decision["decision"] == "insufficient_evidence"
        assert f"benchmark model {model!r} is not a pinned model id" in decision["reasons"][0]


def test_improvement_is_rounded_to_one_decimal_and_undefined_without_scale():
    assert improvement_pct(3.0, 2.0) == 33.3
    assert improvement_pct(2.0, 3.0) == -50.0
    assert improvement_pct(0.0, 1.0) is None
    assert improvement_pct(None, 1.0) is None


# (aggregates, policy overrides, decision, reason fragment, task row checks)
RULES = {
    "missing arm": (
        {("t1", INCUMBENT): paired("t1", {}, {})[("t1", INCUMBENT)]},
        {}, "insufficient_evidence",
        "t1: both workflow and candidate_workflow are required, candidate_workflow has no results",
    ),
    "too few valid runs": (
        paired("t1", {"valid": 2}, {"valid": 2, "cost": 0.5}),
        {}, "insufficient_evidence", "t1: needs at least 3 valid runs per arm (got 2/2)",
    ),
    "min_runs is a param": (
        paired("t1", {"valid": 2}, {"valid": 2, "cost": 0.5}),
        {"min_runs": 2}, "promote", "median cost_usd improvement over 1 gated task(s) is 50.0% (required 5.0%)",
    ),
    "excluded run": (
        paired("t1", {}, {"excluded": 1, "cost": 0.5}),
        {}, "insufficient_evidence", "t1: promotion requires zero excluded runs in both paired arms (got 0/1)",
    ),
    "unequal valid counts": (
        paired("t1", {}, {"valid": 4, "cost": 0.5}),
        {}, "insufficient_evidence", "t1: paired arms have different valid run counts (3/4)",
    ),
    "resolution regressed": (
        paired("t1", {}, {"resolved": 2, "cost": 0.5}),
        {}, "keep_incumbent", "t1: resolution regressed from 3/3 (100.0%) to 2/3 (66.7%)",
    ),
    "quality floor, incumbent resolved once": (
        paired("t1", {"resolved": 1}, {"resolved": 2, "cost": 0.5}),
        {}, "keep_incumbent",
        "t1: candidate must resolve every valid run for the oracle-backed quality floor "
        "(the incumbent resolves 1/3; got 2/3)",
    ),
    "quality floor, skill never invoked": (
        paired("t1", {"resolved": 0, "kinds": {"skill-not-invoked": 3}}, {"resolved": 2, "cost": 0.5}),
        {}, "keep_incumbent",
        "t1: candidate must resolve every valid run for the oracle-backed quality floor "
        "(a run never invoked the skill under test; got 2/3)",
    ),
    "metric unmeasured": (
        paired("t1", {}, {"cost": None}),
        {}, "insufficient_evidence",
        "t1: cost_usd was not measured on every valid run in both paired arms (incumbent 1, candidate unmeasured); "
        "cannot rank on it",
    ),
    "incumbent metric zero": (
        paired("t1", {"cost": 0.0}, {"cost": 0.0}),
        {}, "insufficient_evidence", "t1: incumbent cost_usd is zero; choose a metric with signal",
    ),
    "task regression above the cap": (
        {**paired("t1", {}, {"cost": 1.25}), **good("t2", 0.5), **good("t3", 0.5)},
        {}, "keep_incumbent", "t1: cost_usd regressed 25.0% (1 -> 1.25), above the 20.0% task cap",
    ),
    "max_task_regression_pct is a param": (
        {**paired("t1", {}, {"cost": 1.25}), **good("t2", 0.5), **good("t3", 0.5)},
        {"max_task_regression_pct": 30}, "promote", "median cost_usd improvement over 3 gated task(s) is 50.0%",
    ),
    "ungated task reported, not gated": (
        {**paired("t1", {"resolved": 0}, {"resolved": 0, "cost": 1.5}), **good("t2", 0.8), **good("t3", 0.9)},
        {}, "promote", "not gated on 1 task(s) neither arm resolved: t1 (evidence base: 2/3 paired tasks gated)",
    ),
    "ungated task above the failed-task cap": (
        {**paired("t1", {"resolved": 0}, {"resolved": 0, "cost": 2.5}), **good("t2", 0.8), **good("t3", 0.9)},
        {}, "keep_incumbent",
        "t1: cost_usd regressed 150.0% (1 -> 2.5) on a task neither arm resolved, above the 100.0% failed-task cap",
    ),
    "max_failed_task_regression_pct is a param": (
        {**paired("t1", {"resolved": 0}, {"resolved": 0, "cost": 2.5}), **good("t2", 0.8), **good("t3", 0.9)},
        {"max_failed_task_regression_pct": 200}, "promote", "median cost_usd improvement over 2 gated task(s) is 15.0%",
    ),
    "unresolved task with an unreadable metric stays gated": (
        {**paired("t1", {"resolved": 0}, {"resolved": 0, "cost": None}), **good("t2", 0.8)},
        {}, "insufficient_evidence", "t1: cost_usd was not measured",
    ),
    "no gated task": (
        paired("t1", {"resolved": 0}, {"resolved": 0, "cost": 0.5}),
        {}, "insufficient_evidence",
        "no task supplied quality signal: neither arm resolved a run on any of the 1 paired tasks",
    ),
    "evidence base too thin": (
        {**paired("t1", {"resolved": 0}, {"resolved": 0}), **paired("t2", {"resolved": 0}, {"resolved": 0}),
         **good("t3", 0.5)},
        {}, "insufficient_evidence",
        "promotion evidence base is too thin: 1/3 paired tasks gated (at least 50% required)",
    ),
    "min_gated_task_ratio is a param": (
        {**paired("t1", {"resolved": 0}, {"resolved": 0}), **paired("t2", {"resolved": 0}, {"resolved": 0}),
         **good("t3", 0.5)},
        {"min_gated_task_ratio": 0.3}, "promote", "median cost_usd improvement over 1 gated task(s) is 50.0%",
    ),
    "no paired tasks": (
        {}, {}, "insufficient_evidence", "no paired task results were found for workflow and candidate_workflow",
    ),
    "resolution margin promotes despite a dearer candidate": (
        {**paired("t1", {"resolved": 1}, {"cost": 1.1}), **good("t2", 1.0)},
        {}, "promote",
        "candidate improves total task resolution by 2 runs (at least 2 required) with no task regression",
    ),
    "resolution margin cannot outvote a task regression": (
        {**paired("t1", {"resolved": 1}, {"cost": 1.3}), **good("t2", 1.0)},
        {}, "keep_incumbent", "t1: cost_usd regressed 30.0%",
    ),
    "margin of one is noise; efficiency decides": (
        {**paired("t1", {"resolved": 2}, {"cost": 1.0}), **good("t2", 1.0)},
        {}, "keep_incumbent",
        "total resolution improved by only 1 run(s), within the noise floor (2 required); "
        "deciding on efficiency instead",
    ),
    "resolution_margin is a param": (
        {**paired("t1", {"resolved": 2}, {"cost": 1.0}), **good("t2", 1.0)},
        {"resolution_margin": 1}, "promote", "candidate improves total task resolution by 1 runs (at least 1 required)",
    ),
    "median improvement promotes": (
        {**good("t1", 0.9), **good("t2", 0.94), **good("t3", 1.1)},
        {}, "promote", "median cost_usd improvement over 3 gated task(s) is 6.0% (required 5.0%)",
    ),
    "median improvement short of the bar": (
        {**good("t1", 0.9), **good("t2", 0.97), **good("t3", 1.1)},
        {}, "keep_incumbent", "median cost_usd improvement over 3 gated task(s) is 3.0% (required 5.0%)",
    ),
    "min_improvement_pct is a param": (
        {**good("t1", 0.9), **good("t2", 0.97), **good("t3", 1.1)},
        {"min_improvement_pct": 3}, "promote",
        "median cost_usd improvement over 3 gated task(s) is 3.0% (required 3.0%)",
    ),
    "insufficient evidence outranks a regression": (
        {**paired("t1", {}, {"resolved": 2, "excluded": 1}), **good("t2")},
        {}, "insufficient_evidence", "t1: resolution regressed from 3/3 (100.0%) to 2/3 (66.7%)",
    ),
}


@pytest.mark.parametrize("name", RULES)
def test_rule(name):
    aggregates, overrides, expected, reason = RULES[name]
    decision = decide_one(aggregates, Policy.from_dict({"policy": "seed", **overrides}))
    assert decision["decision"] == expected, decision["reasons"]
    assert any(reason in r for r in decision["reasons"]), decision["reasons"]


def test_task_rows_carry_the_evidence():
    decision = decide_one({
        **paired("t1", {"resolved": 1}, {"cost": 0.8}),
        **paired("t2", {"resolved": 0}, {"resolved": 0, "cost": 1.2}),
        **paired("t3", {"resolved": 0, "kinds": {"skill-not-invoked": 3}}, {"cost": 0.5}),
    })
    rows = {row["task"]: row for row in decision["tasks"]}
    assert [row["task"] for row in decision["tasks"]] == ["t1", "t2", "t3"]
    seed = decision["seed"]
    assert seed["gated_tasks"] == ["t1", "t3"] and seed["ungated_tasks"] == ["t2"]
    assert rows["t1"]["seed"] == {
        "gated": True, "skill_attributable": False, "quality_floor_applied": True, "quality_floor_met": True,
        "incumbent_metric": 1.0, "candidate_metric": 0.8, "improvement_pct": 20.0,
    }
    assert (rows["t1"]["incumbent_rate"], rows["t1"]["candidate_rate"]) == (0.3333, 1.0)
    # the per-resolved estimate, exact on identical runs: 1.0 a run at 1 of 3 resolved against 0.8 at 3 of 3
    assert rows["t1"]["improvement_pct"] == pytest.approx(100 * (1 - 0.8 / 3.0), abs=0.01)
    t2, t3 = rows["t2"]["seed"], rows["t3"]["seed"]
    assert (t2["gated"], t2["quality_floor_applied"], t2["quality_floor_met"]) == (False, False, None)
    assert (t3["skill_attributable"], t3["quality_floor_applied"]) == (True, True)
    assert seed["median_improvement_pct"] == 35.0  # median of 20.0 and 50.0; ungated t2 (-20%) left out
    assert seed["resolution_margin"] == 5


@pytest.mark.parametrize("metric, warned", [("cost_usd", False), ("duration_s", False), ("num_turns", True),
                                            ("output_tokens", True)])
def test_main_loop_only_metrics_carry_a_warning(metric, warned):
    decision = decide_one(good("t1"), Policy.from_dict({"policy": "seed", "metric": metric}))
    assert decision["metric"] == metric
    assert decision["metric_warning"] == (MAIN_LOOP_ONLY_WARNING if warned else None)


def test_the_configured_metric_is_the_one_ranked():
    aggregates = good("t1", cost=1.0)
    aggregates[("t1", CANDIDATE)]["duration_s"] = 0.5
    assert decide_one(aggregates)["decision"] == "keep_incumbent"
    assert decide_one(aggregates, Policy.from_dict({"policy": "seed", "metric": "duration_s"}))["decision"] == "promote"


def test_decide_pairs_each_candidate_arm_by_name():
    aggregates = {**good("t1", 0.5)}
    decisions = decide(aggregates, SEED, benchmark_model=MODEL, candidate_arms=[CANDIDATE, "candidate_direct"])
    assert [(d["incumbent_arm"], d["candidate_arm"], d["decision"]) for d in decisions] == [
        (INCUMBENT, CANDIDATE, "promote"), ("direct", "candidate_direct", "insufficient_evidence"),
    ]
    with pytest.raises(ValueError, match="not named candidate_"):
        decide(aggregates, SEED, benchmark_model=MODEL, candidate_arms=["workflow"])


def test_the_gated_ratio_is_met_exactly_at_the_threshold():
    aggregates = {}
    for i in range(18):
        aggregates.update(paired(f"u{i:02}", {"resolved": 0}, {"resolved": 0}))
    for i in range(7):
        aggregates.update(good(f"g{i}", 0.5))
    # 7 of 25 gated meets 0.28, although 0.28 * 25 is 7.000000000000001 in floating point.
    assert (decide_one(aggregates, Policy.from_dict({"policy": "seed", "min_gated_task_ratio": 0.28}))["decision"]
            == "promote")
    assert (decide_one(aggregates, Policy.from_dict({"policy": "seed", "min_gated_task_ratio": 0.29}))["decision"]
            == "insufficient_evidence")
