"""What the agent changed: its workspace compared with the template it started from, by the harness alone.

Nothing in the workspace decides what counts: not .gitignore files, not .git/info/exclude, not git config
(git is not run at all). Every path the agent created, changed or deleted is in the numbers and the patch,
except the read-only skills mount (.claude/), the workspace's .git/ (metadata, not the tree under test) and
the declared outputs (params bench.churn_exclude, such as the plan file). Symlinks are compared by target and
never followed; files too large to diff are listed as changed.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from skillevo.files import safefs
from skillevo.files.errors import BadInput

ALWAYS_EXCLUDED = (".claude", ".git")
MAX_DIFF_BYTES = 1 << 20  # per file; larger files are listed, not diffed
MAX_HASH_BYTES = 1 << 20  # per file: what is read of it, whatever its apparent size (sparse regions included)
MAX_PATCH = 1 << 20
MAX_ENTRIES = 200_000  # below one workspace


class ChurnLimit(Exception):
    """Measuring what the agent left crossed a bound (time, entry count): the agent's doing, measured."""


@dataclass(frozen=True)
class Entry:
    kind: str  # file | link | other
    mode: int  # the executable bits of a file
    digest: str  # a file: sha256 of its size and first MAX_HASH_BYTES (and its mtime beyond); a link: of its target
    size: int = 0  # a file's apparent size


def _file_entry(dir_fd: int, name: str, st: os.stat_result) -> Entry:
    """At most MAX_HASH_BYTES read, so a sparse or huge file costs what a small one does; a longer file is also told
    apart by its mtime (the workspace's copy of the template keeps the template's)."""
    digest = hashlib.sha256(f"{st.st_size}\0".encode())
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    try:
        left = MAX_HASH_BYTES
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            digest.update(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    if st.st_size > MAX_HASH_BYTES:
        digest.update(f"\0{st.st_mtime_ns}".encode())
    return Entry("file", stat.S_IMODE(st.st_mode) & 0o111, digest.hexdigest(), st.st_size)


def _excluded(rel: str, exclude: Iterable[str]) -> bool:
    return any(rel == e or rel.startswith(e.rstrip("/") + "/") for e in exclude)


class Clock:
    """One deadline for a whole measurement."""

    def __init__(self, timeout_s: float | None) -> None:
        self.timeout_s = timeout_s
        self.deadline = None if timeout_s is None else time.monotonic() + timeout_s

    def check(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise ChurnLimit(f"measuring the workspace took over {self.timeout_s:g} s (bench.phase_timeout_s)")


def snapshot(root: Path, exclude: tuple[str, ...], *, clock: Clock | None = None,
             max_entries: int = MAX_ENTRIES) -> dict[str, Entry]:
    """Every non-directory entry below `root` (not following links), by relative POSIX path, walked by directory fd
    (safefs.scan: no recursion, no depth or path length stops it), no file content kept, bounded in entries and
    time (ChurnLimit)."""
    clock = clock or Clock(None)
    found: dict[str, Entry] = {}
    skip = (*ALWAYS_EXCLUDED, *exclude)
    for seen, (rel, dir_fd, name, st) in enumerate(safefs.scan(root, skip=lambda rel: _excluded(rel, skip)), 1):
        if seen > max_entries:
            raise ChurnLimit(f"the workspace holds more than {max_entries} entries")
        if seen % 256 == 0:
            clock.check()
        if stat.S_ISDIR(st.st_mode):
            continue
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(name, dir_fd=dir_fd).encode(errors="surrogateescape")
            found[rel] = Entry("link", 0, hashlib.sha256(target).hexdigest(), len(target))
        elif stat.S_ISREG(st.st_mode):
            found[rel] = _file_entry(dir_fd, name, st)
        else:
            found[rel] = Entry("other", 0, f"{stat.S_IFMT(st.st_mode):o}")
    clock.check()
    return found


def _lines(root: Path, rel: str, entry: Entry | None) -> list[str] | None:
    """The entry as diffable lines (a link: its target), read again now (snapshots keep no content), or None when
    it is binary, special or too large."""
    if entry is None:
        return []
    if entry.kind == "other" or entry.size > MAX_DIFF_BYTES:
        return None
    *parents, name = rel.split("/")
    try:
        dir_fd = safefs.open_dir_below(root, parents, str(root))  # by fd, one component at a time: any depth
        try:
            if entry.kind == "link":
                data = os.readlink(name, dir_fd=dir_fd).encode(errors="surrogateescape")
            else:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
                try:
                    data = os.read(fd, MAX_DIFF_BYTES + 1)
                finally:
                    os.close(fd)
        finally:
            os.close(dir_fd)
    except (OSError, BadInput):
        return None
    if len(data) > MAX_DIFF_BYTES or b"\0" in data:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _mode(entry: Entry) -> str:
    return "120000" if entry.kind == "link" else "100755" if entry.mode else "100644"


def _diff(rel: str, old: Entry | None, new: Entry | None, before: Path, after: Path) -> tuple[int, int, str]:
    """(insertions, deletions, git-style patch text) for one path."""
    header = f"diff --git a/{rel} b/{rel}\n"
    if old is None:
        assert new is not None  # measure diffs only a path one side holds
        header += f"new file mode {_mode(new)}\n"
    elif new is None:
        header += f"deleted file mode {_mode(old)}\n"
    elif _mode(old) != _mode(new):
        header += f"old mode {_mode(old)}\nnew mode {_mode(new)}\n"
    a, b = _lines(before, rel, old), _lines(after, rel, new)
    if a is None or b is None:
        return 0, 0, header + f"Binary files a/{rel} and b/{rel} differ\n"
    body = list(difflib.unified_diff(a, b, "/dev/null" if old is None else f"a/{rel}",
                                     "/dev/null" if new is None else f"b/{rel}"))
    body = [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in body]
    ins = sum(1 for line in body if line.startswith("+") and not line.startswith("+++"))
    dels = sum(1 for line in body if line.startswith("-") and not line.startswith("---"))
    return ins, dels, header + "".join(body)


def measure(before: Path, after: Path, exclude: tuple[str, ...], *, timeout_s: float | None = None
            ) -> tuple[dict[str, int], bytes]:
    """({diff_files, diff_insertions, diff_deletions}, patch) of `after` against `before`, within `timeout_s` in all
    (ChurnLimit past it); memory does not grow with the files' sizes, only with their number."""
    clock = Clock(timeout_s)
    old, new = snapshot(before, exclude, clock=clock), snapshot(after, exclude, clock=clock)
    files = ins = dels = size = 0
    parts: list[str] = []
    for rel in sorted(set(old) | set(new)):
        if old.get(rel) == new.get(rel):
            continue
        clock.check()
        i, d, text = _diff(rel, old.get(rel), new.get(rel), before, after)
        files, ins, dels = files + 1, ins + i, dels + d
        if size <= MAX_PATCH:
            parts.append(text)
            size += len(text)
    patch = "".join(parts).encode("utf-8", errors="surrogateescape")
    if len(patch) > MAX_PATCH:
        patch = patch[:MAX_PATCH] + b"\n[skillevo: the patch was cut at 1 MiB]\n"
    return {"diff_files": files, "diff_insertions": ins, "diff_deletions": dels}, patch
