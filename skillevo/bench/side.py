"""Run one side of the bench (all incumbent arms, or the candidate arms an overlay requires).

Rows are appended to results.jsonl as cells finish — artifacts first, then the row, fsynced — so an
interrupted bench keeps every finished cell and nothing half-written. At the end the rows are sorted,
and bench.json and report.md are written.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from tqdm import tqdm

from skillevo import arms as arms_mod
from skillevo import sandbox, tasks as tasks_mod, workspace
from skillevo.agent import cli
from skillevo.bench.cell import CellResult, CellSpec
from skillevo.bench.executor import Executor, LocalExecutor
from skillevo.bench.report import write_report
from skillevo.digests import canonical_json, framed_digest
from skillevo.params import Model, ParamsError, model, model_binding, section
from skillevo.schemas import validate
from skillevo.simulator import Simulator, load_dir

SIDES = ("incumbent", "candidate")


class BenchInterrupted(RuntimeError):
    pass


def tree_files(root: Path) -> list[tuple[str, bytes]]:
    return [(p.relative_to(root).as_posix(), p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()]


def tree_digest(root: Path) -> str:
    return framed_digest(tree_files(root))


@dataclass
class SidePlan:
    side: str
    tasks: list[tasks_mod.Task]
    skipped: list[dict[str, str]]
    arms: list[arms_mod.Arm]
    runs: int
    skills_digest: str
    overlay_digest: str | None


def plan(side: str, tasks_file: Path, skills_dir: Path, overlay_dir: Path | None, params: dict[str, Any],
         include_expensive: bool | None = None) -> SidePlan:
    if side not in SIDES:
        raise ParamsError(f"--side must be one of {', '.join(SIDES)}")
    bench = section(params, "bench")
    skills = {p.name for p in skills_dir.iterdir() if (p / "SKILL.md").is_file()}
    incumbents = arms_mod.parse(params.get("arms"), skills)
    expensive = bench.get("include_expensive", False) if include_expensive is None else include_expensive
    chosen, skipped = tasks_mod.select(tasks_mod.load(tasks_file), bool(expensive))
    overlay_digest = None
    if side == "incumbent":
        if overlay_dir is not None:
            raise ParamsError("the incumbent side takes no overlay")
        arm_list = [incumbents[n] for n in sorted(incumbents)]
    else:
        if overlay_dir is None or not overlay_dir.is_dir():
            raise ParamsError("the candidate side needs --overlay, a frozen overlay directory (<skill>/...md)")
        touched = {p.name for p in overlay_dir.iterdir() if p.is_dir()}
        arm_list = arms_mod.required_candidate_arms(touched, incumbents)
        if not arm_list:
            raise ParamsError(f"the overlay touches {sorted(touched)}, which no arm uses")
        overlay_digest = tree_digest(overlay_dir)
    runs = int(bench.get("runs", 3))
    if runs < 1:
        raise ParamsError("params.yaml: bench.runs: must be at least 1")
    return SidePlan(side, chosen, skipped, arm_list, runs, tree_digest(skills_dir), overlay_digest)


class _Writer:
    """Appends finished cells to the side directory; safe to call from executor threads."""

    def __init__(self, out: Path, total: int, quiet: bool) -> None:
        self.out, self.lock = out, threading.Lock()
        self.rows: list[dict[str, Any]] = []
        self.failures = 0
        self.bar = tqdm(total=total, unit="cell", desc="bench", file=sys.stderr, disable=quiet, dynamic_ncols=True)
        self.results = os.open(out / "results.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def __call__(self, cell: CellSpec, result: CellResult) -> None:
        validate(result.row, "result-row.schema.json", f"row of cell {cell.name}")
        with self.lock:
            for rel, data in result.artifacts.items():
                path = self.out / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    os.fsync(f.fileno())
            os.write(self.results, canonical_json(result.row) + b"\n")
            os.fsync(self.results)
            self.rows.append(result.row)
            self.failures += not result.row["resolved"]
            self.bar.set_postfix(unresolved=self.failures, refresh=False)
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


def build_cells(p: SidePlan, skills_dir: Path, overlay_dir: Path | None, bench: dict[str, Any], mdl: Model,
                scratch: Path) -> list[CellSpec]:
    """Every (task, arm, run) of the side; templates are built once per task and variant."""
    cells = []
    for task in p.tasks:
        tree = scratch / "trees" / task.id
        workspace.export_tree(task, tree)
        templates: dict[bool, tuple[Path, str]] = {}
        for arm in p.arms:
            cand = arm.is_candidate
            if cand not in templates:
                dest = scratch / "templates" / f"{task.id}-{'candidate' if cand else 'incumbent'}"
                templates[cand] = (dest, workspace.build_template(tree, skills_dir, overlay_dir if cand else None, dest))
            template, base = templates[cand]
            cells += [CellSpec(task=task, arm=arm, run=run, side=p.side, template=template, base_commit=base,
                               skills_digest=p.skills_digest, overlay_digest=p.overlay_digest if cand else None,
                               model=mdl, scratch=scratch,
                               churn_exclude=tuple(bench.get("churn_exclude", ["docs/plan.md"])),
                               phase_timeout_s=float(bench.get("phase_timeout_s", 600)),
                               max_retries=int(bench.get("max_retries", 2)))
                      for run in range(1, p.runs + 1)]
    return cells


def _executor(params: dict[str, Any], bench: dict[str, Any], api_key: str | None) -> Executor:
    """bench.executor: local (cells on this machine) or ray (cells as tasks on a Ray cluster)."""
    kind = bench.get("executor", "local")
    if kind == "ray":
        from skillevo.bench.ray_executor import RayExecutor  # noqa: PLC0415 - the optional `ray` extra

        return RayExecutor.from_params(params, api_key)
    if kind != "local":
        raise ParamsError(f"params.yaml: bench.executor: {kind!r} is not one of local, ray")
    return LocalExecutor(int(bench.get("workers", 2)), api_key)


def run_side(p: SidePlan, tasks_file: Path, skills_dir: Path, overlay_dir: Path | None, params: dict[str, Any],
             out: Path, *, executor: Executor | None = None, quiet: bool = False,
             scratch_root: Path | None = None) -> list[dict[str, Any]]:
    if out.exists() and any(out.iterdir()):
        raise ParamsError(f"{out} is not empty; remove it or choose another --out (a side is written once)")
    out.mkdir(parents=True, exist_ok=True)
    bench = section(params, "bench")
    sandbox.preflight()
    cli.locate()
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="skillevo-bench-", dir=scratch_root)))
        sim_url = None
        if section(params, "model").get("backend", "simulator") == "simulator":
            sim_url = stack.enter_context(Simulator(load_dir(tasks_file.parent / "playbooks"))).url()
        mdl, api_key = model(params, sim_url)
        cells = build_cells(p, skills_dir, overlay_dir, bench, mdl, scratch)
        writer = _Writer(out, len(cells), quiet)
        runner = executor or _executor(params, bench, api_key)
        with _cancel_on_signals() as cancel:
            try:
                runner.run(cells, writer, cancel)
            finally:
                writer.close()
            if cancel.is_set():
                raise BenchInterrupted(f"interrupted: {len(writer.rows)} of {len(cells)} cells finished and were kept "
                                       f"in {out / 'results.jsonl'}")
    rows = sorted(writer.rows, key=lambda r: (r["task"], r["arm"], r["run"]))
    (out / "results.jsonl").write_bytes(b"".join(canonical_json(r) + b"\n" for r in rows))
    provenance = {
        "schema_version": 1, "side": p.side, "model": model_binding(params), "effort": mdl.effort, "runs": p.runs,
        "arms": [a.describe() for a in p.arms], "task_bindings": [t.binding for t in p.tasks],
        "skipped_tasks": p.skipped, "overlay_digest": p.overlay_digest, "skills_digest": p.skills_digest,
        "cells": len(cells), "rows": len(rows),
    }
    validate(provenance, "bench-run.schema.json", out / "bench.json")
    (out / "bench.json").write_text(json.dumps(provenance, indent=1, sort_keys=True) + "\n")
    write_report(out / "report.md", provenance, rows)
    return rows
