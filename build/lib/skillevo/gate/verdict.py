"""What both promotion rules share: the decisions, a task's paired aggregates, and the verdict a rule returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PROMOTE = "promote"
KEEP_INCUMBENT = "keep_incumbent"
INSUFFICIENT_EVIDENCE = "insufficient_evidence"


@dataclass(frozen=True)
class Pair:
    """One task's incumbent and candidate aggregates (skillevo.core.results.aggregate), each with its samples."""

    task: str
    incumbent: Mapping[str, Any]
    candidate: Mapping[str, Any]


@dataclass(frozen=True)
class Verdict:
    decision: str
    reasons: list[str]
    summary: dict[str, Any] | None = None  # rule-specific figures (the seed's median and margin)
    rows: dict[str, dict[str, Any]] | None = None  # rule-specific fields per task


def improvement_pct(incumbent: float | None, candidate: float | None) -> float | None:
    """Positive = the candidate spends less. None when unmeasured, or when a zero incumbent gives no scale."""
    if incumbent is None or candidate is None or incumbent == 0:
        return None
    return round(100 * (incumbent - candidate) / incumbent, 1)
