"""One bench cell — (task, arm, run) — as a pure job: a CellSpec in, a row plus artifact bytes out.

Phases: workspace (copy of the template), setup, the arm's sessions (skills over-mounted read-only and
re-checked after each session), verify (workspace read-only, no network), the hidden oracle (staged
only now, read-only, output never kept, staged bytes re-checked), churn and patch against the starting
commit. Harness trouble becomes an excluded error kind, never a silent gap and never the skill's fault.
"""

from __future__ import annotations

import shutil
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
from skillevo.agent.stream import USAGE_FIELDS
from skillevo.arms import Arm
from skillevo.digests import framed_digest, sha256_bytes
from skillevo.errors import BadInput
from skillevo.models import Model
from skillevo.redact import redact_text
from skillevo.sandbox import Mount, SandboxSpec
from skillevo.tasks import Task

ORACLE_DST = "/oracle"
TAIL = 2000
MAX_PATCH = 1 << 20
_EXCLUDED_FROM_CHURN = (".claude",)


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

    @property
    def name(self) -> str:
        return f"{self.task.id}-{self.arm.name}-run{self.run}"


@dataclass
class CellResult:
    row: dict[str, Any]
    artifacts: dict[str, bytes] = field(default_factory=dict)  # relative path -> bytes


def _contained(ws: Path, private: Path, script: str, *, writable: bool, timeout_s: float,
               mounts: tuple[Mount, ...] = (), env: dict[str, str] | None = None,
               cancel: threading.Event | None = None) -> sandbox.Finished:
    spec = SandboxSpec(workspace=ws, private=private, env={**sandbox.base_env(), **(env or {})},
                       mounts=mounts, workspace_writable=writable)
    return sandbox.run(spec, ["/bin/sh", "-c", script], timeout_s=timeout_s, max_stdout=MAX_PATCH + 4096,
                       cancel=cancel)


MAX_SKILLS_BYTES = 16 << 20


def skills_fingerprint(ws: Path) -> str | None:
    """Digest of the workspace's .claude/ as the agent left it; None if it holds a link or special file."""
    try:
        files = safefs.read_tree(ws / ".claude", max_file_bytes=MAX_SKILLS_BYTES, max_total_bytes=MAX_SKILLS_BYTES)
    except BadInput:
        return None
    return framed_digest(files.items())


def _churn_script(base: str, exclude: tuple[str, ...]) -> str:
    """Diff the working tree against `base` without writing to the workspace: index and new objects
    go to the sandbox's private /tmp. Runs contained, because the agent controlled .git/config."""
    spec = " ".join(f"':(exclude){p}'" for p in _EXCLUDED_FROM_CHURN + exclude)
    g = "git --no-optional-locks -c core.fsmonitor=false -c core.hooksPath=/dev/null -c core.untrackedCache=false"
    return (
        "set -e; export GIT_INDEX_FILE=/tmp/churn.index GIT_OBJECT_DIRECTORY=/tmp/churn.objects "
        "GIT_ALTERNATE_OBJECT_DIRECTORIES=/work/.git/objects; mkdir -p /tmp/churn.objects; "
        f"{g} read-tree {base}; {g} add -A -- . {spec}; "
        f"{g} diff --cached --numstat {base} -- . {spec}; echo '@@skillevo-patch@@'; "
        f"{g} diff --cached --binary {base} -- . {spec}"
    )


def _parse_churn(out: bytes) -> tuple[dict[str, int], bytes]:
    numstat, _, patch = out.partition(b"@@skillevo-patch@@\n")
    files = ins = dels = 0
    for line in numstat.decode(errors="replace").splitlines():
        a, b, _ = line.split("\t", 2)
        files += 1
        ins += int(a) if a.isdigit() else 0
        dels += int(b) if b.isdigit() else 0
    return {"diff_files": files, "diff_insertions": ins, "diff_deletions": dels}, patch


def _base_row(spec: CellSpec) -> dict[str, Any]:
    return {
        "task": spec.task.id, "class": spec.task.cls, "arm": spec.arm.name, "incumbent_arm": spec.arm.incumbent,
        "run": spec.run, "side": spec.side, "resolved": False, "ok": False, "error_kind": None, "error_detail": None,
        "cost_usd": None, **{f: 0 for f in USAGE_FIELDS}, "num_turns": 0, "duration_s": 0.0, "wall_s": 0.0,
        "diff_files": 0, "diff_insertions": 0, "diff_deletions": 0, "verify_passed": False, "oracle_passed": False,
        "verify_tail": "", "skill_invoked": None, "session_ids": [], "tool_uses": {}, "transcripts": [],
        "patch": None, "phases": {"workspace_s": 0.0, "setup_s": 0.0, "sessions_s": [], "verify_s": 0.0,
                                  "oracle_s": 0.0, "churn_s": 0.0},
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


def _sessions(spec: CellSpec, ws: Path, row: dict, artifacts: dict, api_key: str | None,
              cancel: threading.Event | None) -> bool:
    fingerprint = skills_fingerprint(ws)
    costs: list[float | None] = []
    invoked: list[bool | None] = []
    with tempfile.TemporaryDirectory(dir=spec.scratch, prefix="transcripts-") as tdir:
        for i, session in enumerate(spec.arm.sessions):
            with _Timer(row, "sessions_s"):
                rec = run_session(SessionSpec(
                    prompt=session.prompt.format(prompt=spec.task.prompt), workspace=ws, model=spec.model.name,
                    endpoint=spec.model.endpoint, api_key=api_key, expected_skill=session.skill,
                    transcript_dir=Path(tdir), transcript_name=f"{spec.name}-s{i + 1}-{session.skill}",
                    timeout_s=spec.task.timeout_s, max_retries=spec.max_retries, effort=spec.model.effort,
                    cancel=cancel))
            costs.append(rec["cost_usd"])
            for f in USAGE_FIELDS + ("num_turns",):
                row[f] += rec[f]
            row["duration_s"] = round(row["duration_s"] + rec["duration_s"], 3)
            for tool, n in rec["tool_uses"].items():
                row["tool_uses"][tool] = row["tool_uses"].get(tool, 0) + n
            if rec["session_id"]:
                row["session_ids"].append(rec["session_id"])
            row["served_models"] = sorted({*row["served_models"], *rec["served_models"]})
            if rec["transcript"]:
                meta = rec["transcript"]
                artifacts[f"transcripts/{meta['path']}"] = (Path(tdir) / meta["path"]).read_bytes()
                row["transcripts"].append({**meta, "path": f"transcripts/{meta['path']}"})
            invoked.append(rec["skill_invoked"])
            row["skill_invoked"] = False if False in invoked else None if None in invoked else True
            if fingerprint is None or skills_fingerprint(ws) != fingerprint:
                _fail(row, "evidence-unverified", f"the skills under test changed during session {i + 1}")
                return False
            if not rec["ok"]:
                _fail(row, rec["error_kind"], f"session {i + 1} ({session.skill}): {rec['error_detail']}")
                return False
    row["cost_usd"] = None if any(c is None for c in costs) else round(sum(costs), 6)
    return True


def _oracle(spec: CellSpec, ws: Path, private: Path, cancel: threading.Event | None) -> bool:
    staged = private / "oracle"
    staged.mkdir(mode=0o755, parents=True)
    for target, data in spec.task.oracle_files:
        path = staged / target
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        path.write_bytes(data)
        path.chmod(0o444)
    finished = _contained(ws, private / "oracle-box", spec.task.oracle_command, writable=False,
                          timeout_s=spec.phase_timeout_s, mounts=(Mount(staged, ORACLE_DST),),
                          env={"SKILLEVO_ORACLE_DIR": ORACLE_DST}, cancel=cancel)
    # the output is discarded unread: the agent's code could have printed the hidden bytes
    for target, data in spec.task.oracle_files:
        if sha256_bytes((staged / target).read_bytes()) != sha256_bytes(data):
            raise RuntimeError(f"staged oracle file {target} changed while the oracle ran")
    return finished.state == "exited" and finished.returncode == 0


def run_cell(spec: CellSpec, *, api_key: str | None = None, cancel: threading.Event | None = None) -> CellResult | None:
    """Run one cell. Returns None only when cancelled (a cancelled cell leaves no row)."""
    row, artifacts = _base_row(spec), {}
    start = time.monotonic()
    cell_dir = Path(tempfile.mkdtemp(prefix=f"{spec.name}-", dir=spec.scratch))
    ws, private = cell_dir / "ws", cell_dir / "private"
    try:
        with _Timer(row, "workspace_s"):
            workspace.materialize(spec.template, ws)
        if spec.task.setup:
            with _Timer(row, "setup_s"):
                setup = _contained(ws, private / "setup", spec.task.setup, writable=True,
                                   timeout_s=spec.phase_timeout_s, cancel=cancel)
            if setup.state != "exited" or setup.returncode != 0:
                _fail(row, "infra-error", f"setup failed ({setup.state}, exit {setup.returncode}): "
                      f"{setup.stderr_tail.decode(errors='replace')}")
        if row["error_kind"] is None and _sessions(spec, ws, row, artifacts, api_key, cancel):
            row["ok"] = True
            with _Timer(row, "verify_s"):
                verify = _contained(ws, private / "verify", spec.task.verify, writable=False,
                                    timeout_s=spec.phase_timeout_s, cancel=cancel)
            row["verify_passed"] = verify.state == "exited" and verify.returncode == 0
            row["verify_tail"] = redact_text((verify.stdout + verify.stderr_tail).decode(errors="replace"))[-TAIL:]
            with _Timer(row, "oracle_s"):
                row["oracle_passed"] = _oracle(spec, ws, private, cancel)
            if not row["verify_passed"]:
                _fail(row, "verify-failed", f"verify exited {verify.returncode} ({verify.state})")
            elif not row["oracle_passed"]:
                _fail(row, "oracle-failed", "the hidden oracle failed")
        if cancel is not None and cancel.is_set():
            return None
        if row["session_ids"]:
            with _Timer(row, "churn_s"):
                churn = _contained(ws, private / "churn", _churn_script(spec.base_commit, spec.churn_exclude),
                                   writable=False, timeout_s=spec.phase_timeout_s)
            if churn.state != "exited" or churn.returncode != 0 or churn.stdout_truncated:
                _fail(row, "evidence-unverified", f"could not measure churn: {churn.stderr_tail.decode(errors='replace')}")
            else:
                stats, patch = _parse_churn(churn.stdout)
                row.update(stats)
                if patch:
                    artifacts[f"patches/{spec.name}.patch"] = patch
                    row["patch"] = {"path": f"patches/{spec.name}.patch", "sha256": sha256_bytes(patch), "bytes": len(patch)}
    except Exception as e:  # the harness failed, not the skill: an excluded infra-error row, never a gap
        _fail(row, "infra-error", f"{type(e).__name__}: {e}; {traceback.format_exc(limit=3)}")
    finally:
        try:
            shutil.rmtree(cell_dir)
        except OSError as e:
            primary = f"{row['error_kind']}: {row['error_detail']}" if row["error_kind"] else "none"
            row["error_kind"], row["error_detail"] = "cleanup-failure", f"primary={primary}; cleanup: {e}"[-TAIL:]
    if cancel is not None and cancel.is_set():
        return None
    row["resolved"] = row["ok"] and row["verify_passed"] and row["oracle_passed"] and row["error_kind"] is None
    row["wall_s"] = round(time.monotonic() - start, 3)
    row["recorded_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return CellResult(row, artifacts)
