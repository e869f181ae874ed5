"""A seeded paired bootstrap of the median improvement, to show how far three runs a side can be trusted.

Reported beside the point estimate only; the decision never reads it.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from skillevo.gate.policy import improvement_pct


def median_improvement_interval(
    samples: Mapping[tuple[str, str], Sequence[float | None]],
    decision: Mapping[str, Any],
    *,
    seed: int,
    resamples: int,
) -> tuple[float, float] | None:
    """90% percentile interval of the median per-task improvement over the decision's gated tasks.

    Each resample redraws the valid runs of every gated task within each arm (with replacement, same count),
    recomputes both medians and the per-task improvement exactly as the policy does, then the median over
    tasks. None when no gated task has a measured improvement to resample.
    """
    tasks = [
        (samples[(row["task"], decision["incumbent_arm"])], samples[(row["task"], decision["candidate_arm"])])
        for row in decision["tasks"]
        if row["gated"] and row["improvement_pct"] is not None
    ]
    if not tasks:
        return None
    rng = random.Random(seed)
    medians = []
    for _ in range(resamples):
        improvements = [
            improvement
            for incumbent, candidate in tasks
            if (improvement := improvement_pct(_resampled_median(rng, incumbent), _resampled_median(rng, candidate)))
            is not None
        ]
        if improvements:
            medians.append(statistics.median(improvements))
    if len(medians) < 2:
        return None
    cuts = statistics.quantiles(medians, n=20, method="inclusive")
    return round(cuts[0], 1), round(cuts[-1], 1)


def _resampled_median(rng: random.Random, values: Sequence[float | None]) -> float:
    return statistics.median(rng.choices(values, k=len(values)))
