"""Fresh workspaces for bench cells, in time that does not grow with the target's history.

The pinned tree is exported once (git archive of one commit, or a copy of a plain directory) into a
template: a new parentless git repository holding the tree and the skill family under
`.claude/skills/`, committed with fixed identity and dates, plus for candidate arms one more commit
with the frozen overlay. Each cell then copies the template: no clone, no history, no refs, nothing of
this pipeline.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from collections.abc import Collection, Mapping
from pathlib import Path

from skillevo.core.tasks import Task, agent_config, archive, dir_entries, solved_changes
from skillevo.files import archives
from skillevo.files.errors import BadInput, BrokenEnvironment

_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0",
    "GIT_AUTHOR_NAME": "skillevo", "GIT_AUTHOR_EMAIL": "bench@skillevo.invalid",
    "GIT_COMMITTER_NAME": "skillevo", "GIT_COMMITTER_EMAIL": "bench@skillevo.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}


class WorkspaceError(BrokenEnvironment):
    """git could not build a workspace (a broken or missing git, a full disk)."""


def git(cwd: Path, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent", **_GIT_ENV}
    out = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", *args],
                         cwd=cwd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise WorkspaceError(f"git {' '.join(args)} failed in {cwd}: {out.stderr.strip()[-500:]}")
    return out.stdout.strip()


def export_tree(task: Task, dest: Path) -> None:
    """The task's pinned tree as plain files in `dest` (which must not exist), without what the CLI would load
    as project configuration or the pipeline's own folder (Task.in_workspace): the ref's tree counts, not the
    target's working tree."""
    dest.mkdir(parents=True)
    if task.target_kind == "git":
        with tarfile.open(fileobj=io.BytesIO(archive(task))) as tar:
            archives.extract_tar(tar, dest, [m for m in tar if task.in_workspace(m.name)], f"task {task.id}: target")
        return
    for rel, content in dir_entries(task.target_dir):
        if not task.in_workspace(rel):
            continue
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def export_solved(task: Task, dest: Path) -> None:
    """export_tree with the task's solution applied (skillevo check runs verify and the oracle on it)."""
    export_tree(task, dest)
    for rel, data in solved_changes(task).items():
        path = dest / rel
        if data is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _install(files: Mapping[str, bytes], root: Path, executables: Collection[str]) -> None:
    """Files read by the shared no-follow reader, written into our own fresh template: 0644, or 0755 for the
    executables (git records the bit, and a skill's script must run in every workspace)."""
    for rel, data in sorted(files.items()):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        os.chmod(root / rel, 0o755 if rel in executables else 0o644)


def build_template(tree: Path, family: Mapping[str, bytes], overlay: Mapping[str, bytes] | None, dest: Path,
                   executables: Collection[str] = (), overlay_executables: Collection[str] = ()) -> str:
    """A ready repository at `dest`; returns the commit every cell starts from.

    `family` and `overlay` are `<skill>/<path>` -> bytes, as the shared readers returned them (layout.read_family,
    safefs.read_tree), with the paths that carry an execute bit: the template never walks a tree someone else
    wrote. An overlay file takes its own mode, whatever the file it replaces had.
    """
    shutil.copytree(tree, dest)
    stray = [str(p.relative_to(dest)) for p in dest.rglob("*") if agent_config(str(p.relative_to(dest)))]
    if stray:  # export_tree leaves them out: a tree from anywhere else must not bring them either
        raise BadInput(f"{tree}: holds agent configuration {sorted(stray)[:5]} that would load beside the skills "
                       "under test (rule: skill-free targets)")
    _install(family, dest / ".claude" / "skills", executables)
    git(dest, "init", "-q", "--template=", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "--no-verify", "--allow-empty", "-m", "benchmark task snapshot")
    if overlay is not None:
        _install(overlay, dest / ".claude" / "skills", overlay_executables)
        git(dest, "add", "-A")
        if not git(dest, "status", "--porcelain"):
            raise BadInput("the candidate overlay is byte-identical to the incumbent skills "
                           "(rule: a change is required)")
        git(dest, "commit", "-q", "--no-verify", "-m", "benchmark candidate skill overlay")
    return git(dest, "rev-parse", "HEAD")


def materialize(template: Path, dest: Path) -> None:
    """A cell's own workspace: a copy of the template, with the same mode bits."""
    shutil.copytree(template, dest, symlinks=True)
