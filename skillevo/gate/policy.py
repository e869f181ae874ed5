"""The gate's decision (DESIGN §5): one pure function from per-(task, arm) aggregates to a decision per arm.

Whatever rule decides (`gate.policy`: per_resolved by default, geometric or the seed's, both kept for
comparison), every decision carries the same analysis beside it: the estimated improvement and its interval
overall and per task, resolution pooled over tasks, and the same estimate restricted to runs where the skill
loaded (per protocol: reported, never decided on). All of it is computed from the aggregates' samples alone,
so apply can recompute it from promotion.json.

Runs lost to harness faults (excluded error kinds, which nothing the agent does can cause) are left out, and a
per_resolved decision must also survive the worst case for them: every excluded candidate run counted as unresolved
at its task's highest observed metric, every excluded incumbent run as resolved at the lowest. A fault that
hits long runs more often (an API session that dies the longer it runs) then cannot flatter the candidate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from skillevo import stats
from skillevo.core.config import Policy
from skillevo.core.layout import incumbent_arm_of
from skillevo.core.models import is_floating
from skillevo.gate import looks, rounds, seed_rule, stratified
from skillevo.gate.verdict import (
    INSUFFICIENT_EVIDENCE,
    KEEP_INCUMBENT,
    PROMOTE,
    Pair,
    improvement_pct,
)
from skillevo.stats import betting

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
    sequential: Mapping[str, Any] | None = None, designs: Mapping[str, betting.Design] | None = None,
) -> list[dict[str, Any]]:
    """One decision per candidate arm, each against its paired incumbent arm, in the given arm order; `designs`
    maps each control arm to the design its candidate side ran under (skillevo.core.sampling.design)."""
    return [
        decide_arm(aggregates, policy, benchmark_model=benchmark_model, incumbent_arm=incumbent_arm_of(arm),
                   candidate_arm=arm, sequential=sequential,
                   design=None if designs is None else designs[incumbent_arm_of(arm)])
        for arm in candidate_arms
    ]


def decide_arm(
    aggregates: Aggregates, policy: Policy, *, benchmark_model: str, incumbent_arm: str, candidate_arm: str,
    sequential: Mapping[str, Any] | None = None, design: betting.Design | None = None,
) -> dict[str, Any]:
    """The decision object for one candidate arm; `aggregates` maps (task, arm) to an aggregate, `sequential`
    is the candidate side's look record (skillevo.core.results.sequential_record) or None for a fixed bench, and
    `design` what the per_resolved test bets and caps by (None: sized from the controls' own runs, which only a
    caller without an incumbent side does; the gate stage always passes the incumbent side's)."""
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
    estimand = "geometric" if policy.policy == "geometric" else "per_resolved"
    estimate = _estimate(pairs, policy.metric, level.cost, estimand)
    quality = _quality(pairs, level.drop)
    everyone_loaded = all(s["skill_invoked"] for p in pairs for agg in (p.incumbent, p.candidate)
                          for s in agg["samples"])
    protocol = estimate if everyone_loaded else _estimate(pairs, policy.metric, level.cost, estimand,
                                                          skill_loaded=True)
    bound, found = None, None
    if policy.policy == "per_resolved" and policy.test == "betting" and pairs and estimate is not None:
        found = rounds.wealth(pairs, policy.metric, design, policy.max_resolution_drop_pct / 100)
    if policy.policy == "seed":
        verdict = seed_rule.judge(pairs, policy)
    else:
        verdict = stratified.judge(pairs, policy, estimate, quality, level, found and found[0], found and found[1])
        if verdict.decision == PROMOTE and found is None:  # the test by betting counts lost runs at their worst itself
            verdict, bound = _survives_exclusions(pairs, policy, level, verdict)
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
        "claim": stratified.claim(policy) if decision == PROMOTE else None,
        "metric": policy.metric,
        "metric_warning": metric_warning(policy),
        "reasons": reasons + verdict.reasons + notes,
        "estimate": estimate.to_dict(level.cost) if estimate else None,
        "test": None if found is None else rounds.describe(*found, level.cost),
        "exclusion_bound": bound,
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
        "interval_pct": None if estimate is None else stats.interval(estimate[1]),
        "seed": seed,
        "incumbent": dict(inc),
        "candidate": dict(cand),
    }


def _estimate(pairs: Sequence[Pair], metric: str, alpha: float, estimand: str, *, skill_loaded: bool = False
              ) -> stats.Estimate | None:
    """The cost test's estimate over every task (or, per protocol, over runs whose skill loaded, in the tasks
    where both arms have such runs); None when a task lacks usable values."""
    strata = []
    for pair in pairs:
        arms = [[(s[metric], s["resolved"]) for s in agg["samples"] if s["skill_invoked"] or not skill_loaded]
                for agg in (pair.incumbent, pair.candidate)]
        if skill_loaded and not all(arms):
            continue
        if any(v is None for runs in arms for v, _ in runs):
            return None
        strata.append((arms[0], arms[1]))
    if estimand == "geometric":
        return stats.log_ratio([([v for v, _ in inc], [v for v, _ in cand]) for inc, cand in strata], alpha)
    return stats.per_resolved(strata, alpha)


def _survives_exclusions(pairs: Sequence[Pair], policy: Policy, level: looks.Levels, verdict: stratified.Verdict
                         ) -> tuple[stratified.Verdict, dict[str, Any] | None]:
    """A promotion stands only if it would still stand with every excluded run put back at its worst; the bound
    promotion.json carries, or None when no run was excluded."""
    worst = _worst_case(pairs, policy.metric)
    if worst is None:
        return verdict, None
    w_estimate = _estimate(worst, policy.metric, level.cost, "per_resolved")
    w_verdict = stratified.judge(worst, policy, w_estimate, _quality(worst, level.drop), level)
    bound = {"imputed_candidate_runs": sum(p.candidate["excluded_runs"] for p in pairs),
             "imputed_incumbent_runs": sum(p.incumbent["excluded_runs"] for p in pairs),
             "decision": w_verdict.decision, "estimate": w_estimate.to_dict(level.cost) if w_estimate else None}
    if w_verdict.decision == PROMOTE:
        return verdict, bound
    return stratified.Verdict(KEEP_INCUMBENT, [
        *verdict.reasons, "but not with every excluded candidate run counted as unresolved at its task's highest "
        "observed cost and every excluded incumbent run as resolved at its lowest: " + "; ".join(w_verdict.reasons)]
    ), bound


def _worst_case(pairs: Sequence[Pair], metric: str) -> list[Pair] | None:
    """The pairs with each excluded run put back at its worst for the candidate: a candidate run unresolved at its
    task's highest observed metric, an incumbent run resolved at the lowest; None when no run was excluded (or a
    task has no measured value to put them at)."""
    if not any(agg["excluded_runs"] for pair in pairs for agg in (pair.incumbent, pair.candidate)):
        return None
    out = []
    for pair in pairs:
        seen = [s[metric] for agg in (pair.incumbent, pair.candidate) for s in agg["samples"] if s[metric] is not None]
        if not seen:
            return None
        out.append(Pair(pair.task, _impute(pair.incumbent, min(seen), True, metric),
                        _impute(pair.candidate, max(seen), False, metric)))
    return out


def _impute(agg: Mapping[str, Any], value: float, resolved: bool, metric: str) -> dict[str, Any]:
    extra = agg["excluded_runs"]
    if not extra:
        return dict(agg)
    last = max((s["run"] for s in agg["samples"]), default=0)
    fill = [{**dict.fromkeys(("cost_usd", "duration_s", "num_turns", "output_tokens")), metric: value,
             "run": last + i + 1, "resolved": resolved, "skill_invoked": True} for i in range(extra)]
    return {**agg, "samples": [*agg["samples"], *fill], "valid_runs": agg["valid_runs"] + extra,
            "excluded_runs": 0, "resolved": agg["resolved"] + (extra if resolved else 0)}


def _quality(pairs: Sequence[Pair], alpha: float) -> stats.Quality | None:
    counts = [((p.incumbent["resolved"], p.incumbent["valid_runs"]),
               (p.candidate["resolved"], p.candidate["valid_runs"]))
              for p in pairs if p.incumbent["valid_runs"] and p.candidate["valid_runs"]]
    return stats.quality(counts, alpha) if counts else None
