"""One bench cell — (task, arm, run) — as a pure job: a CellSpec in, a row plus artifact bytes out.

Phases: workspace (a copy of the template), setup, the arm's sessions (skills over-mounted read-only and
re-checked after each; every session runs even when an earlier one failed, so a failing arm's cost is never
artificially small), churn and patch (skillevo.bench.churn: the harness's own view of the tree), verify and the
hidden oracle (skillevo.bench.scoring). Every phase runs under the cell's limits (skillevo.core.limits).

The first failure names the row's error kind (schemas/result-row.schema.json): anything the agent's actions can
cause — a failed check, a limit or timeout it ran into, a plan session that edited code, a session that left no
work or failed without the API failing, an oracle it broke, skills changed under it, a workspace the harness cannot
measure — is a measured, unresolved run at the cost it ran up; only what the harness can show the run did not cause
(the API failed, the harness failed before any agent ran or as a full disk's victim, the user stopped the bench) is
excluded (docs/formats.md, the missing-data rule).
"""

from __future__ import annotations

import errno
import os
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skillevo import backends, sandbox
from skillevo.agent import SessionSpec, run_session
from skillevo.backends import SessionRef
from skillevo.bench import churn, mcpservers, scoring, workspace
from skillevo.core.arms import Arm
from skillevo.core.events import USAGE_FIELDS
from skillevo.core.limits import Limits
from skillevo.core.models import Credential, Model
from skillevo.core.redact import redact_text
from skillevo.core.results import EXCLUDED_ERROR_KINDS
from skillevo.core.tasks import Task
from skillevo.files import safefs
from skillevo.files.digests import framed_digest, sha256_bytes
from skillevo.files.errors import BadInput, BrokenEnvironment
from skillevo.sandbox import SandboxSpec

TAIL = 2000
MAX_SKILLS_BYTES = 16 << 20
MIN_FREE_BYTES = 64 << 20  # below this the scratch filesystem is full (_blame_full_scratch says whose doing)


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
    moment: str | None = None  # the measuring moment (skillevo.bench.sideplan.SidePlan.moment)
    slot: int | None = None  # its place in the side's order
    budget_usd: float | None = None  # the candidate side's per-run cost cap (skillevo.core.sampling.design)
    replaces: int | None = None  # a re-run block's cell: the run of the block a fault spoiled (core.controls)

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
        "verify_tail": "", "skill_invoked": None, "skills_loaded": [], "session_ids": [], "tool_uses": {},
        "transcripts": [], "patch": None, "phases": {"workspace_s": 0.0, "setup_s": 0.0, "sessions_s": [],
                                                     "verify_s": 0.0, "churn_s": 0.0},
        "model": spec.model.name, "served_models": [], "backend": spec.model.backend, "simulated": spec.model.simulated,
        "effort": spec.model.effort, "prices": list(spec.model.prices) if spec.model.prices is not None else None,
        "base_commit": spec.base_commit,
        "task_binding_digest": spec.task.binding_digest, "skills_digest": spec.skills_digest,
        "overlay_digest": spec.overlay_digest, "started_at": _now(), "recorded_at": None,
        # the candidate side's order and pairing, which the gate checks (skillevo.core.controls)
        "slot": spec.slot if spec.side == "candidate" else None, "control_for": spec.control_for,
        "replaces": spec.replaces,
    }


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _fail(row: dict[str, Any], kind: str, detail: str) -> None:
    if row["error_kind"] is None:
        row["error_kind"], row["error_detail"] = kind, redact_text(detail)[-TAIL:]


def infra_error(spec: CellSpec, detail: str) -> CellResult:
    """The row of a cell the harness could not run at all (e.g. its worker was lost on every try)."""
    row = _base_row(spec)
    _fail(row, "infra-error", detail)
    row["recorded_at"] = _now()
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


def _add_session(row: dict[str, Any], artifacts: dict[str, bytes], rec: dict[str, Any], tdir: Path) -> float | None:
    """Add what a session measured, and only what its stored transcript can prove (results.check_transcripts
    recomputes these totals from the transcripts): a session without one adds nothing but its failure. Returns the
    cost it added (None: unmeasured), once the transcript is in the row, so the row's cost follows the same rule."""
    if rec["session_id"]:
        row["session_ids"].append(rec["session_id"])
    if not rec["transcript"]:
        return None
    meta = rec["transcript"]
    data = (tdir / meta["path"]).read_bytes()  # first: a failed read must leave the row's totals untouched
    for f in USAGE_FIELDS + ("num_turns",):
        row[f] += rec[f]
    row["duration_s"] = round(row["duration_s"] + rec["duration_s"], 3)
    for tool, n in rec["tool_uses"].items():
        row["tool_uses"][tool] = row["tool_uses"].get(tool, 0) + n
    row["served_models"] = sorted({*row["served_models"], *rec["served_models"]})
    artifacts[f"transcripts/{meta['path']}"] = data
    row["transcripts"].append({**meta, "path": f"transcripts/{meta['path']}"})
    return rec["cost_usd"]


def _session_ref(spec: CellSpec, session: int) -> SessionRef:
    """What names the session to its backend (skillevo.backends.SessionRef), set here on the host, out of the
    agent's reach. A candidate's cells are named with its overlay digest too, and a control with the digest of the
    candidate it runs beside: each is measured by sessions of its own, as with a real model, so two generations'
    candidates (or a control and the incumbent side) never share their luck on the simulator; the side's measuring
    moment and the cell's slot in its order fix the simulator's drift and cache windows (docs/simulator.md)."""
    arm = (f"{spec.arm.name}@{spec.overlay_digest}" if spec.overlay_digest is not None else
           f"{spec.arm.name}#control@{spec.control_for}" if spec.control_for is not None else spec.arm.name)
    return SessionRef(spec.task.id, arm, spec.run, session, spec.moment, spec.slot)


def _sessions(spec: CellSpec, ws: Path, row: dict, artifacts: dict, credential: Credential | None,
              cancel: threading.Event | None) -> None:
    """Every session of the arm, in order, whatever the earlier ones did; the first failure names the row.

    A session counts as run (phases.sessions_s) once run_session returned its record, so an exception anywhere
    leaves the row's cost what its transcripts say (results.transcript_totals): the sum over the sessions that
    ran, or unmeasured when one of them left no transcript."""
    fingerprint = skills_fingerprint(ws)
    if fingerprint is None:  # before any agent ran: the harness's own template
        _fail(row, "infra-error", "the skills under test hold a link or special file before the first session")
        return
    costs: list[float | None] = []
    invoked: list[bool | None] = []
    agent_ran = False  # an earlier session started its sandbox: its agent may have changed what the next one needs
    try:
        with tempfile.TemporaryDirectory(dir=spec.scratch, prefix="transcripts-") as tdir:
            for i, session in enumerate(spec.arm.sessions):
                if cancel is not None and cancel.is_set():
                    _fail(row, "cancelled", f"cancelled before session {i + 1}")
                    break
                left = None if spec.budget_usd is None else spec.budget_usd - sum(c or 0.0 for c in costs)
                if left is not None and left <= 0:
                    _fail(row, "cost-cap", f"the run reached its cost cap ${spec.budget_usd} before session {i + 1}")
                    break
                started = time.monotonic()
                endpoint = backends.session_endpoint(spec.model, _session_ref(spec, i + 1))
                rec = run_session(SessionSpec(
                    prompt=session.prompt.format(prompt=spec.task.prompt), workspace=ws, model=spec.model.name,
                    endpoint=endpoint.url, headers=endpoint.headers, prices=spec.model.prices, mcp=spec.arm.mcp,
                    credential=credential, expected_skill=session.skill,
                    transcript_dir=Path(tdir), transcript_name=f"{spec.name}-s{i + 1}-{session.skill}",
                    timeout_s=spec.task.timeout_s, max_retries=spec.max_retries, effort=spec.model.effort,
                    cancel=cancel, limits=spec.limits, after_agent=agent_ran, max_budget_usd=left,
                    mounts=mcpservers.mounts(spec.arm, spec.scratch)))
                row["phases"]["sessions_s"].append(round(time.monotonic() - started, 3))
                agent_ran = agent_ran or rec["process_state"] != "spawn-failure"
                costs.append(_add_session(row, artifacts, rec, Path(tdir)))
                invoked.append(rec["skill_invoked"])  # None for a baseline's sessions: they expect no skill
                row["skill_invoked"] = False if False in invoked else None if None in invoked else True
                row["skills_loaded"].append(rec["skills_loaded"])
                if skills_fingerprint(ws) != fingerprint:  # only the agent could have: measured
                    _fail(row, "skills-changed", f"the skills under test changed during session {i + 1}")
                    break
                if not rec["ok"]:
                    _fail(row, rec["error_kind"], f"session {i + 1} ({session.skill}): {rec['error_detail']}")
                elif session.writes is not None:
                    stats, _ = churn.measure(spec.template, ws, (*session.writes, *spec.churn_exclude),
                                             timeout_s=spec.phase_timeout_s)
                    if stats["diff_files"]:
                        _fail(row, "phase-violation", f"session {i + 1} ({session.skill}) may change only "
                                                      f"{', '.join(session.writes)} but changed {stats['diff_files']} "
                                                      "other file(s)")
    finally:
        row["ok"] = row["error_kind"] is None
        ran = len(row["phases"]["sessions_s"])
        row["cost_usd"] = None if not costs or len(costs) < ran or None in costs else round(
            sum(c for c in costs if c is not None), 6)
        if spec.budget_usd is not None and row["cost_usd"] is not None and row["cost_usd"] >= spec.budget_usd:
            _fail(row, "cost-cap", f"the run cost ${row['cost_usd']}, at or over its cap ${spec.budget_usd}")
            row["ok"] = False


def _checks(spec: CellSpec, ws: Path, private: Path, row: dict, cancel: threading.Event | None,
            unrecorded: dict[str, float]) -> None:
    """Verify, then the hidden oracle; how long the oracle took goes to `unrecorded["oracle_s"]`, even when it
    raises, and must never be recorded."""
    with _Timer(row, "verify_s"):
        verify = scoring.verify(spec.task.verify, ws, private / "verify", timeout_s=spec.phase_timeout_s,
                               limits=spec.limits, cancel=cancel)
    row["verify_passed"] = verify.passed
    row["verify_tail"] = redact_text(verify.output.decode(errors="replace"))[-TAIL:]
    start = time.monotonic()
    try:
        oracle = scoring.oracle(spec.task.oracle_command, spec.task.oracle_files, spec.task.binding["oracle_tests"],
                               ws, private / "oracle", timeout_s=spec.phase_timeout_s, limits=spec.limits,
                               cancel=cancel)
    finally:
        unrecorded["oracle_s"] = time.monotonic() - start
    row["oracle_passed"] = oracle.outcome == "passed"
    if verify.state == "limit":
        _fail(row, "cell-limit", "verify stopped: a cell limit")
    elif not verify.passed:
        _fail(row, "verify-failed", f"verify exited {verify.returncode} ({verify.state})")
    if oracle.outcome != "passed":
        _fail(row, "oracle-failed" if oracle.outcome == "failed" else "oracle-error", oracle.detail)
    if oracle.outcome == "error":  # the operator's log, never the row: a harness fault is told apart here
        print(f"bench: note: cell {spec.name}: the hidden oracle ended in an error ({oracle.how}, as the harness "
              "saw it)", file=sys.stderr)


def describe(e: BaseException) -> str:
    """An exception in a few hundred characters, its kind first: its message may carry an agent's 5000-byte path."""
    what = f"{type(e).__name__}"
    if isinstance(e, OSError) and e.errno is not None:
        what += f" [{errno.errorcode.get(e.errno, e.errno)}] {e.strerror}"
        text = str(e.filename) if e.filename is not None else ""
    else:
        text = str(e)
    if len(text) > 400:
        text = f"{text[:150]}…[{len(text) - 300} chars]…{text[-150:]}"
    frames = "; ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}"
                       for f in traceback.extract_tb(e.__traceback__)[-3:])
    return f"{what}: {text} (at {frames})"


def _scratch_full(scratch: Path) -> bool:
    try:
        st = os.statvfs(scratch)
    except OSError:
        return False  # nothing shows it full: the row keeps its kind
    return st.f_bavail * st.f_frsize < MIN_FREE_BYTES


def _blame_full_scratch(spec: CellSpec, row: dict[str, Any], cell_dir: Path, before: int | None) -> None:
    """A cell that failed while the scratch filesystem was full: its own doing (measured `cell-limit`) when its tree,
    counted in allocated blocks, grew past its disk quota since before its first session; otherwise a victim of a
    neighbour or of the host (excluded `infra-error`)."""
    was = f"was: {row['error_kind']}: {(row['error_detail'] or '')[:500]}"
    grown = safefs.allocated(cell_dir) - before if before is not None else 0
    if grown > spec.limits.disk_mb << 20:
        row["error_kind"], row["error_detail"] = "cell-limit", redact_text(
            f"the scratch filesystem {spec.scratch} is full and this cell's tree grew by {grown >> 20} MB, over "
            f"bench.limits.disk_mb {spec.limits.disk_mb} ({was})")[-TAIL:]
    elif row["error_kind"] not in EXCLUDED_ERROR_KINDS:
        row["error_kind"], row["error_detail"] = "infra-error", redact_text(
            f"the scratch filesystem {spec.scratch} is full, and this cell's tree grew by only {grown >> 20} MB: "
            f"a harness fault ({was})")[-TAIL:]


def run_cell(spec: CellSpec, *, credential: Credential | None = None,
             cancel: threading.Event | None = None) -> CellResult:
    """Run one cell. A cell cancelled before it finished is a `cancelled` row (excluded).

    An exception before any session ran is the harness's (`infra-error`); after, reading what the agent left (its
    names, depth, modes, kinds) may be what failed, so it is a measured `workspace-error` at the cost run
    up so far, unless the environment itself is broken (a missing tool). Removing the cell's directory comes after
    the row is measured and never changes it."""
    row = _base_row(spec)
    artifacts: dict[str, bytes] = {}
    start, unrecorded = time.monotonic(), {"oracle_s": 0.0}
    try:
        cell_dir = Path(tempfile.mkdtemp(prefix=f"{spec.name}-", dir=spec.scratch))
    except OSError as e:  # a full or broken scratch: before anything of the agent ran
        return infra_error(spec, f"no scratch directory for the cell: {describe(e)}")
    ws, private = cell_dir / "ws", cell_dir / "private"
    before: int | None = None  # the cell's allocated bytes before its first session
    try:
        try:
            with _Timer(row, "workspace_s"):
                workspace.materialize(spec.template, ws)
            if spec.task.setup:
                with _Timer(row, "setup_s"):
                    setup = sandbox.run(SandboxSpec(workspace=ws, private=private / "setup", env=sandbox.base_env(),
                                                    limits=spec.limits),
                                        ["/bin/sh", "-c", spec.task.setup], timeout_s=spec.phase_timeout_s,
                                        cancel=cancel)
                if setup.state != "exited" or setup.returncode != 0:
                    _fail(row, "infra-error", f"setup failed ({setup.state}, exit {setup.returncode}): "
                          f"{setup.stderr_tail.decode(errors='replace')}")
            if row["error_kind"] is None:
                before = safefs.allocated(cell_dir)
                _sessions(spec, ws, row, artifacts, credential, cancel)
            if row["phases"]["sessions_s"] and row["error_kind"] != "cancelled":  # whatever the sessions left
                with _Timer(row, "churn_s"):
                    stats, patch = churn.measure(spec.template, ws, spec.churn_exclude, timeout_s=spec.phase_timeout_s)
                row.update(stats)
                if patch:
                    artifacts[f"patches/{spec.name}.patch"] = patch
                    row["patch"] = {"path": f"patches/{spec.name}.patch", "sha256": sha256_bytes(patch),
                                    "bytes": len(patch)}
                elif row["ok"]:
                    _fail(row, "no-work", "every session finished, but the workspace is exactly as it started")
                    row["ok"] = True  # the sessions themselves did finish
                if row["ok"] or row["error_kind"] in ("no-work", "skill-not-invoked", "phase-violation"):
                    _checks(spec, ws, private, row, cancel, unrecorded)
        except Exception as e:  # noqa: BLE001 - every failure is a row, never a gap
            detail = describe(e)
            if row["phases"]["sessions_s"] and not isinstance(e, BrokenEnvironment):
                _fail(row, "workspace-error", f"measuring what the agent left failed: {detail}")
            else:  # nothing of an agent ran yet, or a tool of the harness is missing
                _fail(row, "infra-error", detail)
        if cancel is not None and cancel.is_set():
            row["error_kind"], row["error_detail"] = "cancelled", "the bench was stopped while this cell ran"
        elif row["error_kind"] not in (None, "cancelled") and _scratch_full(spec.scratch):
            _blame_full_scratch(spec, row, cell_dir, before)
    finally:
        try:
            safefs.remove_tree(cell_dir)
        except (OSError, RecursionError) as e:  # the row is measured already; a leftover is the harness's to clear
            print(f"bench: warning: cell {spec.name}: could not remove {cell_dir}: {e}", file=sys.stderr)
    row["resolved"] = row["ok"] and row["verify_passed"] and row["oracle_passed"] and row["error_kind"] is None
    row["wall_s"] = round(time.monotonic() - start - unrecorded["oracle_s"], 3)  # it could carry hidden bytes
    row["recorded_at"] = _now()
    return CellResult(row, artifacts)
