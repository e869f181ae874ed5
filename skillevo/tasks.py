"""Benchmark tasks: load tasks.yaml, refuse anything unsafe, and pin each task to exact bytes.

A *task binding* says exactly what was measured: the target's tree (a git commit, or a content digest
for a plain directory), the sha256 of the prompt, setup, verify and oracle command, and every hidden
oracle file's target, sha256 and size. Bindings are computed once per generation; a run whose inputs
drift from its bindings is not comparable with the others.
"""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from skillevo.digests import framed_digest, sha256_bytes, sha256_json, sha256_text
from skillevo.schemas import InvalidDocument, validate

MAX_ORACLE_FILE = 512 << 10
MAX_ORACLE_TOTAL = 2 << 20
IGNORED_DIRS = {"__pycache__", ".pytest_cache"}  # tool caches a developer may leave in a target


class TaskError(InvalidDocument):
    """A task definition is unsafe or inconsistent; the message names the task, the field and the rule."""


@dataclass(frozen=True)
class Task:
    id: str
    cls: str
    prompt: str
    setup: str | None
    verify: str
    oracle_command: str
    oracle_files: tuple[tuple[str, bytes], ...]  # (target, bytes), sorted by target
    expensive: bool
    timeout_s: int
    target_dir: Path
    target_kind: str  # git | dir
    tree: str  # commit (git) or content digest (dir)
    binding: dict[str, Any]

    @property
    def binding_digest(self) -> str:
        return sha256_json(self.binding)


def _fail(task_id: str, field: str, rule: str, source: Path) -> TaskError:
    return TaskError(f"{source}: task {task_id!r}: {field}: {rule}")


def _no_symlink_below(root: Path, rel: str) -> Path:
    """Resolve root/rel refusing a symlink in any component (so `..` cannot be reached through one)."""
    path = root
    for part in Path(rel).parts:
        path = path / part
        if path.is_symlink():
            raise ValueError(f"{path} is a symlink")
    return path


def dir_entries(root: Path) -> list[tuple[str, bytes]]:
    """Every regular file under a plain-directory target; anything else is refused."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_DIRS)
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISLNK(st.st_mode):
                raise ValueError(f"{os.path.join(dirpath, name)} is a symlink")
            if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                raise ValueError(f"{os.path.join(dirpath, name)} is not a regular file")
        for name in filenames:
            full = Path(dirpath, name)
            entries.append((full.relative_to(root).as_posix(), full.read_bytes()))
    return entries


def _resolve_target(raw: dict, base: Path, source: Path) -> tuple[Path, str, str]:
    tid = raw["id"]
    target = (base / raw["target"]).absolute()
    if target.is_symlink() or not target.is_dir():
        raise _fail(tid, "target", f"{raw['target']} must be an existing directory, not a symlink", source)
    if (target / ".claude").exists():
        raise _fail(tid, "target", "the target contains .claude/; the bench installs the skills itself", source)
    if (target / ".git").exists():
        ref = raw.get("ref", "HEAD")
        out = subprocess.run(["git", "-C", str(target), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise _fail(tid, "ref", f"{ref!r} does not name a commit in {raw['target']}", source)
        return target, "git", out.stdout.strip()
    if "ref" in raw:
        raise _fail(tid, "ref", "ref applies to git targets only; this target is a plain directory", source)
    try:
        return target, "dir", framed_digest(dir_entries(target))
    except (ValueError, OSError) as e:
        raise _fail(tid, "target", f"refused: {e}", source) from None


def _oracle_files(raw: dict, oracle_root: Path, source: Path) -> tuple[tuple[str, bytes], ...]:
    tid, files = raw["id"], raw["oracle"]["files"]
    for key in ("source", "target"):
        names = [f[key] for f in files]
        if len(set(names)) != len(names):
            raise _fail(tid, f"oracle.files[].{key}", "must be unique", source)
    out, total = [], 0
    for f in files:
        try:
            path = _no_symlink_below(oracle_root, f["source"])
        except ValueError as e:
            raise _fail(tid, "oracle.files[].source", f"refused: {e}", source) from None
        if not path.is_file():
            raise _fail(tid, "oracle.files[].source", f"{f['source']} is missing or not a regular file", source)
        data = path.read_bytes()
        total += len(data)
        if len(data) > MAX_ORACLE_FILE or total > MAX_ORACLE_TOTAL:
            raise _fail(tid, "oracle.files", f"oracle files exceed {MAX_ORACLE_FILE} bytes each / {MAX_ORACLE_TOTAL} in all", source)
        out.append((f["target"], data))
    return tuple(sorted(out))


def load(path: str | Path, *, default_timeout_s: int = 1800) -> list[Task]:
    """Every task of a tasks file, validated and bound."""
    source = Path(path)
    try:
        doc = yaml.safe_load(source.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise TaskError(f"{source}: cannot read tasks: {e}") from None
    validate(doc, "tasks.schema.json", source)
    base, oracle_root = source.parent, source.parent / "oracles"
    tasks, seen = [], set()
    for raw in doc["tasks"]:
        if raw["id"] in seen:
            raise _fail(raw["id"], "id", "duplicate task id", source)
        seen.add(raw["id"])
        target, kind, tree = _resolve_target(raw, base, source)
        oracle = _oracle_files(raw, oracle_root, source)
        binding = {
            "id": raw["id"],
            "class": raw["class"],
            "expensive": bool(raw.get("expensive", False)),
            "timeout_s": int(raw.get("timeout_s", default_timeout_s)),
            "target": {"kind": kind, "path": raw["target"], "tree": tree},
            "prompt_sha256": sha256_text(raw["prompt"]),
            "setup_sha256": sha256_text(raw["setup"]) if "setup" in raw else None,
            "verify_sha256": sha256_text(raw["verify"]),
            "oracle_command_sha256": sha256_text(raw["oracle"]["command"]),
            "oracle_files": [{"target": t, "sha256": sha256_bytes(d), "size": len(d)} for t, d in oracle],
        }
        tasks.append(Task(id=raw["id"], cls=raw["class"], prompt=raw["prompt"], setup=raw.get("setup"),
                          verify=raw["verify"], oracle_command=raw["oracle"]["command"], oracle_files=oracle,
                          expensive=binding["expensive"], timeout_s=binding["timeout_s"], target_dir=target,
                          target_kind=kind, tree=tree, binding=binding))
    return tasks


def select(tasks: list[Task], include_expensive: bool) -> tuple[list[Task], list[dict[str, str]]]:
    """(tasks to run, skipped tasks with the reason) — reports list what was skipped."""
    chosen = [t for t in tasks if include_expensive or not t.expensive]
    skipped = [{"id": t.id, "reason": "expensive: true (pass --include-expensive to run it)"}
               for t in tasks if t.expensive and not include_expensive]
    if not chosen:
        raise TaskError("no task left to run after skipping expensive tasks")
    return chosen, skipped
