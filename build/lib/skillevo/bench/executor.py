"""Executors run cells; the bench only sees this small interface, so a cluster can replace the pool.

    executor.run(cells, on_result, cancel)

`on_result(cell, result)` is called in the driver's thread-safe context once per cell that ran: finished, or
stopped by the cancellation while it ran (a `cancelled` row, excluded); a cell still queued at the
cancellation produces no call. Implementations must never lose a cell silently: a cell whose worker died
becomes an infra-error row.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Protocol

from skillevo.bench.cell import CellResult, CellSpec, describe, infra_error, run_cell
from skillevo.core.models import Credential

OnResult = Callable[[CellSpec, CellResult], None]


class Executor(Protocol):
    def run(self, cells: Sequence[CellSpec], on_result: OnResult, cancel: threading.Event) -> None: ...


def outcome(future: Future, cell: CellSpec) -> CellResult:
    """The cell's result; an exception that escaped run_cell (the harness's own fault: run_cell keeps whatever the
    agent can cause as a measured row) becomes this cell's infra-error row, never the side's crash."""
    try:
        return future.result()
    except Exception as e:  # noqa: BLE001 - one cell's failure, whatever its class, is that cell's row
        detail = describe(e)
        print(f"bench: cell {cell.name}: the harness failed running it: {detail}", file=sys.stderr)
        return infra_error(cell, f"the harness failed running this cell: {detail}")


class LocalExecutor:
    """`workers` cells at once on this machine (threads: each cell is a handful of subprocesses)."""

    def __init__(self, workers: int, credential: Credential | None = None) -> None:
        self.workers = workers  # params bench.workers, validated by skillevo.core.config
        self._credential = credential

    def run(self, cells: Sequence[CellSpec], on_result: OnResult, cancel: threading.Event) -> None:
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="cell")
        try:
            pending = {pool.submit(run_cell, c, credential=self._credential, cancel=cancel): c for c in cells}
            while pending:
                done, _ = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                for future in done:
                    cell = pending.pop(future)
                    on_result(cell, outcome(future, cell))
                if cancel.is_set():
                    started = {f: c for f, c in pending.items() if not f.cancel()}  # queued ones never start
                    wait(started)
                    for future, cell in started.items():
                        on_result(cell, outcome(future, cell))
                    return
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
