"""The watchdog's view of a sandbox's process tree: one shared scan of /proc serves every watch in the process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

from skillevo.sandbox import watch


def _child(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", *args])


def test_the_tree_holds_grandchildren_and_a_fresh_scan_sees_a_new_process():
    parent = _child("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; "
                    "time.sleep(30)']); time.sleep(30)")
    try:
        deadline = time.monotonic() + 10
        while len(watch._tree(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(watch._tree(parent.pid)) == 2  # the child's child is in its tree
        cached = watch._TABLE.children(60)
        late = _child("import time; time.sleep(30)")
        try:
            assert watch._TABLE.children(60) is cached  # within max_age: the same scan, no new one
            assert late.pid not in cached.get(os.getpid(), [])
            assert late.pid in watch._TABLE.children(0)[os.getpid()]  # a fresh scan sees it
        finally:
            late.kill()
            late.wait()
    finally:
        for pid in watch._tree(parent.pid, 0)[1:]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()


def test_many_watches_share_scans(monkeypatch):
    scans = []
    real = watch._scan
    monkeypatch.setattr(watch, "_scan", lambda: scans.append(time.monotonic()) or real())
    max_age, calls = 0.05, []

    def poll() -> None:
        for _ in range(10):
            watch._tree(1, max_age)
            calls.append(1)
            time.sleep(0.1)

    threads = [threading.Thread(target=poll) for _ in range(8)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    assert len(calls) == 80
    assert len(scans) <= elapsed / max_age + 1 and len(scans) < len(calls) / 2
    assert all(b - a >= max_age for a, b in zip(scans, scans[1:], strict=False))  # never two scans within max_age


def test_a_stale_scan_never_counts_a_process_that_is_not_the_sandbox_s(monkeypatch):
    """The shared scan may be 50 ms old while the host reuses PIDs: a PID the scan lists under the sandbox's tree but
    that now names an older process, or one whose parent is another, is not the sandbox's (its memory or CPU must
    never stop a cell as if the agent had used them). The sandbox's real child still counts."""
    root = _child("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; "
                  "time.sleep(30)']); time.sleep(30)")
    try:
        deadline = time.monotonic() + 10
        while len(watch._tree(root.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        [real] = watch._tree(root.pid)[1:]
        older = os.getpid()  # started before the root, and its parent is not the root: as a reused PID would be
        stale = {root.pid: [real, older], older: [1]}
        monkeypatch.setattr(watch._TABLE, "children", lambda max_age_s: stale)
        assert sorted(watch._tree(root.pid)) == sorted([root.pid, real])
    finally:
        monkeypatch.undo()
        for pid in watch._tree(root.pid, 0)[1:]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        root.kill()
        root.wait()


def test_the_host_s_tmpfs_is_never_counted_as_the_sandbox_s(tmp_path):
    """A sandbox's mount namespace starts as a copy of the harness's (bwrap unshares, then builds its root): while it
    is set up it lists the host's /dev/shm and /run, whatever other programs keep there (Ray's object store,
    Chromium). Those must never count as the cell's tmpfs use (CI saw an oracle stopped as "limit" that way). Here a
    user namespace plays the host: its own tmpfs holds 8 MB; a child in a mount namespace of its own (a copy, as
    bwrap's is) mounts a tmpfs and writes 3 MB there. Only the child's 3 MB count."""
    host, own = tmp_path / "host", tmp_path / "own"
    host.mkdir()
    own.mkdir()
    probe = (
        "import subprocess, sys\n"
        "from skillevo.sandbox import watch\n"
        f"subprocess.run(['mount', '-t', 'tmpfs', 'none', {str(host)!r}], check=True)\n"
        f"open({str(host / 'held')!r}, 'wb').write(bytes(8 << 20))\n"
        f"child = subprocess.Popen(['unshare', '-m', '--propagation', 'slave', 'sh', '-c', 'mount -t tmpfs none "
        f"{own} && head -c 3145728 /dev/zero > {own}/used && echo ready && exec sleep 30'], stdout=subprocess.PIPE)\n"
        "assert child.stdout.readline() == b'ready\\n'\n"
        "print(watch._tmpfs_used([child.pid]))\n"
        "child.kill()\n")
    done = subprocess.run(["unshare", "-U", "-r", "-m", "--propagation", "private", sys.executable, "-c", probe],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    used = int(done.stdout)
    assert 3 << 20 <= used < 8 << 20, used


def test_a_mount_point_that_now_leads_elsewhere_is_not_measured(monkeypatch):
    """mountinfo and the measurement are two reads: bwrap, setting up, can mount and pivot between them, and the
    listed tmpfs's path then led to the host's root filesystem (CI saw an oracle stopped for 25 GB "grown" in 13
    ms). What is measured must be the device mountinfo listed; here a listing that names a tmpfs at / (the host's
    disk, through the child's root) counts nothing."""
    child = subprocess.Popen(["unshare", "-U", "-r", "-m", "sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while watch._mount_ns(child.pid) == watch._mount_ns(os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.02)
        monkeypatch.setattr(watch, "_tmpfs_mounts", lambda pid: [] if pid == "self" else [("0:999999", "/")])
        assert watch._tmpfs_used([child.pid]) == 0
    finally:
        child.kill()
        child.wait()
