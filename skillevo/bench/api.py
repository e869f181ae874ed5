"""The bench's public API (skillevo.bench re-exports it on first use)."""
# ruff: noqa: F401 - these imports are the API: skillevo.bench.__getattr__ hands them out

from skillevo.bench import cellstore, harness, workspace
from skillevo.bench.canary import drift
from skillevo.bench.cell import CellResult, CellSpec, run_cell
from skillevo.bench.executor import LocalExecutor
from skillevo.bench.ray_executor import RayExecutor, RayExecutorError
from skillevo.bench.scoring import verify
from skillevo.bench.side import run_side, store_context
from skillevo.bench.sideplan import SidePlan, build_cells, interleaved, plan
