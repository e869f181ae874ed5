"""The sampling plan (params `sampling:`) and what it can detect, stated before any candidate money is spent.

The bench reads only `sampling.runs` and `sampling.replicate` (so editing a gate threshold never re-runs a
paid bench); the power preflight reads the incumbent side, the gate's alpha and margins, and says what
improvement the configured runs can find at the configured power.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from skillevo import stats
from skillevo.config import Policy, SamplingParams
from skillevo.results import is_excluded


@dataclass(frozen=True)
class Preflight:
    tasks: int
    runs: int
    log_sd: float
    spread_from: str  # "incumbent (N runs)" or "prior (sampling.prior_log_sd)"
    detectable_pct: float | None  # the improvement found with `power` at the cost test's level
    drop_runs_needed: int  # valid runs per arm before a perfect record bounds a resolution drop within the margin
    warnings: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"tasks": self.tasks, "runs": self.runs, "log_sd": round(self.log_sd, 6),
                "spread_from": self.spread_from,
                "detectable_improvement_pct": None if self.detectable_pct is None else round(self.detectable_pct, 2),
                "resolution_runs_needed": self.drop_runs_needed, "warnings": list(self.warnings)}


def spread(rows: Iterable[Mapping[str, Any]], metric: str) -> tuple[float, int] | None:
    """Pooled within-(task, arm) standard deviation of the log metric over valid, measured, positive runs, and
    the number of runs it rests on; None when no cell has two such runs."""
    cells: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        value = row[metric]
        if not is_excluded(row) and value is not None and value > 0:
            cells.setdefault((row["task"], row["arm"]), []).append(math.log(value))
    squares, df, used = 0.0, 0, 0
    for values in cells.values():
        if len(values) >= 2:
            mean = sum(values) / len(values)
            squares += sum((v - mean) ** 2 for v in values)
            df += len(values) - 1
            used += len(values)
    return (math.sqrt(squares / df), used) if df else None


def preflight(rows: Iterable[Mapping[str, Any]], gate_tasks: Iterable[str], sampling: SamplingParams,
              policy: Policy) -> Preflight:
    """What the configured runs can show on the gate's tasks, from the incumbent side's own spread."""
    gate_tasks = set(gate_tasks)
    observed = spread([row for row in rows if row["task"] in gate_tasks], policy.metric)
    if observed and observed[0] > 0:
        log_sd, source = observed[0], f"incumbent ({observed[1]} runs)"
    else:
        log_sd, source = sampling.prior_log_sd, "prior (sampling.prior_log_sd)"
    detectable = stats.detectable_improvement_pct(log_sd, len(gate_tasks), sampling.runs, policy.cost_alpha,
                                                  sampling.power)
    needed = stats.runs_to_bound_drop(policy.max_resolution_drop_pct, policy.alpha)
    warnings = []
    if detectable is None:
        warnings.append(f"sampling.runs {sampling.runs} leaves no degrees of freedom: the gate cannot estimate "
                        "the spread and will say insufficient_evidence")
    elif policy.min_improvement_pct < detectable:
        warnings.append(f"gate.min_improvement_pct {policy.min_improvement_pct:g}% is below the improvement "
                        f"{sampling.runs} runs can detect ({detectable:.1f}% at power {sampling.power:g}): a real "
                        "improvement between the two will usually be kept out; raise sampling.runs")
    if sampling.runs * len(gate_tasks) < needed:
        warnings.append(f"{sampling.runs} runs on {len(gate_tasks)} gate task(s) are {sampling.runs * len(gate_tasks)}"
                        f" runs per arm: a resolution drop of {policy.max_resolution_drop_pct:g} points cannot be ruled"
                        f" out with fewer than {needed}, so no candidate can be promoted; raise sampling.runs")
    return Preflight(len(gate_tasks), sampling.runs, log_sd, source, detectable, needed, tuple(warnings))
