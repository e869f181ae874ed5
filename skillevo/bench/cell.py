"""One bench cell — (task, arm, run) — as a pure job: a CellSpec in, a row plus artifact bytes out.

Phases: workspace (a copy of the template), setup, the arm's sessions (skills over-mounted read-only and
re-checked after each; every session runs even when an earlier one failed, so a failing arm's cost is never
artificially small), churn and patch (skillevo.bench.churn: the harness's own view of the tree), verify and the
hidden oracle (skillevo.bench.checks). Every phase runs under the cell's limits (skillevo.limits).

The first failure names the row's error kind (schemas/result-row.schema.json): what the agent did under the
skill — a failed check, a limit or timeout it ran into, a plan session that edited code, a session that left
no work, an oracle it broke — is a measured, unresolved run; only faults of the harness or the API, and cells
stopped by the user, are excluded (docs/formats.md, the missing-data rule).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from skillevo import safefs, sandbox, workspace
from skillevo.agent import SessionSpec, run_session
from skillevo.arms import Arm
from skillevo.bench import checks, churn
from skillevo.digests import framed_digest, sha256_bytes
from skillevo.errors import BadInput
from skillevo.events import USAGE_FIELDS
from skillevo.limits import Limits
from skillevo.models import Credential, Model
from skillevo.redact import redact_text
from skillevo.sandbox import SandboxSpec
from skillevo.simulator.noise import route
from skillevo.tasks import Task

TAIL = 2000
MAX_SKILLS_BYTES = 16 << 20
MIN_FREE_BYTES = 64 << 20  # below this the scratch filesystem is full: a harness fault, not the skill's


@dataclass(frozen=True)
class CellSpec:
    task: Task
    arm: Arm
    run: int
    side: str
    template: Path
    base_commit: str
    skills_digest: str
    overlay_digest: str | None
    model: Model
    scratch: Path  # a directory the cell may use; its workspace lives below it
    churn_exclude: tuple[str, ...]  # params bench.* (config owns the defaults)
    phase_timeout_s: float
    max_retries: int
    limits: Limits
    control_for: str | None = None  # a control cell: the overlay digest of the candidate side it runs beside
    moment: str | None = None  # the measuring moment (skillevo.bench.side.SidePlan.moment)
    slot: int | None = None  # its place in the side's order

    @property
    def name(self) -> str:
        return f"{self.task.id}-{self.arm.name}-run{self.run}"


@dataclass
class CellResult:
    row: dict[str, Any]
    artifacts: dict[str, bytes] = field(default_factory=dict)  # relative path -> bytes


def skills_fingerprint(ws: Path) -> str | None:
    """Digest of the workspace's .claude/ as the agent left it; None if it holds a link or special file."""
    try:
        files = safefs.read_tree(ws / ".claude", max_file_bytes=MAX_SKILLS_BYTES, max_total_bytes=MAX_SKILLS_BYTES)
    except BadInput:
        return None
    return framed_digest(files.items())


def _base_row(spec: CellSpec) -> dict[str, Any]:
    return {
        "task": spec.task.id, "class": spec.task.cls, "arm": spec.arm.name, "incumbent_arm": spec.arm.incumbent,
        "run": spec.run, "side": spec.side, "resolved": False, "ok": False, "error_kind": None, "error_detail": None,
        "cost_usd": None, **{f: 0 for f in USAGE_FIELDS}, "num_turns": 0, "duration_s": 0.0, "wall_s": 0.0,
        "diff_files": 0, "diff_insertions": 0, "diff_deletions": 0, "verify_passed": False, "oracle_passed": False,
        "verify_tail": "", "skill_invoked": None, "skills_loaded": [], "session_ids": [], "tool_uses": {}, "transcripts": [],
        "patch": None, "phases": {"workspace_s": 0.0, "setup_s": 0.0, "sessions_s": [], "verify_s": 0.0,
                                  "churn_s": 0.0},
        "model": spec.model.name, "served_models": [], "backend": spec.model.backend, "simulated": spec.model.simulated,
        "effort": spec.model.effort, "base_commit": spec.base_commit,
        "task_binding_digest": spec.task.binding_digest, "skills_digest": spec.skills_digest,
        "overlay_digest": spec.overlay_digest, "recorded_at": None,
    }


def _fail(row: dict[str, Any], kind: str, detail: str) -> None:
    if row["error_kind"] is None:
        row["error_kind"], row["error_detail"] = kind, redact_text(detail)[-TAIL:]


def infra_error(spec: CellSpec, detail: str) -> CellResult:
    """The row of a cell the harness could not run at all (e.g. its worker was lost on every try)."""
    row = _base_row(spec)
    _fail(row, "infra-error", detail)
    row["recorded_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return CellResult(row)


class _Timer:
    def __init__(self, row: dict[str, Any], phase: str) -> None:
        self.row, self.phase = row, phase

    def __enter__(self) -> None:
        self.start = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        elapsed = round(time.monotonic() - self.start, 3)
        if isinstance(self.row["phases"][self.phase], list):
            self.row["phases"][self.phase].append(elapsed)
        else:
            self.row["phases"][self.phase] = elapsed


def _add_session(row: dict[str, Any], artifacts: dict[str, bytes], rec: dict[str, Any], tdir: Path) -> None:
    """Add what a session measured, and only what its stored transcript can prove (results.check_transcripts
    recomputes these totals from the transcripts): a session without one adds nothing but its failure."""
    if rec["session_id"]:
        row["session_ids"].append(rec["session_id"])
    if not rec["transcript"]:
        return
    for f in USAGE_FIELDS + ("num_turns",):
        row[f] += rec[f]
    row["duration_s"] = round(row["duration_s"] + rec["duration_s"], 3)
    for tool, n in rec["tool_uses"].items():
        row["tool_uses"][tool] = row["tool_uses"].get(tool, 0) + n
    row["served_models"] = sorted({*row["served_models"], *rec["served_models"]})
    meta = rec["transcript"]
    artifacts[f"transcripts/{meta['path']}"] = (tdir / meta["path"]).read_bytes()
    row["transcripts"].append({**meta, "path": f"transcripts/{meta['path']}"})


def _endpoint(spec: CellSpec, session: int) -> str:
    """The session's base URL; on the simulator it names the cell and session (which seeds the session's noise),
    set here on the host, out of the agent's reach. A candidate's cells are named with its overlay digest too, and a
    control with the digest of the candidate it runs beside: each is measured by sessions of its own, as with a real
    model, so two generations' candidates (or a control and the incumbent side) never share their luck."""
    if not spec.model.simulated:
        return spec.model.endpoint
    arm = (f"{spec.arm.name}@{spec.overlay_digest}" if spec.overlay_digest is not None else
           f"{spec.arm.name}#control@{spec.control_for}" if spec.control_for is not None else spec.arm.name)
    return spec.model.endpoint.rstrip("/") + route(spec.task.id, arm, spec.run, session)


def _sessions(spec: CellSpec, ws: Path, row: dict, artifacts: dict, credential: Credential | None,
              cancel: threading.Event | None) -> None:
    """Every session of the arm, in order, whatever the earlier ones did; the first failure names the row."""
    fingerprint = skills_fingerprint(ws)
    costs: list[float | None] = []
    invoked: list[bool | None] = []
    with tempfile.TemporaryDirectory(dir=spec.scratch, prefix="transcripts-") as tdir:
        for i, session in enumerate(spec.arm.sessions):
            if cancel is not None and cancel.is_set():
                _fail(row, "cancelled", f"cancelled before session {i + 1}")
                break
            with _Timer(row, "sessions_s"):
                rec = run_session(SessionSpec(
                    prompt=session.prompt.format(prompt=spec.task.prompt), workspace=ws, model=spec.model.name,
                    endpoint=_endpoint(spec, i + 1), credential=credential, expected_skill=session.skill,
                    transcript_dir=Path(tdir), transcript_name=f"{spec.name}-s{i + 1}-{session.skill}",
                    timeout_s=spec.task.timeout_s, max_retries=spec.max_retries, effort=spec.model.effort,
                    cancel=cancel, limits=spec.limits))
            costs.append(rec["cost_usd"] if rec["transcript"] else None)
            _add_session(row, artifacts, rec, Path(tdir))
            invoked.append(rec["skill_invoked"])  # None for a baseline's sessions: they expect no skill
            row["skill_invoked"] = False if False in invoked else None if None in invoked else True
            row["skills_loaded"].append(rec["skills_loaded"])
            if fingerprint is None or skills_fingerprint(ws) != fingerprint:
                _fail(row, "evidence-unverified", f"the skills under test changed during session {i + 1}")
                break
            if not rec["ok"]:
                _fail(row, rec["error_kind"], f"session {i + 1} ({session.skill}): {rec['error_detail']}")
            elif session.writes is not None:
                stats, _ = churn.measure(spec.template, ws, (*session.writes, *spec.churn_exclude))
                if stats["diff_files"]:
                    _fail(row, "phase-violation", f"session {i + 1} ({session.skill}) may change only "
                                                  f"{', '.join(session.writes)} but changed {stats['diff_files']} "
                                                  "other file(s)")
    row["ok"] = row["error_kind"] is None
    row["cost_usd"] = None if not costs or any(c is None for c in costs) else round(sum(costs), 6)


def _checks(spec: CellSpec, ws: Path, private: Path, row: dict, cancel: threading.Event | None) -> float:
    """Verify, then the hidden oracle; returns how long the oracle took, which must never be recorded."""
    with _Timer(row, "verify_s"):
        verify = checks.verify(spec.task.verify, ws, private / "verify", timeout_s=spec.phase_timeout_s,
                               limits=spec.limits, cancel=cancel)
    row["verify_passed"] = verify.passed
    row["verify_tail"] = redact_text(verify.output.decode(errors="replace"))[-TAIL:]
    start = time.monotonic()
    oracle = checks.oracle(spec.task.oracle_command, spec.task.oracle_files, spec.task.binding["oracle_tests"], ws,
                           private / "oracle", timeout_s=spec.phase_timeout_s, limits=spec.limits, cancel=cancel)
    row["oracle_passed"] = oracle.outcome == "passed"
    if verify.state == "limit":
        _fail(row, "cell-limit", "verify stopped: a cell limit")
    elif not verify.passed:
        _fail(row, "verify-failed", f"verify exited {verify.returncode} ({verify.state})")
    if oracle.outcome != "passed":
        _fail(row, "oracle-failed" if oracle.outcome == "failed" else "oracle-error", oracle.detail)
    return time.monotonic() - start


def _scratch_full(scratch: Path) -> bool:
    st = os.statvfs(scratch)
    return st.f_bavail * st.f_frsize < MIN_FREE_BYTES


def run_cell(spec: CellSpec, *, credential: Credential | None = None,
             cancel: threading.Event | None = None) -> CellResult:
    """Run one cell. A cell cancelled before it finished is a `cancelled` row (excluded)."""
    row, artifacts = _base_row(spec), {}
    start, oracle_s = time.monotonic(), 0.0
    cell_dir = Path(tempfile.mkdtemp(prefix=f"{spec.name}-", dir=spec.scratch))
    ws, private = cell_dir / "ws", cell_dir / "private"
    try:
        with _Timer(row, "workspace_s"):
            workspace.materialize(spec.template, ws)
        if spec.task.setup:
            with _Timer(row, "setup_s"):
                setup = sandbox.run(SandboxSpec(workspace=ws, private=private / "setup", env=sandbox.base_env(),
                                                limits=spec.limits),
                                    ["/bin/sh", "-c", spec.task.setup], timeout_s=spec.phase_timeout_s, cancel=cancel)
            if setup.state != "exited" or setup.returncode != 0:
                _fail(row, "infra-error", f"setup failed ({setup.state}, exit {setup.returncode}): "
                      f"{setup.stderr_tail.decode(errors='replace')}")
        if row["error_kind"] is None:
            _sessions(spec, ws, row, artifacts, credential, cancel)
        if row["phases"]["sessions_s"] and row["error_kind"] != "cancelled":  # whatever the sessions left
            with _Timer(row, "churn_s"):
                stats, patch = churn.measure(spec.template, ws, spec.churn_exclude)
            row.update(stats)
            if patch:
                artifacts[f"patches/{spec.name}.patch"] = patch
                row["patch"] = {"path": f"patches/{spec.name}.patch", "sha256": sha256_bytes(patch), "bytes": len(patch)}
            elif row["ok"]:
                _fail(row, "no-work", "every session finished, but the workspace is exactly as it started")
                row["ok"] = True  # the sessions themselves did finish
            if row["ok"] or row["error_kind"] in ("no-work", "skill-not-invoked", "phase-violation"):
                oracle_s = _checks(spec, ws, private, row, cancel)
        if cancel is not None and cancel.is_set():
            row["error_kind"], row["error_detail"] = "cancelled", "the bench was stopped while this cell ran"
        elif row["error_kind"] not in (None, "cancelled", "infra-error") and _scratch_full(spec.scratch):
            row["error_kind"], row["error_detail"] = "infra-error", (
                f"the scratch filesystem {spec.scratch} is full: a harness fault (was: {row['error_kind']})")
    except Exception as e:  # the harness failed, not the skill: an excluded infra-error row, never a gap
        _fail(row, "infra-error", f"{type(e).__name__}: {e}; {traceback.format_exc(limit=3)}")
    finally:
        try:
            safefs.remove_tree(cell_dir)
        except OSError as e:
            primary = f"{row['error_kind']}: {row['error_detail']}" if row["error_kind"] else "none"
            row["error_kind"], row["error_detail"] = "cleanup-failure", f"primary={primary}; cleanup: {e}"[-TAIL:]
    row["resolved"] = row["ok"] and row["verify_passed"] and row["oracle_passed"] and row["error_kind"] is None
    row["wall_s"] = round(time.monotonic() - start - oracle_s, 3)  # the oracle's time could carry hidden bytes
    row["recorded_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return CellResult(row, artifacts)
