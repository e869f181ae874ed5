"""The gate's decision (DESIGN §5): one pure function from per-(task, arm) aggregates to a decision per arm.

Whatever rule decides (`gate.policy`: stratified by default, or the seed's), every decision carries the same
analysis beside it: the estimated improvement and its interval overall and per task, resolution pooled over
tasks, and the same estimate restricted to runs where the skill loaded (per protocol: reported, never
decided on). All of it is computed from the aggregates' samples alone, so apply can recompute it from
promotion.json.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from skillevo import stats
from skillevo.config import Policy
from skillevo.gate import looks, seed_rule, stratified
from skillevo.gate.verdict import (
    INSUFFICIENT_EVIDENCE,
    KEEP_INCUMBENT,
    PROMOTE,
    Pair,
    improvement_pct,
)
from skillevo.layout import incumbent_arm_of
from skillevo.models import is_floating

__all__ = ["INSUFFICIENT_EVIDENCE", "KEEP_INCUMBENT", "PROMOTE", "decide", "decide_arm", "improvement_pct",
           "metric_warning"]

MAIN_LOOP_ONLY_METRICS = frozenset({"num_turns", "output_tokens"})
MAIN_LOOP_ONLY_WARNING = (
    "token and turn counts cover only the main agent loop: subagent spend is invisible to them and "
    "flatters subagent-heavy candidates; cost_usd is the only reported figure that includes subagents"
)

Aggregates = Mapping[tuple[str, str], Mapping[str, Any]]


def metric_warning(policy: Policy) -> str | None:
    return MAIN_LOOP_ONLY_WARNING if policy.metric in MAIN_LOOP_ONLY_METRICS else None


def decide(
    aggregates: Aggregates, policy: Policy, *, benchmark_model: str, candidate_arms: Sequence[str],
    sequential: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One decision per candidate arm, each against its paired incumbent arm, in the given arm order."""
    return [
        decide_arm(aggregates, policy, benchmark_model=benchmark_model, incumbent_arm=incumbent_arm_of(arm),
                   candidate_arm=arm, sequential=sequential)
        for arm in candidate_arms
    ]


def decide_arm(
    aggregates: Aggregates, policy: Policy, *, benchmark_model: str, incumbent_arm: str, candidate_arm: str,
    sequential: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The decision object for one candidate arm; `aggregates` maps (task, arm) to an aggregate, `sequential`
    is the candidate side's look record (skillevo.results.sequential_record) or None for a fixed bench."""
    reasons: list[str] = []
    if is_floating(benchmark_model):
        reasons.append(f"benchmark model {benchmark_model!r} is not a pinned model id (empty, or a floating alias); "
                       "a pinned id is required so the evidence cannot drift")
    pairs: list[Pair] = []
    for task in sorted({task for task, _ in aggregates}):
        incumbent, candidate = aggregates.get((task, incumbent_arm)), aggregates.get((task, candidate_arm))
        if incumbent is None or candidate is None:
            missing = incumbent_arm if incumbent is None else candidate_arm
            reasons.append(f"{task}: both {incumbent_arm} and {candidate_arm} are required, {missing} has no results")
        else:
            pairs.append(Pair(task, incumbent, candidate))
    if not pairs:
        reasons.append(f"no paired task results were found for {incumbent_arm} and {candidate_arm}")

    level = looks.levels(policy, sequential)
    estimate = _estimate(pairs, policy.metric, level.cost)
    quality = _quality(pairs, level.drop)
    protocol = _estimate(pairs, policy.metric, level.cost, skill_loaded=True)
    if policy.policy == "seed":
        verdict = seed_rule.judge(pairs, policy)
    else:
        verdict = stratified.judge(pairs, policy, estimate, quality, level)
    decision = INSUFFICIENT_EVIDENCE if reasons else verdict.decision
    excluded = sum(agg["excluded_runs"] for pair in pairs for agg in (pair.incumbent, pair.candidate))
    notes = [f"{excluded} run(s) excluded as harness faults (docs/formats.md, missing data)"] if excluded else []
    if sequential is not None:
        notes.append(f"the candidate side stopped at look {sequential['stopped_at_look']} of "
                     f"{len(sequential['looks'])} ({sequential['reason']}); "
                     + ("the seed rule takes no account of it" if policy.policy == "seed" else
                        f"tested at that look's {policy.look_boundary} level"))
    per_task = estimate.per_task if estimate else (None,) * len(pairs)
    return {
        "incumbent_arm": incumbent_arm,
        "candidate_arm": candidate_arm,
        "policy": policy.policy,
        "decision": decision,
        "metric": policy.metric,
        "metric_warning": metric_warning(policy),
        "reasons": reasons + verdict.reasons + notes,
        "estimate": estimate.to_dict(level.cost) if estimate else None,
        "quality": quality.to_dict() if quality else None,
        "per_protocol": protocol.to_dict(level.cost) if protocol else None,
        "seed": verdict.summary,
        "tasks": [_task_row(pair, task_estimate, (verdict.rows or {}).get(pair.task))
                  for pair, task_estimate in zip(pairs, per_task, strict=True)],
    }


def _task_row(pair: Pair, estimate: tuple[float, tuple[float, float]] | None, seed: dict[str, Any] | None
              ) -> dict[str, Any]:
    inc, cand = pair.incumbent, pair.candidate
    return {
        "task": pair.task,
        "class": inc["class"],
        "incumbent_rate": round(inc["resolved"] / inc["valid_runs"], 4) if inc["valid_runs"] else None,
        "candidate_rate": round(cand["resolved"] / cand["valid_runs"], 4) if cand["valid_runs"] else None,
        "improvement_pct": None if estimate is None else round(estimate[0], 2),
        "interval_pct": None if estimate is None else [round(v, 2) for v in estimate[1]],
        "seed": seed,
        "incumbent": dict(inc),
        "candidate": dict(cand),
    }


def _estimate(pairs: Sequence[Pair], metric: str, alpha: float, *, skill_loaded: bool = False
              ) -> stats.Estimate | None:
    """The log-ratio estimate over every task (or, per protocol, over runs whose skill loaded, in the tasks
    where both arms have such runs); None when a task lacks usable values."""
    strata = []
    for pair in pairs:
        arms = [[s[metric] for s in agg["samples"] if s["skill_invoked"] or not skill_loaded]
                for agg in (pair.incumbent, pair.candidate)]
        if skill_loaded and not all(arms):
            continue
        if any(v is None for values in arms for v in values):
            return None
        strata.append((arms[0], arms[1]))
    return stats.log_ratio(strata, alpha)


def _quality(pairs: Sequence[Pair], alpha: float) -> stats.Quality | None:
    counts = [((p.incumbent["resolved"], p.incumbent["valid_runs"]), (p.candidate["resolved"], p.candidate["valid_runs"]))
              for p in pairs if p.incumbent["valid_runs"] and p.candidate["valid_runs"]]
    return stats.quality(counts, alpha) if counts else None
