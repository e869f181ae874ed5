"""The default promotion policy (DESIGN §5): one pure function from per-(task, arm) aggregates to decisions.

Conservative by construction: quality is judged before efficiency, missing or partial evidence is never read
as a win, and every verdict carries one sentence per reason and the per-task rows it was made from, so the
same function can recompute it from promotion.json alone.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from skillevo.config import Policy
from skillevo.layout import incumbent_arm_of
from skillevo.models import is_floating

PROMOTE = "promote"
KEEP_INCUMBENT = "keep_incumbent"
INSUFFICIENT_EVIDENCE = "insufficient_evidence"
MAIN_LOOP_ONLY_METRICS = frozenset({"num_turns", "output_tokens"})
MAIN_LOOP_ONLY_WARNING = (
    "token and turn counts cover only the main agent loop: subagent spend is invisible to them and "
    "flatters subagent-heavy candidates; cost_usd is the only reported figure that includes subagents"
)
# A run that never invoked its skill says the skill text failed, whatever the oracle made of the rest.
SKILL_ATTRIBUTABLE_ERROR_KINDS = frozenset({"skill-not-invoked", "phase-violation"})

Aggregates = Mapping[tuple[str, str], Mapping[str, Any]]


def metric_warning(policy: Policy) -> str | None:
    return MAIN_LOOP_ONLY_WARNING if policy.metric in MAIN_LOOP_ONLY_METRICS else None


def improvement_pct(incumbent: float | None, candidate: float | None) -> float | None:
    """Positive = the candidate spends less. None when unmeasured, or when a zero incumbent gives no scale."""
    if incumbent is None or candidate is None or incumbent == 0:
        return None
    return round(100 * (incumbent - candidate) / incumbent, 1)


def decide(
    aggregates: Aggregates, policy: Policy, *, benchmark_model: str, candidate_arms: Sequence[str]
) -> list[dict[str, Any]]:
    """One decision per candidate arm, each against its paired incumbent arm, in the given arm order."""
    return [
        decide_arm(
            aggregates,
            policy,
            benchmark_model=benchmark_model,
            incumbent_arm=incumbent_arm_of(arm),
            candidate_arm=arm,
        )
        for arm in candidate_arms
    ]


@dataclass
class _Judgement:
    row: dict[str, Any]
    reasons: list[str]
    insufficient: bool = False
    regressed: bool = False


def decide_arm(
    aggregates: Aggregates, policy: Policy, *, benchmark_model: str, incumbent_arm: str, candidate_arm: str
) -> dict[str, Any]:
    """The decision object for one candidate arm; `aggregates` maps (task, arm) to an aggregate."""
    metric = policy.metric
    reasons: list[str] = []
    insufficient = regressed = False
    if is_floating(benchmark_model):
        insufficient = True
        reasons.append(
            f"benchmark model {benchmark_model!r} is not a pinned model id (empty, or a floating alias); a pinned "
            "id is required so the evidence cannot drift"
        )

    rows: list[dict[str, Any]] = []
    for task in sorted({task for task, _ in aggregates}):
        incumbent, candidate = aggregates.get((task, incumbent_arm)), aggregates.get((task, candidate_arm))
        if incumbent is None or candidate is None:
            insufficient = True
            missing = incumbent_arm if incumbent is None else candidate_arm
            reasons.append(f"{task}: both {incumbent_arm} and {candidate_arm} are required, {missing} has no results")
            continue
        judgement = _judge_task(task, incumbent, candidate, policy)
        rows.append(judgement.row)
        reasons.extend(judgement.reasons)
        insufficient |= judgement.insufficient
        regressed |= judgement.regressed

    gated = [row["task"] for row in rows if row["gated"]]
    ungated = [row["task"] for row in rows if not row["gated"]]
    if ungated:
        reasons.append(
            f"not gated on {len(ungated)} task(s) neither arm resolved: {', '.join(ungated)} "
            f"(evidence base: {len(gated)}/{len(rows)} paired tasks gated)"
        )
    if not rows:
        insufficient = True
        reasons.append(f"no paired task results were found for {incumbent_arm} and {candidate_arm}")
    elif not gated:
        insufficient = True
        reasons.append(
            f"no task supplied quality signal: neither arm resolved a run on any of the {len(rows)} paired tasks"
        )
    elif len(gated) / len(rows) < policy.min_gated_task_ratio:  # not ratio * n: 0.28 * 25 > 7
        insufficient = True
        reasons.append(
            f"promotion evidence base is too thin: {len(gated)}/{len(rows)} paired tasks gated "
            f"(at least {100 * policy.min_gated_task_ratio:g}% required)"
        )

    improvements = [row["improvement_pct"] for row in rows if row["gated"] and row["improvement_pct"] is not None]
    median = round(statistics.median(improvements), 1) if improvements else None
    margin = sum(row["candidate"]["resolved"] - row["incumbent"]["resolved"] for row in rows)

    if insufficient:
        decision = INSUFFICIENT_EVIDENCE
    elif regressed:
        decision = KEEP_INCUMBENT
    elif margin >= policy.resolution_margin:
        decision = PROMOTE
        reasons.append(
            f"candidate improves total task resolution by {margin} runs "
            f"(at least {policy.resolution_margin} required) with no task regression"
        )
    else:
        if margin > 0:
            reasons.append(
                f"total resolution improved by only {margin} run(s), within the noise floor "
                f"({policy.resolution_margin} required); deciding on efficiency instead"
            )
        # Not insufficient means at least one gated task and a measured improvement on every gated task.
        assert median is not None
        decision = PROMOTE if median >= policy.min_improvement_pct else KEEP_INCUMBENT
        reasons.append(
            f"median {metric} improvement over {len(improvements)} gated task(s) is {median:.1f}% "
            f"(required {policy.min_improvement_pct:.1f}%)"
        )

    return {
        "incumbent_arm": incumbent_arm,
        "candidate_arm": candidate_arm,
        "decision": decision,
        "metric": metric,
        "metric_warning": metric_warning(policy),
        "median_improvement_pct": median,
        "resolution_margin": margin,
        "gated_tasks": gated,
        "ungated_tasks": ungated,
        "reasons": reasons,
        "tasks": rows,
    }


def _judge_task(
    task: str, incumbent: Mapping[str, Any], candidate: Mapping[str, Any], policy: Policy
) -> _Judgement:
    """The seed's per-task rule (notes/seed-system.md §4.2), every applicable check reported, in order."""
    metric = policy.metric
    n_inc, n_cand = incumbent["valid_runs"], candidate["valid_runs"]
    x_inc, x_cand = incumbent["excluded_runs"], candidate["excluded_runs"]
    r_inc, r_cand = incumbent["resolved"], candidate["resolved"]
    m_inc, m_cand = incumbent[metric], candidate[metric]
    improvement = improvement_pct(m_inc, m_cand)
    skill_attributable = any(
        kind in SKILL_ATTRIBUTABLE_ERROR_KINDS for agg in (incumbent, candidate) for kind in agg["error_kinds"]
    )
    fully_measured = n_inc >= policy.min_runs and n_inc == n_cand and x_inc == 0 and x_cand == 0
    mutually_unresolved = fully_measured and r_inc == 0 and r_cand == 0
    # A task both arms measured cleanly and never resolved measures the task, not the candidate: it stays in
    # the evidence but out of the gate, unless the skill itself is implicated or the metric cannot be read.
    gated = not (mutually_unresolved and not skill_attributable and improvement is not None)
    floor_applied = r_inc >= 1 or skill_attributable
    floor_met = (n_cand > 0 and r_cand == n_cand) if floor_applied else None
    row = {
        "task": task,
        "class": incumbent["class"],
        "gated": gated,
        "skill_attributable": skill_attributable,
        "quality_floor_applied": floor_applied,
        "quality_floor_met": floor_met,
        "incumbent_rate": round(r_inc / n_inc, 4) if n_inc else None,
        "candidate_rate": round(r_cand / n_cand, 4) if n_cand else None,
        "incumbent_metric": m_inc,
        "candidate_metric": m_cand,
        "improvement_pct": improvement,
        "incumbent": dict(incumbent),
        "candidate": dict(candidate),
    }
    j = _Judgement(row, [])

    if not gated:
        assert improvement is not None
        if improvement < -policy.max_failed_task_regression_pct:
            j.regressed = True
            j.reasons.append(
                f"{task}: {metric} regressed {-improvement:.1f}% ({m_inc:g} -> {m_cand:g}) on a task neither arm "
                f"resolved, above the {policy.max_failed_task_regression_pct:.1f}% failed-task cap"
            )
        return j

    if n_inc < policy.min_runs or n_cand < policy.min_runs:
        j.insufficient = True
        j.reasons.append(f"{task}: needs at least {policy.min_runs} valid runs per arm (got {n_inc}/{n_cand})")
    if x_inc or x_cand:
        j.insufficient = True
        j.reasons.append(f"{task}: promotion requires zero excluded runs in both paired arms (got {x_inc}/{x_cand})")
    if n_inc != n_cand:
        j.insufficient = True
        j.reasons.append(f"{task}: paired arms have different valid run counts ({n_inc}/{n_cand})")
    if _rate(r_cand, n_cand) < _rate(r_inc, n_inc):
        j.regressed = True
        j.reasons.append(
            f"{task}: resolution regressed from {_share(r_inc, n_inc)} to {_share(r_cand, n_cand)}"
        )
    if floor_applied and not floor_met:
        trigger = f"the incumbent resolves {r_inc}/{n_inc}" if r_inc else "a run never invoked the skill under test"
        j.regressed = True
        j.reasons.append(
            f"{task}: candidate must resolve every valid run for the oracle-backed quality floor "
            f"({trigger}; got {r_cand}/{n_cand})"
        )
    if m_inc is None or m_cand is None:
        j.insufficient = True
        j.reasons.append(
            f"{task}: {metric} was not measured on every valid run in both paired arms "
            f"(incumbent {_value(m_inc)}, candidate {_value(m_cand)}); cannot rank on it"
        )
    elif improvement is None:
        j.insufficient = True
        j.reasons.append(f"{task}: incumbent {metric} is zero; choose a metric with signal")
    elif improvement < -policy.max_task_regression_pct:
        j.regressed = True
        j.reasons.append(
            f"{task}: {metric} regressed {-improvement:.1f}% ({m_inc:g} -> {m_cand:g}), "
            f"above the {policy.max_task_regression_pct:.1f}% task cap"
        )
    return j


def _rate(resolved: int, valid: int) -> Fraction:
    """Exact, so 2/3 versus 4/6 never differs by a float rounding."""
    return Fraction(resolved, valid) if valid else Fraction(0)


def _share(resolved: int, valid: int) -> str:
    return f"{resolved}/{valid} ({float(100 * _rate(resolved, valid)):.1f}%)"


def _value(value: float | None) -> str:
    return "unmeasured" if value is None else f"{value:g}"
