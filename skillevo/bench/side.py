"""Run one side of the bench (all incumbent arms, or the candidate arms an overlay requires), as planned.

Everything that can be refused is refused before the output directory exists: params, tasks, skills and the
overlay by the plan (skillevo.bench.sideplan), the sandbox and the CLI here. Rows are then appended to
results.jsonl as cells finish — artifacts first, then the row, fsynced — so an interrupted bench keeps every
finished cell and nothing half-written. At the end the rows are sorted, and bench.json and report.md are written.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from tqdm import tqdm

from skillevo import backends, sandbox
from skillevo.agent import cli
from skillevo.bench import canary, cellstore, harness, task_soundness
from skillevo.bench.cell import CellResult, CellSpec
from skillevo.bench.executor import Executor, LocalExecutor
from skillevo.bench.report import write_report
from skillevo.bench.reruns import Payer
from skillevo.bench.sideplan import SidePlan, build_cells
from skillevo.core import controls, layout, models, price, sampling
from skillevo.core.config import BenchParams, Params
from skillevo.core.models import Model
from skillevo.core.results import (
    EXCLUDED_ERROR_KINDS,
    SYSTEMIC_ERROR_KINDS,
    served_models,
)
from skillevo.files import digests, documents, safefs
from skillevo.files.digests import canonical_json, framed_digest, sha256_bytes, sha256_json
from skillevo.files.errors import BadInput, BrokenEnvironment, Interrupted
from skillevo.files.schemas import validate


class Outage(BrokenEnvironment):
    """The API or the harness is down: the side stops (or fails) instead of recording an outage as a result."""


class _Writer:
    """Appends finished cells to the side's staging directory and, the moment a paid cell ends, stores it in the
    cell store; safe to call from executor threads. It is also the outage breaker: `max_consecutive` systemic
    failures in a row cancel the rest of the side."""

    def __init__(self, out: Path, total: int, quiet: bool, cancel: threading.Event | None = None,
                 max_consecutive: int = 0, store: cellstore.Store | None = None,
                 keys: dict[str, tuple[str, dict[str, Any]]] | None = None, replace: set[str] | None = None) -> None:
        self.out, self.lock = out, threading.Lock()
        self.rows: list[dict[str, Any]] = []
        self.failures = self.served = self.stored = 0
        self.cancel, self.max_consecutive, self.consecutive = cancel, max_consecutive, 0
        self.store, self.keys, self.replace = store, keys or {}, replace or set()  # replace: cells of drifted arms
        self.outage: str | None = None
        self.bar = tqdm(total=total, unit="cell", desc="bench", file=sys.stderr, disable=quiet, dynamic_ncols=True)
        self.results = os.open(out / "results.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def __call__(self, cell: CellSpec, result: CellResult, *, served: bool = False) -> None:
        validate(result.row, "result-row", f"row of cell {cell.name}")
        if not served and self.store is not None and cell.name in self.keys:
            k, mat = self.keys[cell.name]
            # before anything else: a kill after this loses nothing
            self.stored += self.store.put(k, mat, result, replace=cell.name in self.replace)
        with self.lock:
            for rel, data in result.artifacts.items():
                (self.out / rel).parent.mkdir(parents=True, exist_ok=True)
                safefs.create_at(None, self.out / rel, data)
            os.write(self.results, canonical_json(result.row) + b"\n")
            os.fsync(self.results)
            self.rows.append(result.row)
            self.served += served
            self.failures += not result.row["resolved"]
            self.consecutive = self.consecutive + 1 if result.row["error_kind"] in SYSTEMIC_ERROR_KINDS else 0
            if self.max_consecutive and self.consecutive >= self.max_consecutive and self.outage is None:
                self.outage = (f"{self.consecutive} cells in a row failed for a systemic reason (last: "
                               f"{result.row['error_kind']}: {(result.row['error_detail'] or '')[-200:]})")
                if self.cancel is not None:
                    self.cancel.set()
            self.bar.set_postfix(unresolved=self.failures, served=self.served, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        self.bar.close()
        os.close(self.results)


@contextmanager
def _cancel_on_signals() -> Iterator[threading.Event]:
    cancel = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield cancel
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, lambda *_: cancel.set())
    try:
        yield cancel
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _check_headroom(scratch: Path, bench: BenchParams) -> None:
    """Every cell running at once may grow its workspace to its quota without filling the disk for another."""
    st = os.statvfs(scratch)
    need = bench.workers * (bench.limits.disk_mb << 20) + (256 << 20)
    if st.f_bavail * st.f_frsize < need:
        raise BrokenEnvironment(f"{scratch}: {st.f_bavail * st.f_frsize >> 20} MB free, but {bench.workers} cells at "
                                f"once may each grow by bench.limits.disk_mb {bench.limits.disk_mb} MB "
                                f"(need {need >> 20} MB); free space, lower bench.workers or disk_mb, or set TMPDIR "
                                "(rule: disk headroom)")


def _on_nodes(params: Params) -> bool:
    """A gateway backend with the Ray executor: each node runs its own proxy (skillevo.bench.ray_gateway)."""
    return params.bench.executor == "ray" and params.model.backend in models.GATEWAY_BACKENDS


@contextmanager
def _open_model(params: Params, simulator: Any) -> Iterator[tuple[Model, Executor]]:
    """Who answers the side's sessions, and the executor that sends cells there (bench.executor: local, cells on
    this machine; ray, cells as tasks on a Ray cluster, behind a gateway each to its own node's proxy)."""
    if _on_nodes(params):
        from skillevo.bench import ray_gateway  # noqa: PLC0415 - the optional `ray` extra
        from skillevo.bench.ray_executor import RayExecutor  # noqa: PLC0415

        with ray_gateway.open_for_nodes(params.model, simulator=simulator) as (mdl, plan):
            yield mdl, RayExecutor.from_params(params.bench, gateway=plan)
        return
    with backends.open_model(params.model, simulator=simulator) as (mdl, credential):
        if params.bench.executor == "ray":
            from skillevo.bench.ray_executor import RayExecutor  # noqa: PLC0415

            yield mdl, RayExecutor.from_params(params.bench, credential)
        else:
            yield mdl, LocalExecutor(params.bench.workers, credential)


PARTIAL = ".partial"  # marks a side directory that holds what an interrupted bench finished, never a result


def _staging(out: Path) -> Path:
    """A private directory beside `out` where this bench writes; only a whole side is renamed to `out`, so a
    bench killed (or orphaned by a killed `dvc`) never leaves a directory mixed from two runs. Staging
    directories of benches that are gone are removed first."""
    if out.exists() and (out.is_symlink() or not out.is_dir() or
                         (any(out.iterdir()) and not (out / PARTIAL).is_file())):
        raise BadInput(f"{out}: not an empty directory; remove it or choose another --out (a side is written once)")
    out.parent.mkdir(parents=True, exist_ok=True)
    for old in out.parent.glob(f".{out.name}.staging-*"):
        pid = old.name.rsplit("-", 1)[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            safefs.remove_tree(old)
    staging = out.parent / f".{out.name}.staging-{os.getpid()}"
    safefs.remove_tree(staging)
    staging.mkdir()
    return staging


def _publish(staging: Path, out: Path, partial: bool) -> None:
    """Rename the staging directory to `out`: a finished side, or (marked) what a failed one kept. `out` may be
    replaced only while it is empty or another bench's partial output."""
    if partial:
        safefs.create_at(None, staging / PARTIAL, b"an interrupted or failed bench: not a result\n")
    if out.exists() and not out.is_symlink() and out.is_dir():
        if (out / PARTIAL).is_file():
            safefs.remove_tree(out)
        elif not any(out.iterdir()):
            out.rmdir()
    try:
        os.rename(staging, out)
    except OSError:
        if not partial:
            raise BadInput(f"{out}: another bench wrote it meanwhile; refusing to mix two runs (rule: a side is "
                           "written once)") from None
        safefs.remove_tree(staging)  # the other bench's output stays; our rows are in the cell store
        return
    safefs.fsync_dir(out.parent)


def _check_tasks(p: SidePlan, params: Params, quiet: bool) -> task_soundness.Stability:
    """What `skillevo check` runs on each task (setup runs; verify and the oracle fail as given and pass with the
    solution, steadily over bench.check_runs runs), before the generation's first paid session: a task that measures
    nothing, or by chance, is refused, not paid for. Returns what the runs saw, for the report."""
    if not quiet:
        print(f"bench: checking {len(p.tasks)} task(s) before paying (skillevo check)", file=sys.stderr, flush=True)
    stability: task_soundness.Stability = {}
    problems = task_soundness.run_tasks(list(p.tasks), params, str(p.tasks_file), stability=stability)
    if problems:
        raise BadInput("; ".join(problems) + " (rule: check before paying)")
    return stability


def store_context(params: Params, p: SidePlan, noise: Any) -> cellstore.Context:
    """What every cell key of this side shares (skillevo.bench.cellstore)."""
    simulated = None
    if noise is not None:
        books = safefs.read_tree(p.tasks_file.parent / "playbooks", max_file_bytes=4 << 20, max_total_bytes=32 << 20,
                                 what="playbook")
        simulated = {**noise.provenance(), "playbooks": framed_digest(books.items()),
                     "code": harness.simulator_digest()}  # the simulator's code keys simulated cells only
    return cellstore.Context(harness.digest(), params.sampling.replicate, simulated)


def _serve(store: cellstore.Store | None, cells: list[CellSpec], ctx: cellstore.Context, max_age_days: float,
           quiet: bool) -> tuple[dict[str, tuple[str, dict[str, Any]]], list[tuple[CellSpec, CellResult]]]:
    """Each cell's key, and the cells the store can serve (a damaged or expired entry is paid again, and said)."""
    keys, served = {}, []
    for cell in cells:
        mat = cellstore.material(cell, ctx)
        keys[cell.name] = (sha256_json(mat), mat)
        if store is None:
            continue
        try:
            served.append((cell, store.serve(cell, ctx, max_age_days)))
        except cellstore.Miss as e:
            if str(e) != cellstore.NOT_STORED and not quiet:
                print(f"bench: not served: {e}", file=sys.stderr)
    return keys, served


def _whole_blocks(p: SidePlan, cells: list[CellSpec], served: list[tuple[CellSpec, CellResult]]
                  ) -> tuple[list[tuple[CellSpec, CellResult]], set[str]]:
    """On the candidate side a (task, run) block is served whole or paid whole: a control stored by an interrupted
    bench never stands beside a candidate run paid later (skillevo.core.controls checks each block's window).
    Returns what is served, and the stored cells of broken blocks, which the paid ones replace."""
    if p.side != "candidate":
        return served, set()
    have = {c.name for c, _ in served}
    broken = {(c.task.id, c.run) for c in cells if c.name not in have}
    kept = [(c, r) for c, r in served if (c.task.id, c.run) not in broken]
    return kept, {c.name for c, _ in served if (c.task.id, c.run) in broken}


def _looks(p: SidePlan, params: Params) -> tuple[int, ...]:
    """The runs per cell at each look: the candidate side runs in looks when params sampling.sequential says so
    (skillevo.core.sampling), every other side in one."""
    if p.side != "candidate" or not params.sampling.sequential.enabled or not p.arms:
        return (p.runs,)  # no arms: a no_proposal generation's candidate side, one look at nothing
    return sampling.looks(params.sampling)


def _run_looks(p: SidePlan, params: Params, cells: list[CellSpec], looks: tuple[int, ...], payer: Payer,
               writer: _Writer, cancel: threading.Event, quiet: bool) -> tuple[int, dict[str, Any] | None]:
    """Serve or pay for the cells look by look (candidate cells and their controls together); after each look but
    the last, sampling.interim compares the candidate arms with their contemporaneous controls and says whether
    the side stops. Returns how many cells were scheduled, and the sequential record (None for one look)."""
    scheduled, previous = 0, 0
    pairs = {arm.name: arm.incumbent for arm in p.arms}
    controls_ = {arm.name for arm in p.controls}
    for look, runs in enumerate(looks, start=1):
        scheduled += payer.pay([c for c in cells if previous < c.run <= runs])
        previous = runs
        if len(looks) == 1 or cancel.is_set() or writer.outage:
            return scheduled, None
        rows = controls.settle(writer.rows)
        step = sampling.interim([r for r in rows if r["arm"] in controls_], [r for r in rows if r["arm"] in pairs],
                                pairs, look, params.sampling, p.designs)
        if not quiet:
            tqdm.write(f"bench: look {look} of {len(looks)} ({runs} runs per cell): {step.action}; "
                       + "; ".join(step.reasons), file=sys.stderr)
        if step.action != sampling.CONTINUE or look == len(looks):
            return scheduled, sampling.record(params.sampling, look, step.action)
    raise AssertionError("unreachable: the last look always stops")


def run_side(p: SidePlan, params: Params, out: Path, *, executor: Executor | None = None, quiet: bool = False,
             scratch_root: Path | None = None, store: Path | None = None) -> list[dict[str, Any]]:
    """Run the side into `out`. With a cell `store`, cells stored there are served instead of paid for, and every
    paid cell that measured something is stored as it ends. A sequential candidate side (params
    sampling.sequential) runs in looks, stopping when sampling.interim says so."""
    looks = _looks(p, params)
    sandbox.preflight()
    cli.locate()
    cells_store = cellstore.Store(store, digests.team_key()) if store is not None else None
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="skillevo-bench-", dir=scratch_root)))
        _check_headroom(scratch, params.bench)
        simulator, noise = None, None
        if params.model.simulated:  # a backend like the others: imported only when params choose it
            from skillevo.simulator.for_side import for_side

            simulator, noise = for_side(p.tasks, frozenset(layout.skill_names_in(p.family)),
                                        p.tasks_file.parent / "playbooks", params)
        mdl, own = stack.enter_context(_open_model(params, simulator))
        runner = executor or own
        cells = build_cells(p, params.bench, mdl, scratch)
        if not quiet:  # once the machine, the CLI and the backend are known good: a refusal stays one line
            sessions = sum(len(cell.arm.sessions) for cell in cells)
            print(f"bench {p.side}: {price.side_line(sessions, params, layout.BENCH['incumbent'] / 'results.jsonl')}",
                  file=sys.stderr, flush=True)
        ctx = store_context(params, p, noise)
        keys, served = _serve(cells_store, cells, ctx, params.gate.max_age_days, quiet)
        served, broken = _whole_blocks(p, cells, served)
        checked = None
        if p.side == "incumbent" and len(served) < len(cells):
            checked = _check_tasks(p, params, quiet)
        staging = _staging(out)
        stack.callback(safefs.remove_tree, staging)  # renamed away on every path that keeps it
        with _cancel_on_signals() as cancel:
            canaries: list[canary.Canary] = []
            if params.bench.canary and p.side == "incumbent" and served:
                canaries = canary.check({c.name: (c, r) for c, r in served}, runner, cancel,
                                        params.gate.metric, params.bench.canary_tolerance)
                drifted = {k.cell.arm.name for k in canaries if k.drift}
                for k in canaries:
                    if k.drift and not quiet:
                        print(f"bench: canary {k.cell.name} drifted: {k.drift}; every cell of arm {k.cell.arm.name} "
                              "is paid again", file=sys.stderr)
                served = [(c, r) for c, r in served if c.arm.name not in drifted]
            writer = _Writer(staging, len(cells), quiet, cancel, params.bench.max_consecutive_failures, cells_store,
                             keys, replace=broken | {c.name for c in cells if any(k.drift and k.cell.arm == c.arm
                                                                                  for k in canaries)})
            def serve(again: list[CellSpec]) -> dict[str, CellResult]:
                more, found = _serve(cells_store, again, ctx, params.gate.max_age_days, quiet)
                found, gone = _whole_blocks(p, again, found)
                writer.keys.update(more)
                writer.replace |= gone
                return {c.name: r for c, r in found}

            payer = Payer(p, params, cells, {c.name: r for c, r in served}, writer, runner, cancel, serve,
                          quiet)
            try:
                scheduled, sequential = _run_looks(p, params, cells, looks, payer, writer, cancel, quiet)
            finally:
                writer.close()
            kept = (f"{len(writer.rows)} of {len(cells)} cells finished ({writer.served} served from the cell store, "
                    f"{writer.stored} newly stored{'' if cells_store else '; no cell store'}); what they measured is "
                    f"in {out / 'results.jsonl'}")
            if writer.outage:
                _publish(staging, out, partial=True)
                raise Outage(f"{writer.outage}: the side stops (params bench.max_consecutive_failures); {kept}; "
                             "run it again when the endpoint answers")
            if cancel.is_set():
                _publish(staging, out, partial=True)
                raise Interrupted(kept)
        counted = controls.settle(writer.rows) if p.side == "candidate" else writer.rows  # re-run blocks replace
        excluded = sum(r["error_kind"] in EXCLUDED_ERROR_KINDS for r in counted)
        if counted and 100 * excluded / len(counted) > params.bench.max_excluded_pct:
            _publish(staging, out, partial=True)
            raise Outage(f"{excluded} of {len(counted)} rows were excluded as harness or API faults, over params "
                         f"bench.max_excluded_pct {params.bench.max_excluded_pct:g}%: the side fails, so that DVC "
                         f"never caches an outage as a result; rows kept in {out / 'results.jsonl'}")
        rows = sorted(writer.rows, key=lambda r: (r["task"], r["arm"], r["run"]))
        results = b"".join(canonical_json(r) + b"\n" for r in rows)
        safefs.write_atomic(staging / "results.jsonl", results)
        provenance: dict[str, Any] = {
            "schema_version": 1, "side": p.side, "model": models.binding(params.model), "effort": mdl.effort,
            "runs": p.runs, "arms": [a.describe() for a in (*p.controls, *p.arms)],
            "controls": "interleaved" if p.side == "candidate" else None, "task_bindings": [t.binding for t in p.tasks],
            "skipped_tasks": p.skipped, "task_split": p.split.to_dict(), "overlay_digest": p.overlay_digest,
            "skills_digest": p.skills_digest, "served_models": served_models(rows),
            "limits": params.bench.limits.enforced(), "cells": scheduled, "rows": len(rows), "sequential": sequential,
            "simulator": noise.provenance() if noise else None, "replicate": params.sampling.replicate,
            "results_sha256": sha256_bytes(results), "mac": None, "fault_reruns": payer.record(),
            "design": None if p.designs is None else {arm: d.to_dict() for arm, d in sorted(p.designs.items())},
            "cell_store": None if cells_store is None else {
                "served": writer.served, "paid": len(rows) - writer.served, "stored": writer.stored,
                "canaries": [k.to_dict(params.gate.metric) for k in canaries]},
        }
        provenance["mac"] = controls.sign(provenance["results_sha256"], provenance)  # with a team key only
        validate(provenance, "bench-run", out / "bench.json")
        safefs.write_atomic(staging / "bench.json", documents.dump_json(provenance))
        write_report(staging / "report.md", provenance, rows, {**p.family, **(p.overlay or {})}, checked)
        _publish(staging, out, partial=False)
    return rows
