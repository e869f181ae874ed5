"""Resolution of the two arms: a pooled drop with an exact-limit upper bound, and Cochran-Mantel-Haenszel tests
over tasks in each direction. Exact (Clopper-Pearson) limits never understate the uncertainty of a rate near
0 or 1, which is where skill benches live."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from skillevo.stats.estimate import significant

Counts = tuple[int, int]  # (resolved, valid runs)


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
            "drop_pct": round(self.drop_pct, 2),
            "drop_upper_pct": round(self.drop_upper_pct, 2),
            "decrease_p_value": None if self.decrease_p_value is None else significant(self.decrease_p_value),
            "increase_p_value": None if self.increase_p_value is None else significant(self.increase_p_value),
        }


def quality(strata: Sequence[tuple[Counts, Counts]], alpha: float) -> Quality:
    """Pooled drop with a MOVER upper bound built from exact one-sided limits (conservative: with every run of
    both arms resolved, the bound is 1 - alpha ** (1 / n), so n runs per arm can rule out a drop of that much
    and no less), and a continuity-corrected Cochran-Mantel-Haenszel statistic for each direction."""
    from scipy import stats as sps
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
    decrease: float | None = None
    increase: float | None = None
    if variance > 0:
        sd = math.sqrt(variance)
        decrease = float(sps.norm.cdf((excess + 0.5) / sd))
        increase = float(sps.norm.sf((excess - 0.5) / sd))
    return Quality((r_inc, n_inc), (r_cand, n_cand), 100 * drop, 100 * min(upper, 1.0), decrease, increase)


def runs_to_bound_drop(margin_pct: float, alpha: float) -> int:
    """Runs per arm (all tasks together) before even a perfect record bounds the resolution drop below the
    margin: the smallest n with 1 - alpha ** (1 / n) <= margin."""
    margin = margin_pct / 100
    if margin >= 1:
        return 1
    return max(1, math.ceil(math.log(alpha) / math.log(1 - margin) - 1e-9))


