"""A paid canary cell per reused arm (params bench.canary): the one check the cell store cannot make itself.

A stored cell's key covers everything skillevo controls, but not the model behind a fixed id: a provider can
change what a snapshot or an alias serves, a gateway can route elsewhere. So, with the option on, each arm that
the store would serve pays for one of its stored cells again (its first by task and run), and the stored runs
of that cell's task must explain what the fresh run did. An arm whose canary they cannot explain has drifted:
none of its stored cells are served, they are all paid again, and the new measurements replace the stored ones.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skillevo.bench.cell import CellResult, CellSpec
from skillevo.core.results import is_excluded


@dataclass(frozen=True)
class Canary:
    cell: CellSpec
    row: Mapping[str, Any]  # the fresh run's row
    drift: str | None  # why the stored runs cannot explain it; None: no drift

    def to_dict(self, metric: str) -> dict[str, Any]:
        return {"task": self.cell.task.id, "arm": self.cell.arm.name, "run": self.cell.run,
                "resolved": self.row["resolved"], "error_kind": self.row["error_kind"], "metric": metric,
                "value": self.row.get(metric),
                "sessions": len(self.row.get("session_ids") or []), "cost_usd": self.row.get("cost_usd"),
                "recorded_at": self.row.get("recorded_at"), "drift": self.drift}


def drift(fresh: Mapping[str, Any], stored: Sequence[Mapping[str, Any]], metric: str, tolerance: float) -> str | None:
    """Why the stored valid runs of a (task, arm) cannot explain a fresh run of it, or None.

    Drift: the fresh run is a harness or API fault (it measured nothing, so nothing vouches for the store); it
    resolved where every stored run failed, or failed where every stored run resolved; or its metric lies
    outside the stored runs' range widened by the factor `tolerance` either way. A single run can differ from
    any one stored run by chance; it should not fall outside all of them by more than the noise allows."""
    if is_excluded(fresh):
        return f"the canary measured nothing ({fresh['error_kind']}), so nothing vouches for the stored cells"
    valid = [row for row in stored if not is_excluded(row)]
    outcomes = {bool(row["resolved"]) for row in valid}
    if outcomes == {not fresh["resolved"]}:
        was, now = ("resolved", "failed") if fresh["resolved"] is False else ("failed", "resolved")
        return f"every stored run {was} ({len(valid)}), the canary {now}"
    values = [row[metric] for row in valid if row.get(metric) is not None]
    value = fresh.get(metric)
    if values and value is not None and not min(values) / tolerance <= value <= max(values) * tolerance:
        return (f"{metric} {value:g} is outside the stored runs' {min(values):g} to {max(values):g} widened by "
                f"bench.canary_tolerance {tolerance:g}")
    return None


def choose(served: Mapping[str, tuple[CellSpec, CellResult]]) -> list[CellSpec]:
    """One served cell per arm: its first by task and run."""
    first: dict[str, CellSpec] = {}
    for cell, _ in sorted(served.values(), key=lambda cr: (cr[0].arm.name, cr[0].task.id, cr[0].run)):
        first.setdefault(cell.arm.name, cell)
    return list(first.values())


def check(served: Mapping[str, tuple[CellSpec, CellResult]], runner: Any, cancel: threading.Event, metric: str,
          tolerance: float) -> list[Canary]:
    """Pay for each arm's canary (nothing is stored or written) and judge it against the served rows."""
    chosen = choose(served)
    fresh: dict[str, Mapping[str, Any]] = {}
    lock = threading.Lock()

    def collect(cell: CellSpec, result: CellResult, *, served: bool = False) -> None:
        with lock:
            fresh[cell.name] = result.row

    runner.run(chosen, collect, cancel)
    canaries = []
    for cell in chosen:
        if cell.name not in fresh:  # cancelled before it ran
            continue
        stored = [result.row for c, result in served.values() if c.arm.name == cell.arm.name
                  and c.task.id == cell.task.id]
        canaries.append(Canary(cell, fresh[cell.name], drift(fresh[cell.name], stored, metric, tolerance)))
    return canaries
