"""What a sampling plan can detect, stated before any candidate money is spent (the preflight)."""

from __future__ import annotations

import math

from skillevo.stats.estimate import pct


def detectable_improvement_pct(log_sd: float, tasks: int, runs: int, alpha: float, power: float) -> float | None:
    """The smallest true improvement the log-ratio test finds with the given power at `runs` per arm and task
    (normal approximation with t quantiles); None when the design leaves no degrees of freedom."""
    from scipy import stats as sps
    df = 2 * tasks * (runs - 1)
    if tasks < 1 or df < 1:
        return None
    se = log_sd * math.sqrt(2 / runs) / math.sqrt(tasks)
    shift = (float(sps.t.ppf(1 - alpha, df)) + float(sps.t.ppf(power, df))) * se
    return pct(-shift)


def per_resolved_variance(cells: list[tuple[float, float, float]]) -> float | None:
    """One run's variance contribution to log(metric per resolved task) over the task set, for one arm: from each
    task's (mean metric, resolution rate, coefficient of variation), as the per_resolved test's delta method
    computes it (the covariance of cost and resolution left out). None when the arm spends or resolves nothing."""
    total, resolved = sum(m for m, _, _ in cells), sum(p for _, p, _ in cells)
    if total <= 0 or resolved <= 0:
        return None
    return sum((m * cv / total) ** 2 + p * (1 - p) / resolved ** 2 for m, p, cv in cells)


def detectable_per_resolved_pct(variance: float, runs: int, alpha: float, power: float) -> float | None:
    """The smallest saving per resolved task the per_resolved test finds with `power` at `runs` per (task, arm),
    two arms alike (normal approximation)."""
    from scipy import stats as sps
    if runs < 2:
        return None
    shift = (sps.norm.isf(alpha) + sps.norm.ppf(power)) * math.sqrt(2 * variance / runs)
    return pct(-shift)


def runs_for_saving(variance: float, saving_pct: float, alpha: float, power: float) -> int | None:
    """Runs per (task, arm) at which a true saving of `saving_pct` per resolved task is found with `power`."""
    from scipy import stats as sps
    if not 0 < saving_pct < 100:
        return None
    effect = -math.log(1 - saving_pct / 100)
    z = float(sps.norm.isf(alpha) + sps.norm.ppf(power))
    return max(2, math.ceil(2 * variance * (z / effect) ** 2))
