"""The watchdog that enforces per-cell limits (skillevo.core.limits) wherever skillevo runs: as root or not, with or
without cgroups.

cgroups are not available to a rootless container without delegation, and RLIMIT_NPROC counts every process of
the user across all cells, so the limits a cell shares with nobody are enforced here:

- kernel limits, inherited by every process in the sandbox: RLIMIT_FSIZE (one file) and RLIMIT_CPU (one
  process), set by `prlimit` before bwrap starts; /tmp, HOME and /dev/shm are tmpfs mounts of a fixed size (bwrap
  --size), the root and /dev read-only;
- a watchdog over the sandbox's process tree and every host directory it may write (the workspace, the oracle's
  report directory, the relay's socket directory), polled while it runs: processes, private memory, CPU time of
  the whole tree, and those directories' growth on disk with what the tmpfs mounts hold (host memory, read through
  the sandbox's first process). The first limit crossed stops the
  whole sandbox and is reported, so the cell is a measured failure of its own making, never a neighbour's.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from skillevo.core.limits import Limits
from skillevo.files.safefs import allocated  # by directory fd: a flood hidden past PATH_MAX still counts

_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = os.sysconf("SC_CLK_TCK")
PROC_POLL_S = 0.1
DISK_POLL_S = 0.25


class _ProcessTable:
    """The host's map of parent -> child PIDs, shared by every watch in this process. A scan reads the stat of
    every process on the machine, whoever owns it; with many cells at once, one scan per half poll interval
    serves them all (measured with `make bench-cells` under model latency: the watches' own scans were most of
    this process's CPU at 8 workers). A watch thus sees the tree at most half an interval late."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken = float("-inf")
        self._children: dict[int, list[int]] = {}

    def children(self, max_age_s: float) -> dict[int, list[int]]:
        with self._lock:
            if time.monotonic() - self._taken >= max_age_s:
                self._taken = time.monotonic()
                self._children = _scan()
            return self._children


def _scan() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    return children


_TABLE = _ProcessTable()


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent PID, start time in clock ticks since boot) as /proc says now; None once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _tree(root: int, max_age_s: float = 0.0) -> list[int]:
    """`root` and every process it started, theirs, and so on, as the host sees them: processes in nested PID
    namespaces (the CLI's own sandbox for tool calls) are counted too, and an orphan is reparented to the
    sandbox's init, so nothing leaves the tree while the sandbox lives. The shared scan may be up to `max_age_s`
    old, and a busy host reuses PIDs (pid_max 32,768 wraps in minutes): a listed child counts only while /proc
    still shows it under its listed parent (or reparented to `root`) and started no earlier than `root`, so a PID
    that now names someone else's process is never counted against this sandbox."""
    children = _TABLE.children(max_age_s)
    rooted = _stat(root)
    if rooted is None:
        return [root]  # gone: nothing of it left to count
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        for child in children.get(pid, []):
            now = _stat(child)
            if now is not None and now[0] in (pid, root) and now[1] >= rooted[1]:
                todo.append(child)
    return found


def _mount_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def _tmpfs_mounts(pid: int | str) -> list[tuple[str, str]]:
    """(device, mount point) of every tmpfs in the mount namespace of `pid`, as its mountinfo lists them."""
    try:
        with open(f"/proc/{pid}/mountinfo", "rb") as f:
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split()
        rest = fields[fields.index("-") + 1:] if "-" in fields else []
        if len(fields) >= 5 and rest and rest[0] == "tmpfs":
            found.append((fields[2], re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])))
    return found


def _tmpfs_used(pids: list[int]) -> int:
    """Bytes held by the tmpfs mounts the processes `pids` can see, each mount counted once (by its device). The
    mounts of this process's own namespace are the host's, never the sandbox's: a sandbox's namespace starts as a
    copy of them (bwrap unshares, then builds its root), so while it is being set up it lists the host's /dev/shm,
    /run and /tmp, whatever other programs keep there; those devices are left out wherever they appear."""
    own = _mount_ns(os.getpid())
    devices = {device for device, _ in _tmpfs_mounts("self")}  # the host's, left out
    namespaces: set[str] = set()
    used = 0
    for pid in pids:
        ns = _mount_ns(pid)
        if ns is None or ns == own or ns in namespaces:
            continue
        namespaces.add(ns)
        for device, point in _tmpfs_mounts(pid):
            if device not in devices and (held := _held(pid, point, device)) is not None:
                devices.add(device)
                used += held
    return used


def _held(pid: int, point: str, device: str) -> int | None:
    """What the tmpfs `device` that mountinfo lists at `point` holds, read through `pid`'s root; None when that path
    no longer leads to it (the namespace changed between the two reads: bwrap, setting up, mounted and pivoted in
    between, and the path led to the host's root filesystem, 25 GB "grown" in 13 ms)."""
    try:
        fd = os.open(f"/proc/{pid}/root{point}", os.O_PATH | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}" != device:
            return None
        vfs = os.fstatvfs(fd)
    finally:
        os.close(fd)
    return (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize


def _usage(pid: int) -> tuple[int, float] | None:
    """(private resident bytes, CPU seconds of the process and its reaped children)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            fields = f.read().split()
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None  # it exited between the scan and the read
    private = (int(fields[1]) - int(fields[2])) * _PAGE
    ticks = sum(int(stat[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    return private, ticks / _TICK


class Watch:
    """Which limit the sandbox crossed first, if any; `init` is the PID of its namespace's first process."""

    def __init__(self, limits: Limits, init: Callable[[], int | None], workspace: Path | None,
                 writable: tuple[Path, ...] = ()) -> None:
        """`workspace` and `writable` (every other host directory mounted writable: the oracle's report directory,
        the relay's socket directory) share the disk limit with the sandbox's tmpfs mounts: code in the sandbox
        can fill any of them."""
        self.limits, self._init = limits, init
        self.dirs = (*((workspace,) if workspace is not None else ()), *writable)
        self.what = ("the workspace and the sandbox's other writable mounts" if workspace is not None else
                     "the sandbox's writable mounts")
        self._baseline = self._allocated()
        self._next_proc = self._next_disk = 0.0
        self.crossed: str | None = None

    def _allocated(self) -> int:
        return sum(allocated(d) for d in self.dirs)

    def exceeded(self) -> str | None:
        if self.crossed is None:
            now = time.monotonic()
            if now >= self._next_proc:
                self._next_proc = now + PROC_POLL_S
                self.crossed = self._check_processes()
            if self.crossed is None and now >= self._next_disk:
                self._next_disk = now + DISK_POLL_S
                grown = self._allocated() - self._baseline + self._tmpfs()
                if grown > self.limits.disk_mb << 20:
                    self.crossed = (f"disk: {self.what} grew by {grown >> 20} MB, over bench.limits.disk_mb "
                                    f"{self.limits.disk_mb}")
        return self.crossed

    def _tmpfs(self) -> int:
        """What every tmpfs in the sandbox holds (host memory): its own sized mounts and any a tool inside mounts
        (the CLI's inner sandbox makes a /dev and scratch directories of its own, none sized), read through a
        process of each mount namespace in the tree; the harness's own namespace is never read."""
        init = self._init()
        return 0 if init is None else _tmpfs_used(_tree(init, PROC_POLL_S / 2))

    def _check_processes(self) -> str | None:
        init = self._init()
        if init is None:
            return None
        pids = _tree(init, PROC_POLL_S / 2)
        if len(pids) > self.limits.processes:
            return f"processes: {len(pids)} alive, over bench.limits.processes {self.limits.processes}"
        memory = cpu = 0.0
        for pid in pids:
            usage = _usage(pid)
            if usage is not None:
                memory += usage[0]
                cpu += usage[1]
        if memory > self.limits.memory_mb << 20:
            return f"memory: {int(memory) >> 20} MB private, over bench.limits.memory_mb {self.limits.memory_mb}"
        if cpu > self.limits.cpu_s:
            return f"cpu: {cpu:.0f} s, over bench.limits.cpu_s {self.limits.cpu_s}"
        return None
