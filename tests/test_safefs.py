"""Removing and sizing a tree an agent wrote: whatever names, depth, modes and kinds it left, the harness's cleanup
removes it and its size counts every byte (a cleanup failure must never become a row's error kind)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from skillevo.core.limits import Limits
from skillevo.files import safefs
from skillevo.sandbox.watch import DISK_POLL_S, Watch

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534
LONG = "n" * 250


def _hostile_tree(root: Path) -> Path:
    """A tree as an agent could leave it: a path over PATH_MAX, mode-000 files and directories, a read-only
    directory, a fifo, a dangling link and a link to a directory outside (never followed)."""
    root.mkdir()
    fd = os.open(root, os.O_RDONLY)
    for _ in range(20):  # 20 x 251 bytes: past PATH_MAX (4096), reachable only one directory at a time
        os.mkdir(LONG, dir_fd=fd)
        child = os.open(LONG, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    data = os.open("deep-blob", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
    os.write(data, b"x" * (3 << 20))
    os.close(data)
    os.close(fd)
    (root / "locked/inner").mkdir(parents=True)
    (root / "locked/inner/secret").write_text("x")
    (root / "locked/inner/secret").chmod(0)
    (root / "locked/inner").chmod(0)
    (root / "locked").chmod(0)
    (root / "frozen").mkdir()
    (root / "frozen/f").write_text("x")
    (root / "frozen").chmod(0o555)
    (root / "nomode").write_text("x")
    (root / "nomode").chmod(0)
    os.mkfifo(root / "fifo")
    (root / "dangling").symlink_to("/nonexistent/x")
    return root


def test_remove_tree_removes_whatever_an_agent_left(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    tree = _hostile_tree(tmp_path / "tree")
    (tree / "link-out").symlink_to(outside)
    safefs.remove_tree(tree)
    assert not tree.exists() and not tree.is_symlink()
    assert (outside / "keep").read_text() == "keep"  # the link was removed, never followed


def test_a_flood_hidden_past_path_max_still_counts_toward_the_disk_limit(tmp_path):
    """The watch sizes the workspace with allocated(): a path walk (as it once did) stops at PATH_MAX and missed
    every byte below."""
    ws = tmp_path / "ws"
    ws.mkdir()
    watch = Watch(Limits(processes=64, memory_mb=512, cpu_s=60, disk_mb=2, tmp_mb=8, file_mb=8), lambda: None, ws)
    assert watch.exceeded() is None
    _hostile_tree(ws / "tree")
    assert safefs.allocated(ws) >= 3 << 20
    time.sleep(DISK_POLL_S)
    assert watch.exceeded().startswith("disk: the workspace and the sandbox's other writable mounts grew by 3 MB"), \
        watch.crossed
    safefs.remove_tree(ws)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to become another user")
def test_remove_tree_as_a_harness_that_is_not_root():
    """Root ignores modes, so the real non-root case runs in a child that drops to another uid and owns the tree,
    as a harness run by a user owns what its sandboxed agent (mapped to that user) wrote."""
    base = Path(tempfile.mkdtemp(prefix="skillevo-nonroot-"))  # pytest's tmp is private to root
    os.chown(base, NOBODY, NOBODY)
    script = (
        "import sys\nfrom pathlib import Path\nsys.path.insert(0, sys.argv[1])\n"
        "from tests.test_safefs import _hostile_tree\nfrom skillevo.files import safefs\n"
        "tree = _hostile_tree(Path(sys.argv[2]) / 'tree')\n"
        "try:\n    (tree / 'locked/inner/secret').read_text()\n    print('read')\n"
        "except PermissionError:\n    print('refused')\n"
        "safefs.remove_tree(tree)\nprint('gone' if not tree.exists() else 'left')\n"
    )
    done = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable,
                           "-c", script, str(ROOT), str(base)], capture_output=True, text=True, timeout=120,
                          env={"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1"})
    try:
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["refused", "gone"]  # the modes bit, and the removal coped with them
    finally:
        safefs.remove_tree(base)


def _deep(root: Path, depth: int) -> None:
    """`depth` nested directories with a file at the bottom, made one directory fd at a time (deeper than
    Python's recursion limit, and than the fds a process may hold below)."""
    root.mkdir()
    fd = os.open(root, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    blob = os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(blob, b"x" * 8192)
    os.close(blob)
    os.close(fd)


def test_a_tree_deeper_than_recursion_and_fd_limits_is_walked_sized_and_removed(tmp_path):
    """1,500 levels under a limit of 64 open files: the walk, the disk count and the removal hold one directory fd
    at a time and never recurse (an os.walk raised RecursionError here, and an fd per level ran out)."""
    _deep(tmp_path / "tree", 1500)
    script = (
        "import resource, sys\nfrom pathlib import Path\nsys.path.insert(0, sys.argv[1])\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
        "from skillevo.files import safefs\ntree = Path(sys.argv[2])\n"
        "print(list(safefs.walk(tree)) == ['d/' * 1500 + 'bottom'])\n"
        "print(safefs.allocated(tree) >= 8192 + 1500 * 4096)\n"
        "safefs.remove_tree(tree)\nprint(not tree.exists())\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", script, str(ROOT), str(tmp_path / "tree")], capture_output=True,
                              text=True, timeout=300, env={"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1"})
    finally:  # never left for pytest's own cleanup of old temp dirs, which recurses (shutil.rmtree)
        safefs.remove_tree(tmp_path / "tree")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True", "True"], done.stdout

