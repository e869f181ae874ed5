"""Serving or paying for a batch of a side's cells, and measuring again the blocks a fault spoiled before the model
answered (docs/gate.md, faults): the one place a candidate side's re-runs are scheduled and counted."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol

from tqdm import tqdm

from skillevo.bench.cell import CellResult, CellSpec
from skillevo.bench.executor import Executor
from skillevo.bench.sideplan import SidePlan, rerun_cells
from skillevo.core import controls
from skillevo.core.config import Params


class Writer(Protocol):
    """What the payer needs of the side's writer (skillevo.bench.side): the rows so far, its progress bar, whether
    an outage stopped the side, and the call that records a cell."""

    rows: list[dict[str, Any]]
    bar: Any
    outage: str | None

    def __call__(self, cell: CellSpec, result: CellResult, *, served: bool = False) -> None: ...


class Payer:
    """Serves or pays for a batch of cells, and measures again, inside the same look, each block a fault spoiled
    before the model answered (skillevo.core.controls.spoiled), up to params bench.fault_reruns_pct of the blocks
    scheduled so far: the replaced block leaves the statistics (controls.settle), so the design stays balanced."""

    def __init__(self, p: SidePlan, params: Params, cells: list[CellSpec], served: dict[str, CellResult],
                 writer: Writer, runner: Executor, cancel: threading.Event,
                 serve: Callable[[list[CellSpec]], dict[str, CellResult]], quiet: bool = False) -> None:
        self.p, self.pct, self.cells, self.served = p, params.bench.fault_reruns_pct, list(cells), served
        self.writer, self.runner, self.cancel, self.serve = writer, runner, cancel, serve
        self.blocks = self.reruns = 0
        self.quiet = quiet

    def pay(self, batch: list[CellSpec]) -> int:
        """Returns how many cells were scheduled: the batch and its re-runs."""
        self._measure(batch)
        scheduled = len(batch)
        if self.p.side != "candidate":
            return scheduled
        look = {(c.task.id, c.run) for c in batch}  # only this look's blocks: a look's rounds never change later
        self.blocks += len(look)
        while not (self.cancel.is_set() or self.writer.outage):
            room = controls.rerun_budget(self.pct, self.blocks) - self.reruns
            todo = [b for b in controls.spoiled(self.writer.rows) if b in look][:max(room, 0)]
            if not todo:
                break
            again = rerun_cells(self.p, self.cells, todo)
            look |= {(c.task.id, c.run) for c in again}
            self.cells += again
            self.reruns += len(todo)
            self.served.update(self.serve(again))
            self.writer.bar.total += len(again)
            self.writer.bar.refresh()
            if not self.quiet:
                tqdm.write(f"bench: {len(todo)} block(s) lost to a fault before the model answered, measured again "
                           f"({self.reruns} of the budget's {controls.rerun_budget(self.pct, self.blocks)}): "
                           + ", ".join(f"{t}/run{r}" for t, r in todo), file=sys.stderr)
            self._measure(again)
            scheduled += len(again)
        return scheduled

    def _measure(self, batch: list[CellSpec]) -> None:
        for cell in batch:
            if cell.name in self.served:
                self.writer(cell, self.served[cell.name], served=True)
        self.runner.run([c for c in batch if c.name not in self.served], self.writer, self.cancel)

    def record(self) -> dict[str, Any] | None:
        return {"pct": self.pct, "blocks": self.reruns} if self.p.side == "candidate" else None
