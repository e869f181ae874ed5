"""The geometric-mean test (`gate.policy: geometric`): a stratified one-sided t-test on the log metric per run.

Per task the difference of mean log cost, averaged over tasks with equal weight, so the estimate is the
candidate's geometric-mean ratio over the task set, with the spread pooled within (task, arm) cells. It is
kept for comparison, like the seed's rule: it tests a convenient transform, not what a team pays. Measured,
it promotes candidates that cost the same or more in dollars far above alpha: a wider spread, a retry loop,
savings on cheap tasks paid for on dear ones (docs/gate.md). The default is skillevo.stats.per_resolved.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from skillevo.stats.estimate import Estimate, pct

Stratum = tuple[Sequence[float], Sequence[float]]  # (incumbent values, candidate values) of one task


def log_ratio(strata: Sequence[Stratum], alpha: float) -> Estimate | None:
    """A stratified one-sided t-test on the log metric; None when the spread cannot be estimated (no stratum
    with two runs in an arm) or a value is not positive (a log scale has no place for zero)."""
    from scipy import stats as sps
    if not strata or any(not inc or not cand for inc, cand in strata):
        return None
    if any(v <= 0 for inc, cand in strata for v in (*inc, *cand)):
        return None
    logs = [([math.log(v) for v in inc], [math.log(v) for v in cand]) for inc, cand in strata]
    df = sum(len(inc) + len(cand) - 2 for inc, cand in logs)
    if df < 1:
        return None
    squares = sum(_ss(inc) + _ss(cand) for inc, cand in logs)
    sd = math.sqrt(squares / df)
    diffs = [_mean(cand) - _mean(inc) for inc, cand in logs]
    scales = [math.sqrt(1 / len(inc) + 1 / len(cand)) for inc, cand in logs]
    d = sum(diffs) / len(diffs)
    se = sd * math.sqrt(sum(s * s for s in scales)) / len(scales)
    crit = float(sps.t.ppf(1 - alpha, df))
    if se > 0:
        t = d / se
        p, p_worse = float(sps.t.cdf(t, df)), float(sps.t.sf(t, df))
    else:  # identical runs within every cell: the difference is known exactly
        p, p_worse = (0.0, 1.0) if d < 0 else (1.0, 0.0) if d > 0 else (1.0, 1.0)
    per_task = tuple((pct(x), _interval(x, sd * s, crit)) for x, s in zip(diffs, scales, strict=True))
    return Estimate("geometric", pct(d), _interval(d, se, crit), math.exp(d), p, p_worse, per_task, "t", df=df,
                    log_sd=sd)


def _interval(d: float, se: float, crit: float) -> tuple[float, float]:
    return pct(d + crit * se), pct(d - crit * se)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _ss(values: Sequence[float]) -> float:
    m = _mean(values)
    return sum((v - m) ** 2 for v in values)
