"""The default cost test (`gate.policy: per_resolved`): is the candidate cheaper per resolved task?

The estimand is what a team pays. Over the gate's task set, each task attempted equally often, an arm spends
M = sum over tasks of its mean metric per run (dollars, failed runs included: they are paid for too) and resolves
P = sum over tasks of its resolution rate, so its metric per resolved task is M / P, and the candidate's ratio
is theta = (M_c / P_c) / (M_i / P_i). Arithmetic means throughout, never their logs: a skill that sometimes
explores much more, or loops, costs what it costs. A task weighs in by its dollars (a saving on a dear task is
worth more than the same share of a cheap one), which is the team's bill for the task set.

The test is one-sided, "theta >= 1" against "the candidate is cheaper per resolved task", on log theta with
a delta-method standard error, calibrated by a studentised (bootstrap-t) resampling that keeps its level at
small n with skewed, unequal-variance and heavy-tailed costs (measured by `make gate-study`, docs/gate.md):

- each cell's cost variance is at least what the arm's pooled coefficient of variation implies for it, so a
  dear task whose few runs happened to miss the arm's tail (a retry loop seen on another task) is not read as
  precise;
- the resampling draws each cell's runs from its arm's runs on every task, scaled to the cell's mean (a
  multiplicative model of cost, with resolution shifted to the cell's rate): a tail seen on any task shapes
  the null distribution of every task's contribution.

Everything is a pure function of the runs: the resampling is seeded from the design (the run counts), so the
gate, a rerun and apply's recomputation from promotion.json give the same p-value to the last bit.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from skillevo.stats.estimate import Estimate, TaskEstimate, pct

Run = tuple[float, bool]  # (metric, resolved)
Stratum = tuple[Sequence[Run], Sequence[Run]]  # (incumbent runs, candidate runs) of one task
RESAMPLES = 1999  # with alpha 0.04, (RESAMPLES + 1) * alpha is a whole number: the p-value has no rounding slack
_TINY = 1e-300


@dataclass(frozen=True)
class _Arm:
    """One arm's runs, every task's cell one after another: arrays (B, N) over B copies (1 for the data itself),
    with each cell's start and size, so every per-cell figure is one reduction over the columns."""

    cost: np.ndarray
    resolved: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray

    def sums(self, values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values, self.starts, axis=1)

    def spread(self, per_cell: np.ndarray) -> np.ndarray:
        return np.repeat(per_cell, self.sizes, axis=1)


@dataclass(frozen=True)
class _Cells:
    """Per (copy, task) figures of one arm: means, rates, cost variance (at least the pooled CV's), resolution
    variance and their covariance, each as (B, T)."""

    mean: np.ndarray
    rate: np.ndarray
    var_c: np.ndarray
    var_y: np.ndarray
    cov: np.ndarray
    sizes: np.ndarray


def per_resolved(strata: Sequence[Stratum], alpha: float) -> Estimate | None:
    """The test over `strata` (one per gate task); None when it is undefined: a task without runs in an arm, an
    arm without a task of two runs (no spread to estimate), a negative or non-finite value, an arm that resolved
    nothing, or a metric that is zero in every run of an arm."""
    estimates = per_resolved_at(strata, (alpha,))
    return None if estimates is None else estimates[0]


def per_resolved_at(strata: Sequence[Stratum], alphas: Sequence[float]) -> tuple[Estimate, ...] | None:
    """`per_resolved` at each of `alphas` from one resampling: the levels differ only in their intervals, and
    the resampling is most of the cost (a look asks for its estimate and its futility bound together)."""
    if not strata or any(not inc or not cand for inc, cand in strata):
        return None
    if any(all(len(s[a]) < 2 for s in strata) for a in (0, 1)):
        return None
    values = [v for inc, cand in strata for v, _ in (*inc, *cand)]
    if any(not math.isfinite(v) or v < 0 for v in values):
        return None
    arms = [_arm([s[a] for s in strata]) for a in (0, 1)]
    if any(float(arm.cost.sum()) <= 0 or float(arm.resolved.sum()) <= 0 for arm in arms):
        return None
    cells = [_cells(arm) for arm in arms]
    log_theta, se = (float(x[0]) for x in _overall(cells))
    task_theta, task_se = _per_task(cells)
    incumbent_level, candidate_level = (float(c.mean.sum() / c.rate.sum()) for c in cells)
    levels = (incumbent_level, candidate_level)
    defined = [bool(np.all(np.isfinite(task_theta[:, t]))) for t in range(len(strata))]
    if se <= 0:  # identical runs within every cell: the ratio is known exactly
        p, p_worse = (0.0, 1.0) if log_theta < 0 else (1.0, 0.0) if log_theta > 0 else (1.0, 1.0)
        exact = tuple((pct(float(x)), (pct(float(x)), pct(float(x)))) if ok else None
                      for x, ok in zip(task_theta[0], defined, strict=True))
        return tuple(Estimate("per_resolved", pct(log_theta), (pct(log_theta), pct(log_theta)), math.exp(log_theta),
                              p, p_worse, exact, "bootstrap-t", per_resolved=levels, resamples=0) for _ in alphas)
    boot = [_cells(_resample(arm, _rng(strata, a))) for a, arm in enumerate(arms)]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        star_theta, star_se = _overall(boot)
        t_star = _studentise(star_theta - log_theta, star_se)
        star_task, star_task_se = _per_task(boot)
    t = log_theta / se
    p = float((1 + np.count_nonzero(t_star <= t)) / (RESAMPLES + 1))
    p_worse = float((1 + np.count_nonzero(t_star >= t)) / (RESAMPLES + 1))
    ordered = np.sort(t_star)
    task_ordered: list[np.ndarray | None] = []
    for k, ok in enumerate(defined):
        if ok and float(task_se[0, k]) > 0:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                task_ordered.append(np.sort(_studentise(star_task[:, k] - float(task_theta[0, k]), star_task_se[:, k])))
        else:
            task_ordered.append(None)
    estimates = []
    for alpha in alphas:
        per_task: list[TaskEstimate] = []
        for k, ok in enumerate(defined):
            x, x_se, task_t = float(task_theta[0, k]), float(task_se[0, k]), task_ordered[k]
            if not ok:
                per_task.append(None)
            elif task_t is None:
                per_task.append((pct(x), (pct(x), pct(x))))
            else:
                per_task.append((pct(x), _interval(x, x_se, task_t, alpha)))
        estimates.append(Estimate("per_resolved", pct(log_theta), _interval(log_theta, se, ordered, alpha),
                                  math.exp(log_theta), p, p_worse, tuple(per_task), "bootstrap-t",
                                  per_resolved=levels, resamples=RESAMPLES))
    return tuple(estimates)


def _arm(cells: Sequence[Sequence[Run]]) -> _Arm:
    sizes = np.array([len(c) for c in cells])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    cost = np.array([[float(v) for c in cells for v, _ in c]])
    resolved = np.array([[1.0 if r else 0.0 for c in cells for _, r in c]])
    return _Arm(cost, resolved, starts, sizes)


def _cells(arm: _Arm) -> _Cells:
    """Each cell's figures; a cell's cost variance is at least the arm's pooled squared CV times its mean squared,
    so a cell whose runs missed the arm's tail is not read as precise."""
    n = arm.sizes
    mean, rate = arm.sums(arm.cost) / n, arm.sums(arm.resolved) / n
    dc, dy = arm.cost - arm.spread(mean), arm.resolved - arm.spread(rate)
    denominator = np.maximum(n - 1, 1)
    var_c, var_y, cov = (arm.sums(a * b) / denominator for a, b in ((dc, dc), (dy, dy), (dc, dy)))
    weights = np.where(n > 1, n - 1, 0)
    relative = np.where(mean > 0, var_c / np.where(mean > 0, mean * mean, 1.0), 0.0)
    cv2 = (relative * weights).sum(axis=1, keepdims=True) / max(int(weights.sum()), 1)
    var_c = np.maximum(np.where(n > 1, var_c, 0.0), cv2 * mean * mean)
    return _Cells(mean, rate, var_c, np.where(n > 1, var_y, 0.0), np.where(n > 1, cov, 0.0), n)


def _contribution(c: _Cells, m: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Each cell's variance contribution to log(M / P): a run's influence is cost / M - resolved / P."""
    influence = c.var_c / (m * m) + c.var_y / (p * p) - 2 * c.cov / (m * p)
    contribution: np.ndarray = np.maximum(influence, 0.0) / c.sizes
    return contribution


def _overall(cells: Sequence[_Cells]) -> tuple[np.ndarray, np.ndarray]:
    """log theta and its delta-method standard error, per copy."""
    logs: list[np.ndarray] = []
    variance: np.ndarray | float = 0.0
    for c in cells:
        m = np.maximum(c.mean.sum(axis=1, keepdims=True), _TINY)
        p = np.maximum(c.rate.sum(axis=1, keepdims=True), _TINY)
        logs.append(np.log(m[:, 0]) - np.log(p[:, 0]))
        variance = variance + _contribution(c, m, p).sum(axis=1)
    return logs[1] - logs[0], np.sqrt(variance)


def _per_task(cells: Sequence[_Cells]) -> tuple[np.ndarray, np.ndarray]:
    """Each task's own log ratio of metric per resolved run and its standard error, per copy (B, T); infinite or
    undefined where an arm resolved or spent nothing on the task."""
    logs: list[np.ndarray] = []
    variance: np.ndarray | float = 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        for c in cells:
            m, p = np.where(c.mean > 0, c.mean, np.nan), np.where(c.rate > 0, c.rate, np.nan)
            logs.append(np.log(m) - np.log(p))
            variance = variance + _contribution(c, m, p)
    return logs[1] - logs[0], np.sqrt(variance)


def _studentise(difference: np.ndarray, se: np.ndarray) -> np.ndarray:
    """(statistic* - statistic) / se* per resample; a resample with no spread is +-inf by its sign, and one that is
    undefined counts against the candidate (it can only raise the p-value)."""
    out = np.where(se > 0, difference / np.where(se > 0, se, 1.0), np.sign(difference) * np.inf)
    return np.where(np.isnan(out), -np.inf, out)


def _interval(log_theta: float, se: float, ordered: np.ndarray, alpha: float) -> tuple[float, float]:
    """The bootstrap-t interval at 1 - 2 alpha, as improvements (low, high), from the sorted resampled t values."""
    low_q, high_q = _quantile(ordered, alpha), _quantile(ordered, 1 - alpha)
    upper, lower = log_theta - low_q * se, log_theta - high_q * se
    return _bounded_pct(upper), _bounded_pct(lower)


def _quantile(ordered: np.ndarray, q: float) -> float:
    """The order statistic at (B + 1) q, the bootstrap-t convention (an infinite one stays infinite)."""
    k = min(len(ordered), max(1, math.floor((len(ordered) + 1) * q + 1e-9)))
    return float(ordered[k - 1])


def _bounded_pct(log_ratio: float) -> float:
    if log_ratio == math.inf:
        return -math.inf
    if log_ratio == -math.inf:
        return 100.0
    return pct(min(log_ratio, 700.0))


def _resample(arm: _Arm, rng: np.random.Generator) -> _Arm:
    """RESAMPLES copies of the arm: each cell's runs drawn from the arm's runs on every task, each run's cost
    relative to its own task's mean times this cell's mean, and its resolution shifted by the same rule."""
    cells = _cells(arm)
    mean, rate = cells.mean[0], cells.rate[0]
    relative = arm.cost[0] / np.repeat(np.where(mean > 0, mean, 1.0), arm.sizes)
    shifted = arm.resolved[0] - np.repeat(rate, arm.sizes)
    draws = _draws(rng, arm.cost.shape[1], (RESAMPLES, arm.cost.shape[1]))
    return _Arm(np.repeat(mean, arm.sizes)[None, :] * relative[draws],
                np.repeat(rate, arm.sizes)[None, :] + shifted[draws], arm.starts, arm.sizes)


def _rng(strata: Sequence[Stratum], arm: int) -> np.random.Generator:
    """A generator seeded by the design alone (each cell's run count), never by the values: the same runs always
    give the same answer, the answer does not change with the currency (the statistic is a ratio), and no choice
    of values can steer which resamples are drawn."""
    design = repr(("skillevo per_resolved", arm, [(len(inc), len(cand)) for inc, cand in strata])).encode()
    return np.random.Generator(np.random.PCG64(int.from_bytes(hashlib.sha256(design).digest()[:16], "big")))


def _draws(rng: np.random.Generator, n: int, shape: tuple[int, int]) -> np.ndarray:
    """Uniform indices below n from the generator's raw 64-bit stream (PCG64's raw output is fixed across NumPy
    versions, unlike its higher-level samplers): each half of a raw word, times n, shifted down 32 bits (the bias
    is below n / 2**32)."""
    count = shape[0] * shape[1]
    raw = rng.bit_generator.random_raw((count + 1) // 2)
    halves = np.concatenate([raw & np.uint64(0xFFFFFFFF), raw >> np.uint64(32)])[:count]
    return ((halves * np.uint64(n)) >> np.uint64(32)).view(np.int64).reshape(shape)
