"""The tested promotion rules (`gate.policy: per_resolved`, the default, and `geometric`), docs/gate.md: a decision
with a stated error rate.

A candidate arm that is not better is promoted at most `alpha` of the time: it is promoted on the metric only
when a one-sided test stratified by task rejects "not cheaper" at alpha (per_resolved:
the candidate's metric per resolved task over the gate's tasks, what a team pays; geometric: the geometric-mean
ratio per run, kept for comparison). That is the only claim a promotion makes (CLAIMS): resolution guards it,
never promotes on its own. Apply needs every required arm, so over arms this is an
intersection-union test and needs no correction. Quality comes first: a significant drop in resolution, or one
that the bet against a drop of the stated margin cannot rule out, never promotes. Too few runs for the estimate a
claim quotes (gate.min_total_runs) is insufficient evidence, never a promotion, and never a keep unless resolution
fell significantly. A candidate side stopped at one of its planned looks is judged by the same rule: the tests by
betting hold alpha at every look (skillevo/gate/looks.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from skillevo import stats
from skillevo.core.config import Policy
from skillevo.gate.looks import Levels
from skillevo.gate.verdict import (
    INSUFFICIENT_EVIDENCE,
    KEEP_INCUMBENT,
    PROMOTE,
    Pair,
    Verdict,
)
from skillevo.stats import betting

__all__ = ["CLAIMS", "Verdict", "claim", "judge"]

CLAIMS = {  # gate.policy -> the one sentence a promotion under it states (docs/gate.md, claims)
    "per_resolved": "the candidate is cheaper per resolved task than its control, in {metric} over the gate's tasks, "
                    "by at least {min_improvement_pct:g}% as estimated, with a false-promotion rate of at most "
                    "{alpha:g}, and resolves no less within {max_resolution_drop_pct:g} points",
    "geometric": "the candidate's {metric} per run is lower than its control's (geometric mean over the gate's "
                 "tasks) at level {alpha:g}; not a claim about cost per resolved task",
    "seed": "the candidate passes the seed's heuristic rule on {metric}; no error rate is stated",
}


def claim(policy: Policy) -> str:
    """The sentence a promotion under `policy` makes, with its own thresholds filled in."""
    return CLAIMS[policy.policy].format(**policy.to_dict())


def judge(pairs: Sequence[Pair], policy: Policy, estimate: stats.Estimate | None, quality: stats.Quality | None,
          levels: Levels, wealth: betting.Wealth | None = None, drop: betting.Wealth | None = None) -> Verdict:
    """`levels` are the fixed design's or, for a sequential candidate side, its stopped look's
    (skillevo/gate/looks.py); `estimate` and `quality` were computed at them. per_resolved decides on `wealth`,
    the test by betting (skillevo.stats.betting), and bounds the resolution drop by `drop`, the bet against a drop
    of max_resolution_drop_pct or more; the estimate and the MOVER bound only say how much."""
    metric = policy.metric
    reasons = _missing_data(pairs, policy)
    if reasons or quality is None:
        return Verdict(INSUFFICIENT_EVIDENCE, reasons or ["no task has valid runs in both arms"])
    if any(all(getattr(p, arm)["valid_runs"] < 2 for p in pairs) for arm in ("incumbent", "candidate")):
        return Verdict(INSUFFICIENT_EVIDENCE, [f"the spread of {metric} cannot be estimated: no task has two "
                                               "valid runs in an arm"])

    q = quality
    inc, cand = q.incumbent, q.candidate
    shares = f"{inc[0]}/{inc[1]} -> {cand[0]}/{cand[1]} resolved"
    if q.decrease_p_value is not None and q.decrease_p_value <= policy.quality_alpha:
        return Verdict(KEEP_INCUMBENT, [f"resolution fell ({shares}): the stratified test for a decrease gives "
                                        f"p={q.decrease_p_value:.3g}, at or below quality_alpha "
                                        f"{policy.quality_alpha:g}"])
    short = _too_few_for_the_estimate(pairs, policy)
    if short:  # only a significant drop in resolution may answer on fewer runs: it keeps, never promotes
        return Verdict(INSUFFICIENT_EVIDENCE, [short])
    if drop is not None and not drop.rejects(levels.cost):
        bound = (f"a resolution drop of {policy.max_resolution_drop_pct:g} points or more cannot be ruled out: the bet "
                 f"against it reached e={drop.e_value():.4g}, {1 / levels.cost:.4g} needed ({shares}; bound "
                 f"{q.drop_upper_pct:.1f} points)")
        if q.drop_pct > 0:
            return Verdict(KEEP_INCUMBENT, [f"resolution fell by {q.drop_pct:.1f} points and {bound}"])
        return Verdict(INSUFFICIENT_EVIDENCE, [f"{bound}: more runs per task are needed"])
    if drop is None and q.drop_upper_pct > policy.max_resolution_drop_pct:
        bound = (f"a resolution drop of up to {q.drop_upper_pct:.1f} points cannot be ruled out at "
                 f"{100 * (1 - levels.drop):.6g}% confidence ({shares}; at most {policy.max_resolution_drop_pct:g} "
                 "allowed)")
        if q.drop_pct > 0:
            return Verdict(KEEP_INCUMBENT, [f"resolution fell by {q.drop_pct:.1f} points and {bound}"])
        needed = stats.runs_to_bound_drop(policy.max_resolution_drop_pct, levels.drop)
        return Verdict(INSUFFICIENT_EVIDENCE, [f"{bound}: even with every run resolved it takes at least {needed} "
                                               "valid runs per arm over all tasks; raise sampling.runs"])

    if estimate is None:
        if policy.policy == "geometric":
            return Verdict(INSUFFICIENT_EVIDENCE, [f"the spread of {metric} cannot be estimated: no task has two "
                                                   "valid runs in an arm"])
        if cand[0] == 0:
            return Verdict(KEEP_INCUMBENT, [f"the candidate resolved no run ({shares}): its {metric} per resolved "
                                            "task is unbounded"])
        if inc[0] == 0:
            return Verdict(INSUFFICIENT_EVIDENCE, [f"the incumbent resolved no run ({shares}): {metric} per resolved "
                                                   "task cannot be compared (a promotion claims only a lower "
                                                   f"{metric} per resolved task; docs/gate.md, claims)"])
        return Verdict(INSUFFICIENT_EVIDENCE, [f"{metric} is zero in every run of an arm: nothing to compare"])

    level = levels.cost
    what = "per resolved task" if estimate.estimand == "per_resolved" else "per run (geometric mean)"
    shown = estimate.to_dict(level)  # the figures promotion.json and the report show, rounded once, alike
    low, high = shown["interval_pct"]
    found = (f"{metric} {what}: estimated improvement {stats.improvement_text(shown)} ({100 * (1 - 2 * level):.4g}% "
             f"interval {stats.bound_text(low)} to {stats.bound_text(high)}), one-sided {stats.p_text(shown)} "
             f"against 'not cheaper' at level {level:.3g}")
    if wealth is not None:
        found = (f"{metric} {what}: estimated improvement {stats.improvement_text(shown)} "
                 f"({100 * (1 - 2 * level):.4g}% interval {stats.bound_text(low)} to {stats.bound_text(high)}); the "
                 f"test by betting reached e={wealth.e_value():.4g} over {len(wealth.log_wealth)} round(s) against "
                 f"'not cheaper', {1 / level:.4g} needed (level {level:.3g})")
        significant = wealth.rejects(level)
    else:
        significant = estimate.p_value <= level
    if significant and estimate.improvement_pct >= policy.min_improvement_pct:
        return Verdict(PROMOTE, [f"{found}; at least {policy.min_improvement_pct:g}% required"])
    if not significant:
        why = "not significant"
    else:
        why = f"significant, but below the required {policy.min_improvement_pct:g}%"
    return Verdict(KEEP_INCUMBENT, [f"{found}: {why}"])


def _missing_data(pairs: Sequence[Pair], policy: Policy) -> list[str]:
    """Every task needs min_runs valid runs per arm with the metric measured in each (and positive, for a log
    scale)."""
    metric, reasons = policy.metric, []
    for pair in pairs:
        n_inc, n_cand = pair.incumbent["valid_runs"], pair.candidate["valid_runs"]
        if n_inc < policy.min_runs or n_cand < policy.min_runs:
            reasons.append(f"{pair.task}: needs at least {policy.min_runs} valid runs per arm (got {n_inc}/{n_cand})")
            continue
        values = [s[metric] for agg in (pair.incumbent, pair.candidate) for s in agg["samples"]]
        unmeasured = sum(1 for v in values if v is None)
        if unmeasured:
            reasons.append(f"{pair.task}: {metric} was not measured in {unmeasured} valid run(s); an unmeasured run "
                           "is never read as free")
        elif policy.policy == "geometric" and any(v <= 0 for v in values):
            reasons.append(f"{pair.task}: {metric} is zero in {sum(1 for v in values if v <= 0)} valid run(s); the "
                           "log-scale test needs positive values (choose a metric with signal)")
    return reasons


def _too_few_for_the_estimate(pairs: Sequence[Pair], policy: Policy) -> str | None:
    """Each arm needs min_total_runs valid runs over the gate's tasks before anything promotes (per_resolved): the
    test by betting holds its level at any number, but the estimate a claim quotes needs some runs behind it."""
    if policy.policy != "per_resolved" or not pairs:
        return None
    totals = [sum(p.incumbent["valid_runs"] for p in pairs), sum(p.candidate["valid_runs"] for p in pairs)]
    if min(totals) >= policy.min_total_runs:
        return None
    per_task = -(-policy.min_total_runs // len(pairs))
    return (f"{min(totals)} valid runs in an arm over the {len(pairs)} gate task(s) (incumbent {totals[0]}, candidate "
            f"{totals[1]}): a promotion's estimate is stated on at least {policy.min_total_runs} "
            f"(gate.min_total_runs); run at least {per_task} per task (sampling.runs)")
