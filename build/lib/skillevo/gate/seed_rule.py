"""The reimplemented system's promotion rule (`gate.policy: seed`), kept for comparison (notes/seed-system.md §4).

Median of per-task median improvements against a fixed threshold, an every-run quality floor, and a margin
of resolved runs that promotes without a test. `make gate-study` measures what that costs: with resolution
saturated it promotes a candidate that is no cheaper 15-24% of the time.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from skillevo.core.config import Policy
from skillevo.gate.verdict import (
    INSUFFICIENT_EVIDENCE,
    KEEP_INCUMBENT,
    PROMOTE,
    Pair,
    Verdict,
    improvement_pct,
)

# A run that never invoked its skill says the skill text failed, whatever the oracle made of the rest.
SKILL_ATTRIBUTABLE_ERROR_KINDS = frozenset({"skill-not-invoked", "phase-violation"})


@dataclass
class _Judgement:
    row: dict[str, Any]
    reasons: list[str] = field(default_factory=list)
    insufficient: bool = False
    regressed: bool = False


def judge(pairs: Sequence[Pair], policy: Policy) -> Verdict:
    """The seed's verdict; each task row's seed fields go to Verdict.rows, keyed by task."""
    metric = policy.metric
    judgements = [_judge_task(pair, policy) for pair in pairs]
    reasons = [reason for j in judgements for reason in j.reasons]
    insufficient = any(j.insufficient for j in judgements)
    regressed = any(j.regressed for j in judgements)
    rows = [j.row for j in judgements]

    gated = [pair.task for pair, row in zip(pairs, rows, strict=True) if row["gated"]]
    ungated = [pair.task for pair, row in zip(pairs, rows, strict=True) if not row["gated"]]
    if ungated:
        reasons.append(f"not gated on {len(ungated)} task(s) neither arm resolved: {', '.join(ungated)} "
                       f"(evidence base: {len(gated)}/{len(rows)} paired tasks gated)")
    if rows and not gated:
        insufficient = True
        reasons.append(f"no task supplied quality signal: neither arm resolved a run on any of the {len(rows)} "
                       "paired tasks")
    elif rows and len(gated) / len(rows) < policy.min_gated_task_ratio:  # not ratio * n: 0.28 * 25 > 7
        insufficient = True
        reasons.append(f"promotion evidence base is too thin: {len(gated)}/{len(rows)} paired tasks gated "
                       f"(at least {100 * policy.min_gated_task_ratio:g}% required)")

    improvements = [row["improvement_pct"] for row in rows if row["gated"] and row["improvement_pct"] is not None]
    median = round(statistics.median(improvements), 1) if improvements else None
    margin = sum(pair.candidate["resolved"] - pair.incumbent["resolved"] for pair in pairs)

    if insufficient or not rows:
        decision = INSUFFICIENT_EVIDENCE
    elif regressed:
        decision = KEEP_INCUMBENT
    elif margin >= policy.resolution_margin:
        decision = PROMOTE
        reasons.append(f"candidate improves total task resolution by {margin} runs "
                       f"(at least {policy.resolution_margin} required) with no task regression")
    else:
        if margin > 0:
            reasons.append(f"total resolution improved by only {margin} run(s), within the noise floor "
                           f"({policy.resolution_margin} required); deciding on efficiency instead")
        assert median is not None  # not insufficient: a gated task with a measured improvement on each
        decision = PROMOTE if median >= policy.min_improvement_pct else KEEP_INCUMBENT
        reasons.append(f"median {metric} improvement over {len(improvements)} gated task(s) is {median:.1f}% "
                       f"(required {policy.min_improvement_pct:.1f}%)")
    summary = {"median_improvement_pct": median, "resolution_margin": margin, "gated_tasks": gated,
               "ungated_tasks": ungated}
    return Verdict(decision, reasons, summary, {pair.task: row for pair, row in zip(pairs, rows, strict=True)})


def _judge_task(pair: Pair, policy: Policy) -> _Judgement:
    """The seed's per-task rule (notes/seed-system.md §4.2), every applicable check reported, in order."""
    task, incumbent, candidate, metric = pair.task, pair.incumbent, pair.candidate, policy.metric
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
    j = _Judgement({
        "gated": gated,
        "skill_attributable": skill_attributable,
        "quality_floor_applied": floor_applied,
        "quality_floor_met": floor_met,
        "incumbent_metric": m_inc,
        "candidate_metric": m_cand,
        "improvement_pct": improvement,
    })

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
        j.reasons.append(f"{task}: resolution regressed from {_share(r_inc, n_inc)} to {_share(r_cand, n_cand)}")
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

