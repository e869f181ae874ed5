"""What every cost test returns: the candidate's ratio to the incumbent as an improvement, with its interval and
one-sided p-values, overall and per task, in the form promotion.json binds."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TaskEstimate = tuple[float, tuple[float, float]] | None  # (improvement_pct, interval_pct); None: undefined there


@dataclass(frozen=True)
class Estimate:
    """The candidate's metric relative to the incumbent's, as an improvement in percent (positive: it spends less)."""

    estimand: str  # per_resolved (arithmetic means per resolved task) | geometric (mean log metric per run)
    improvement_pct: float  # 100 * (1 - ratio)
    interval_pct: tuple[float, float]  # two-sided, level 1 - 2 alpha: the one-sided bounds at alpha each side
    ratio: float
    p_value: float  # one-sided, null: the candidate is not cheaper (ratio >= 1)
    p_value_worse: float  # one-sided, null: the candidate is not dearer (ratio <= 1)
    per_task: tuple[TaskEstimate, ...]  # per stratum, in order
    method: str  # bootstrap-t | t
    df: int | None = None  # the t-test's degrees of freedom
    log_sd: float | None = None  # the t-test's pooled within-cell sd of the log metric
    per_resolved: tuple[float, float] | None = None  # (incumbent, candidate): metric per resolved task
    resamples: int | None = None  # the bootstrap's

    def to_dict(self, alpha: float) -> dict[str, Any]:
        return {
            "estimand": self.estimand,
            "method": self.method,
            "improvement_pct": round(self.improvement_pct, 2),
            "interval_pct": interval(self.interval_pct),
            "confidence": round(1 - 2 * alpha, 6),
            "ratio": significant(self.ratio, 6),
            "p_value": significant(self.p_value),
            "df": self.df,
            "log_sd": None if self.log_sd is None else round(self.log_sd, 6),
            "per_resolved": None if self.per_resolved is None else {
                "incumbent": significant(self.per_resolved[0], 6), "candidate": significant(self.per_resolved[1], 6)},
            "resamples": self.resamples,
        }


def improvement_text(estimate: Mapping[str, Any]) -> str:
    """An improvement as every line prints it: from promotion.json's rounded figure (to_dict), never the raw one,
    so a stage's line, the report and the status show the same digits."""
    return f"{estimate['improvement_pct']:.1f}%"


def p_text(estimate: Mapping[str, Any]) -> str:
    """`p=...` as a reader should take it: a bootstrap's smallest p-value, 1 / (resamples + 1), means that no
    resample was as extreme, so the p-value is at most that."""
    p, resamples = estimate["p_value"], estimate.get("resamples")
    floor = significant(1 / (resamples + 1)) if isinstance(resamples, int) and resamples > 0 else None
    return f"p<={p:.3g}" if p == floor else f"p={p:.3g}"


def interval(bounds: tuple[float, float]) -> list[float | None]:
    """An interval as promotion.json holds it: rounded to 0.01 points, an unbounded side (a bootstrap quantile
    from resamples without spread) as null, since JSON has no infinity."""
    return [round(v, 2) if math.isfinite(v) else None for v in bounds]


def bound_text(value: float | None) -> str:
    return "unbounded" if value is None else f"{value:.1f}%"


def significant(value: float, digits: int = 3) -> float:
    """`value` to `digits` significant figures: a p-value of 1.9e-11 stays 1.9e-11, never 0."""
    value = float(value)
    if value == 0 or not math.isfinite(value):
        return value
    return float(f"{value:.{digits}g}")


def pct(log_ratio: float) -> float:
    """A log ratio as an improvement in percent."""
    return 100 * (1 - math.exp(log_ratio))
