"""Removing and sizing a tree an agent wrote: whatever names, depth, modes and kinds it left, the harness's cleanup
removes it and its size counts every byte (a cleanup failure must never become a row's error kind)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from skillevo.core import safefs
from skillevo.core.errors import BadInput
from skillevo.core.limits import Limits
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
    assert watch.exceeded().startswith("disk: the workspace grew by 3 MB"), watch.crossed
    safefs.remove_tree(ws)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to become another user")
def test_remove_tree_as_a_harness_that_is_not_root():
    """Root ignores modes, so the real non-root case runs in a child that drops to another uid and owns the tree,
    as a harness run by a user owns what its sandboxed agent (mapped to that user) wrote."""
    base = Path(tempfile.mkdtemp(prefix="skillevo-nonroot-"))  # pytest's tmp is private to root
    os.chown(base, NOBODY, NOBODY)
    script = (
        "import sys\nfrom pathlib import Path\nsys.path.insert(0, sys.argv[1])\n"
        "from tests.test_safefs import _hostile_tree\nfrom skillevo.core import safefs\n"
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
        "from skillevo.core import safefs\ntree = Path(sys.argv[2])\n"
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


def _tar(*members: tuple[str, str, bytes | str]) -> bytes:
    """A tar of (name, kind, content-or-link-target) members, kind one of file, dir, sym, link, fifo."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, arg in members:
            info = tarfile.TarInfo(name)
            info.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE,
                         "link": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE}[kind]
            info.mode = 0o4777 if kind == "file" else 0o755
            if kind in ("sym", "link"):
                info.linkname = arg
            data = arg if kind == "file" else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return buf.getvalue()


@pytest.mark.parametrize("without_filter", [False, True])
@pytest.mark.parametrize("member", [("a/../../up", "file", b"x"), ("out", "sym", "../x"),
                                    ("abs", "sym", "/etc/passwd"), ("hard", "link", "../x"), ("pipe", "fifo", "")])
def test_extract_tar_refuses_what_would_leave_the_destination(tmp_path, monkeypatch, member, without_filter):
    """The same rules with tarfile's data filter and without it (Python 3.11.0-3.11.3, the image's Debian 3.11.2)."""
    if without_filter:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    with tarfile.open(fileobj=io.BytesIO(_tar(("ok", "file", b"fine"), member))) as tar:
        with pytest.raises((BadInput, getattr(tarfile, "FilterError", BadInput))):
            safefs.extract_tar(tar, tmp_path / "dest", tar.getmembers(), "t")
    assert not (tmp_path / "x").exists() and not (tmp_path / "up").exists()


@pytest.mark.parametrize("without_filter", [False, True])
def test_extract_tar_keeps_files_dirs_and_inner_links_without_special_bits(tmp_path, monkeypatch, without_filter):
    if without_filter:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    data = _tar(("d", "dir", ""), ("d/f", "file", b"hello"), ("d/l", "sym", "f"), ("/abs", "file", b"in"))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        safefs.extract_tar(tar, tmp_path / "dest", tar.getmembers(), "t")
    assert (tmp_path / "dest/d/l").read_bytes() == b"hello" and (tmp_path / "dest/d/l").is_symlink()
    assert (tmp_path / "dest/d/f").stat().st_mode & 0o7777 == 0o755  # setuid and group/other write dropped
    assert (tmp_path / "dest/abs").read_bytes() == b"in"  # an absolute name lands inside
