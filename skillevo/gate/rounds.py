"""The per_resolved test's input: a candidate arm's and its control's runs as rounds of blocks, in run order.

Run r of every gate task, in both arms, is round r (the bench runs the candidate side run by run, each (task, run)
block beside its control: skillevo.core.controls). A run number that an arm's aggregate holds no sample for was
lost to a harness fault (an excluded row): skillevo.stats.betting counts it at its worst for the candidate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from skillevo.gate.verdict import Pair
from skillevo.stats import betting


def blocks(pairs: Sequence[Pair], metric: str) -> list[list[tuple[betting.Run, betting.Run]]]:
    """Rounds 1..R of (control run, candidate run) per task, R the most runs any cell holds."""
    runs: list[tuple[dict[int, betting.Run], dict[int, betting.Run]]] = []
    total = 0
    for pair in pairs:
        arms = tuple({s["run"]: (s[metric], bool(s["resolved"])) for s in agg["samples"]}
                     for agg in (pair.incumbent, pair.candidate))
        runs.append(arms)  # type: ignore[arg-type]
        total = max(total, *(agg["runs"] for agg in (pair.incumbent, pair.candidate)))
    lost: betting.Run = (None, False)
    return [[(control.get(r, lost), candidate.get(r, lost)) for control, candidate in runs]
            for r in range(1, total + 1)]


def _runs(agg: Mapping[str, Any], metric: str) -> list[tuple[float, bool]]:
    return [(s[metric], s["resolved"]) for s in agg["samples"]]


def wealth(pairs: Sequence[Pair], metric: str, design: betting.Design | None, margin: float
           ) -> tuple[betting.Wealth, betting.Wealth, betting.Design] | None:
    """The test's wealth over the pairs' rounds under `design` (or the controls' own), the resolution guard's
    against a drop of `margin` (a fraction) or more, and the design; None when a task has an unmeasured valid run
    (the gate never reads it as free)."""
    if any(s[metric] is None for p in pairs for agg in (p.incumbent, p.candidate) for s in agg["samples"]):
        return None
    used = design or betting.own_design({p.task: (_runs(p.incumbent, metric), _runs(p.candidate, metric))
                                         for p in pairs})
    if list(used.tasks) != [p.task for p in pairs]:
        raise ValueError(f"the design covers tasks {list(used.tasks)}, the decision {[p.task for p in pairs]}")
    found = blocks(pairs, metric)
    return betting.wealth(found, used), betting.drop_wealth(found, margin, used), used


def describe(found: betting.Wealth, drop: betting.Wealth, design: betting.Design, alpha: float) -> dict[str, Any]:
    """What promotion.json says of the test: the e-value (the wealth at its peak) against 1 / alpha, the rounds
    it bet on, where it first crossed, the resolution guard's e-value, and the design it bet by."""
    return {"kind": "betting", "e_value": _significant(found.e_value()), "threshold": round(1 / alpha, 6),
            "rounds": len(found.log_wealth), "crossed_at_round": found.first_crossing(alpha),
            "drop_e_value": _significant(drop.e_value()), "design": design.to_dict()}


def _significant(value: float) -> float:
    return float(f"{value:.6g}")
