"""The bench: paired arms on pinned tasks, one sandboxed workspace per cell, hidden oracles.

A side is planned before anything is written (every input read and checked, the cells put in the order they
are measured), then run: each cell is served from the cell store or paid for on an executor (this machine, or
a Ray cluster) and stored the moment it ends, in looks when the candidate side is sequential. The cell store
keys every cell on everything that can change its outcome, the harness's own code and tools included. This
module is the public API: stages, operator tools and benchmarks import the bench from here; the store, the
workspaces and the harness identity are used as modules. The names load on first use (skillevo.bench.api), so
that `skillevo.bench.harness` alone, which the identity stage runs on every repro, does not load the whole bench.
"""

from __future__ import annotations

import importlib
from typing import Any

_SUBMODULES = ("cellstore", "harness", "workspace")

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


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'skillevo.bench' has no attribute {name!r}")
    if name in _SUBMODULES:  # `from skillevo.bench import harness` asks here first: that module alone
        return importlib.import_module(f"{__name__}.{name}")
    from skillevo.bench import api  # harness.closure follows this import: a stage using the bench digests all of it

    value = getattr(api, name)
    globals()[name] = value
    return value
