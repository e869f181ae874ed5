"""The harness's view of what an agent changed, bounded whatever the agent left: a file's apparent size costs no
reading past a fixed prefix, memory does not grow with the files' bytes, and the whole measurement has a
deadline and an entry cap (crossing one is the agent's measured failure, raised as ChurnLimit)."""

from __future__ import annotations

import shutil
import tracemalloc
from pathlib import Path

import pytest

from skillevo.bench import churn


def _bytes_read() -> int:
    """What this process has read through system calls so far (the kernel's count, /proc/self/io rchar)."""
    return int(next(line for line in Path("/proc/self/io").read_text().splitlines()
                    if line.startswith("rchar:")).split()[1])


def _template(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg/a.py").write_text("x = 1\n")
    (root / "big.bin").write_bytes(b"\1" * (3 << 20))
    return root


def _workspace(template: Path, dest: Path) -> Path:
    shutil.copytree(template, dest, symlinks=True)  # as workspace.materialize does: mtimes kept
    return dest


def test_sparse_files_are_read_only_up_to_the_hash_prefix(tmp_path):
    """120 sparse files of 255 MB (no blocks, so no disk limit is crossed): the old snapshot read and hashed every
    apparent byte, 30 GB; now each costs at most MAX_HASH_BYTES of reading."""
    before = _template(tmp_path / "tpl")
    after = _workspace(before, tmp_path / "ws")
    for i in range(120):
        with open(after / f"sparse{i}", "wb") as f:
            f.truncate(255 << 20)
    read = _bytes_read()
    stats, patch = churn.measure(before, after, ())
    read = _bytes_read() - read
    assert stats["diff_files"] == 120
    assert read <= (120 + 2 * 3) * (churn.MAX_HASH_BYTES + 1) + (1 << 20), read  # the new files, the template's
    assert b"Binary files a/sparse0 and b/sparse0 differ" in patch


def test_memory_does_not_grow_with_the_bytes_of_many_files(tmp_path):
    """300 files of exactly 1 MiB (each under the diff limit): the old snapshot kept every one in memory until the
    end (300 MiB); now nothing of a file's content outlives its own hash or diff."""
    before = _template(tmp_path / "tpl")
    after = _workspace(before, tmp_path / "ws")
    for i in range(300):
        (after / f"text{i}.txt").write_bytes((b"x" * 1023 + b"\n") * (churn.MAX_DIFF_BYTES // 1024))
    tracemalloc.start()
    try:
        stats, _ = churn.measure(before, after, ())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert stats["diff_files"] == 300 and stats["diff_insertions"] == 300 * 1024
    assert peak < 64 << 20, f"{peak >> 20} MiB"


def test_a_change_past_the_hash_prefix_is_seen(tmp_path):
    before = _template(tmp_path / "tpl")
    after = _workspace(before, tmp_path / "ws")
    assert churn.measure(before, after, ())[0]["diff_files"] == 0  # a copy keeps size and mtime: unchanged
    with open(after / "big.bin", "r+b") as f:
        f.seek(2 << 20)
        f.write(b"\2")  # same size, same first MiB, a new mtime
    stats, patch = churn.measure(before, after, ())
    assert stats["diff_files"] == 1 and b"Binary files a/big.bin and b/big.bin differ" in patch


def test_the_measurement_has_a_deadline_and_an_entry_cap(tmp_path):
    before = _template(tmp_path / "tpl")
    after = _workspace(before, tmp_path / "ws")
    for i in range(600):
        (after / f"f{i}").write_text("x")
    with pytest.raises(churn.ChurnLimit, match=r"measuring the workspace took over 0 s \(bench.phase_timeout_s\)"):
        churn.measure(before, after, (), timeout_s=0)
    with pytest.raises(churn.ChurnLimit, match="more than 100 entries"):
        churn.snapshot(after, (), max_entries=100)
    assert churn.measure(before, after, (), timeout_s=600)[0]["diff_files"] == 600


def test_a_tree_past_path_max_is_measured_one_directory_at_a_time(tmp_path):
    """20 directories of 250-byte names hold a 3 MiB blob: its path is past PATH_MAX, where a path-based walk fails;
    the snapshot and the diff go by directory fd."""
    from tests.test_safefs import LONG, _hostile_tree

    before = _template(tmp_path / "tpl")
    after = _workspace(before, tmp_path / "ws")
    _hostile_tree(after / "deep")
    (after / "deep/locked").chmod(0o700)  # root reads mode-000 anyway; the non-root case is test_measured_failures'
    (after / "deep/locked/inner").chmod(0o700)
    stats, patch = churn.measure(before, after, ())
    deep = "deep/" + "/".join([LONG] * 20) + "/deep-blob"
    assert len(deep) > 4096 and f"diff --git a/{deep} b/{deep}".encode() in patch
    assert stats["diff_files"] == 6  # the blob, locked/inner/secret, frozen/f, nomode, fifo, dangling
