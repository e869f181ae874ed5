"""The statistics the default gate decides with, each a small pure function with a stated error rate.

Cost is compared on the log scale (agent cost is multiplicative noise: a run twice as long costs about twice
as much), with tasks as strata: per task the difference of mean log metric, averaged over tasks with equal
weight, so the estimate is the candidate's geometric-mean ratio over the task set. The spread is pooled within
(task, arm) cells, which holds when noise is multiplicative with one coefficient of variation (the simulator's
and, as far as published run-to-run figures go, real agents'); `make gate-study` measures what that costs
when it does not hold. Resolution is compared with exact (Clopper-Pearson) limits, which never understate
the uncertainty of a rate near 0 or 1, and a Cochran-Mantel-Haenszel test over tasks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize
from scipy import stats as sps

Stratum = tuple[Sequence[float], Sequence[float]]  # (incumbent values, candidate values) of one task
Counts = tuple[int, int]  # (resolved, valid runs)


@dataclass(frozen=True)
class Estimate:
    """The candidate's geometric-mean ratio of the metric to the incumbent's, as an improvement in percent."""

    improvement_pct: float  # 100 * (1 - ratio): positive = the candidate spends less
    interval_pct: tuple[float, float]  # two-sided, level 1 - 2 alpha: the one-sided bounds at alpha each side
    ratio: float
    p_value: float  # one-sided, null: the candidate is not cheaper (ratio >= 1)
    p_value_worse: float  # one-sided, null: the candidate is not dearer (ratio <= 1)
    df: int
    log_sd: float  # pooled within-cell standard deviation of the log metric
    per_task: tuple[tuple[float, tuple[float, float]], ...]  # (improvement_pct, interval_pct) per stratum

    def to_dict(self, alpha: float) -> dict[str, object]:
        return {
            "improvement_pct": _round(self.improvement_pct),
            "interval_pct": [_round(v) for v in self.interval_pct],
            "confidence": round(1 - 2 * alpha, 6),
            "ratio": _round(self.ratio, 6),
            "p_value": _round(self.p_value, 6),
            "df": self.df,
            "log_sd": _round(self.log_sd, 6),
        }


def log_ratio(strata: Sequence[Stratum], alpha: float) -> Estimate | None:
    """A stratified one-sided t-test on the log metric; None when the spread cannot be estimated (no stratum
    with two runs in an arm) or a value is not positive (a log scale has no place for zero)."""
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
    per_task = tuple((_pct(x), _interval(x, sd * s, crit)) for x, s in zip(diffs, scales, strict=True))
    return Estimate(_pct(d), _interval(d, se, crit), math.exp(d), p, p_worse, df, sd, per_task)


@dataclass(frozen=True)
class Quality:
    """Resolution of the two arms, pooled over tasks and tested with tasks as strata."""

    incumbent: Counts
    candidate: Counts
    drop_pct: float  # pooled incumbent rate minus candidate rate, in points
    drop_upper_pct: float  # its one-sided upper confidence bound
    decrease_p_value: float | None  # stratified test of "the candidate resolves less"; None: no task informs it
    increase_p_value: float | None  # stratified test of "the candidate resolves more"

    def to_dict(self) -> dict[str, object]:
        return {
            "incumbent": {"resolved": self.incumbent[0], "valid_runs": self.incumbent[1]},
            "candidate": {"resolved": self.candidate[0], "valid_runs": self.candidate[1]},
            "drop_pct": _round(self.drop_pct),
            "drop_upper_pct": _round(self.drop_upper_pct),
            "decrease_p_value": None if self.decrease_p_value is None else _round(self.decrease_p_value, 6),
            "increase_p_value": None if self.increase_p_value is None else _round(self.increase_p_value, 6),
        }


def quality(strata: Sequence[tuple[Counts, Counts]], alpha: float) -> Quality:
    """Pooled drop with a MOVER upper bound built from exact one-sided limits (conservative: with every run of
    both arms resolved, the bound is 1 - alpha ** (1 / n), so n runs per arm can rule out a drop of that much
    and no less), and a continuity-corrected Cochran-Mantel-Haenszel statistic for each direction."""
    r_inc, n_inc = (sum(c[0][k] for c in strata) for k in (0, 1))
    r_cand, n_cand = (sum(c[1][k] for c in strata) for k in (0, 1))
    p_inc, p_cand = r_inc / n_inc, r_cand / n_cand
    upper_inc = 1.0 if r_inc == n_inc else float(sps.beta.ppf(1 - alpha, r_inc + 1, n_inc - r_inc))
    lower_cand = 0.0 if r_cand == 0 else float(sps.beta.ppf(alpha, r_cand, n_cand - r_cand + 1))
    drop = p_inc - p_cand
    upper = drop + math.sqrt((upper_inc - p_inc) ** 2 + (p_cand - lower_cand) ** 2)
    excess, variance = 0.0, 0.0
    for (ri, ni), (rc, nc) in strata:
        total, resolved = ni + nc, ri + rc
        if total < 2:
            continue
        excess += rc - nc * resolved / total
        variance += nc * ni * resolved * (total - resolved) / (total * total * (total - 1))
    if variance > 0:
        sd = math.sqrt(variance)
        decrease = float(sps.norm.cdf((excess + 0.5) / sd))
        increase = float(sps.norm.sf((excess - 0.5) / sd))
    else:
        decrease = increase = None
    return Quality((r_inc, n_inc), (r_cand, n_cand), 100 * drop, 100 * min(upper, 1.0), decrease, increase)


def detectable_improvement_pct(log_sd: float, tasks: int, runs: int, alpha: float, power: float) -> float | None:
    """The smallest true improvement the log-ratio test finds with the given power at `runs` per arm and task
    (normal approximation with t quantiles); None when the design leaves no degrees of freedom."""
    df = 2 * tasks * (runs - 1)
    if tasks < 1 or df < 1:
        return None
    se = log_sd * math.sqrt(2 / runs) / math.sqrt(tasks)
    shift = (float(sps.t.ppf(1 - alpha, df)) + float(sps.t.ppf(power, df))) * se
    return _pct(-shift)


def runs_to_bound_drop(margin_pct: float, alpha: float) -> int:
    """Runs per arm (all tasks together) before even a perfect record bounds the resolution drop below the
    margin: the smallest n with 1 - alpha ** (1 / n) <= margin."""
    margin = margin_pct / 100
    if margin >= 1:
        return 1
    return max(1, math.ceil(math.log(alpha) / math.log(1 - margin) - 1e-9))


LOOK_BOUNDARIES = ("spending", "bonferroni")  # params gate.look_boundary


def look_fractions(looks: Sequence[int]) -> tuple[float, ...]:
    """The information at each look relative to the last, when the candidate has looks[j] runs per task and the
    incumbent always runs looks[-1]: a look's difference of means has variance (1/n_j + 1/N) sigma^2, so with
    the incumbent shared the looks' statistics have the canonical correlation sqrt(t_i / t_j) at these t."""
    if not looks or any(n < 1 for n in looks) or any(b <= a for a, b in zip(looks, looks[1:])):
        raise ValueError(f"looks must be increasing positive run counts, not {list(looks)}")
    last = looks[-1]
    return tuple(2 * n / (n + last) for n in looks)


def spent(fraction: float, alpha: float) -> float:
    """Lan-DeMets O'Brien-Fleming-type spending, one-sided: what of `alpha` may be spent by `fraction` of the
    planned candidate runs (all of it at 1). Early looks get almost none, so the last keeps nearly the fixed
    level. Spending on the run fraction rather than the information (look_fractions, which the shared incumbent
    pushes towards 1 from the first look) is one more pre-planned time scale: it keeps alpha just as well."""
    if fraction >= 1:
        return alpha
    return float(2 * sps.norm.sf(sps.norm.isf(alpha / 2) / math.sqrt(fraction)))


def look_levels(looks: Sequence[int], alpha: float, boundary: str = "spending") -> tuple[float, ...]:
    """The nominal one-sided level of each planned look: a test that rejects at look j when its p-value is at
    or below levels[j] rejects at some look with probability at most alpha under the null, however the looks
    are stopped (docs/gate.md, sequential runs).

    `spending`: exact group-sequential boundaries for O'Brien-Fleming-type spending (spent) under the canonical
    joint normal law of the looks at their information fractions (look_fractions; Armitage-McPherson-Rowe
    recursive integration), so together the looks spend exactly alpha. `bonferroni`: each look at the alpha
    spent there, which sums to alpha for any correlation between the looks and so needs no model of it, at
    some cost in power."""
    if boundary not in LOOK_BOUNDARIES:
        raise ValueError(f"unknown look boundary {boundary!r}")
    return _look_levels(tuple(int(n) for n in looks), float(alpha), boundary)


@lru_cache(maxsize=256)
def _look_levels(looks: tuple[int, ...], alpha: float, boundary: str) -> tuple[float, ...]:
    fractions = look_fractions(looks)
    cumulative = [spent(n / looks[-1], alpha) for n in looks]
    increments = [b - a for a, b in zip([0.0, *cumulative], cumulative)]
    if boundary == "bonferroni" or len(looks) == 1:
        return tuple(max(0.0, a) for a in increments)
    return tuple(float(sps.norm.sf(c)) for c in _boundaries(fractions, increments))


_SPAN = 8.0  # standard deviations of the Brownian path kept below the boundary; beyond it the mass is < 1e-15
_NO_BOUNDARY = 40.0  # a look that may spend nothing never rejects


def _boundaries(fractions: Sequence[float], increments: Sequence[float]) -> list[float]:
    """z-boundaries c_j with P(first crossing at look j) = increments[j] for Brownian motion B observed at the
    fractions (Z_j = B(t_j) / sqrt(t_j)): the density of B on the continuation region is carried from look to
    look on a grid (Simpson weights) and each boundary is solved for in turn."""
    bounds: list[float] = []
    grid = weights = density = None
    previous = 0.0
    for t, target in zip(fractions, increments):
        step = t - previous
        sd = math.sqrt(step)
        if grid is None:
            bound = _NO_BOUNDARY if target <= 0 else float(sps.norm.isf(target))
        else:
            mass = weights * density

            def crossing(c: float, t: float = t, sd: float = sd, mass: np.ndarray = mass, grid: np.ndarray = grid
                         ) -> float:
                return float(mass @ sps.norm.sf((c * math.sqrt(t) - grid) / sd))

            if target <= 0 or crossing(_NO_BOUNDARY) >= target:
                bound = _NO_BOUNDARY
            else:
                bound = float(optimize.brentq(lambda c: crossing(c) - target, -_NO_BOUNDARY, _NO_BOUNDARY,
                                              xtol=1e-10, rtol=1e-12))
        bounds.append(bound)
        top = min(bound * math.sqrt(t), _SPAN * math.sqrt(t))
        h = min(0.05, sd / 12)
        points = max(3, 2 * math.ceil((top + _SPAN * math.sqrt(t)) / (2 * h)) + 1)
        new_grid = np.linspace(-_SPAN * math.sqrt(t), top, points)
        if grid is None:
            new_density = sps.norm.pdf(new_grid / sd) / sd
        else:
            kernel = sps.norm.pdf((new_grid[:, None] - grid[None, :]) / sd) / sd
            new_density = kernel @ (weights * density)
        spacing = new_grid[1] - new_grid[0]
        new_weights = np.full(points, 2.0)
        new_weights[1::2] = 4.0
        new_weights[0] = new_weights[-1] = 1.0
        grid, weights, density, previous = new_grid, new_weights * spacing / 3, new_density, t
    return bounds


def _interval(d: float, se: float, crit: float) -> tuple[float, float]:
    return _pct(d + crit * se), _pct(d - crit * se)


def _pct(log_ratio: float) -> float:
    return 100 * (1 - math.exp(log_ratio))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _ss(values: Sequence[float]) -> float:
    m = _mean(values)
    return sum((v - m) ** 2 for v in values)


def _round(value: float, digits: int = 2) -> float:
    return round(float(value), digits)
