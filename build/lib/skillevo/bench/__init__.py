"""The bench: paired arms on pinned tasks, one sandboxed workspace per cell, hidden oracles.

A side is planned before anything is written (every input read and checked, the cells put in the order they
are measured), then run: each cell is served from the cell store or paid for on an executor (this machine, or
a Ray cluster) and stored the moment it ends, in looks when the candidate side is sequential. The cell store
keys every cell on everything that can change its outcome, the harness's own code and tools included. This
module is the public API: stages, operator tools and benchmarks import the bench from here; the store, the
workspaces and the harness identity are used as modules.
"""

from skillevo.bench import cellstore, harness, workspace
from skillevo.bench.canary import drift
from skillevo.bench.cell import CellResult, CellSpec, run_cell
from skillevo.bench.checks import verify
from skillevo.bench.executor import LocalExecutor
from skillevo.bench.ray_executor import RayExecutor, RayExecutorError
from skillevo.bench.side import run_side, store_context
from skillevo.bench.sideplan import SidePlan, build_cells, interleaved, plan

__all__ = [
    "CellResult",
    "CellSpec",
    "LocalExecutor",
    "RayExecutor",
    "RayExecutorError",
    "SidePlan",
    "build_cells",
    "cellstore",
    "drift",
    "harness",
    "interleaved",
    "plan",
    "run_cell",
    "run_side",
    "store_context",
    "verify",
    "workspace",
]
