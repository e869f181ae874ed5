"""What a sampling plan can detect, stated before any candidate money is spent (the preflight)."""

from __future__ import annotations

import math

from scipy import stats as sps

from skillevo.stats.estimate import pct


def detectable_improvement_pct(log_sd: float, tasks: int, runs: int, alpha: float, power: float) -> float | None:
    """The smallest true improvement the log-ratio test finds with the given power at `runs` per arm and task
    (normal approximation with t quantiles); None when the design leaves no degrees of freedom."""
    df = 2 * tasks * (runs - 1)
    if tasks < 1 or df < 1:
        return None
    se = log_sd * math.sqrt(2 / runs) / math.sqrt(tasks)
    shift = (float(sps.t.ppf(1 - alpha, df)) + float(sps.t.ppf(power, df))) * se
    return pct(-shift)

