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
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ALWAYS_EXCLUDED = (".claude", ".git")
MAX_DIFF_BYTES = 1 << 20  # per file; larger files are listed, not diffed
MAX_PATCH = 1 << 20


@dataclass(frozen=True)
class Entry:
    kind: str  # file | link | other
    mode: int  # the executable bits of a file
    digest: str  # sha256 of the bytes or of the link target
    data: bytes | None = field(default=None, compare=False)  # the bytes when small enough to diff


def _file_entry(path: str, mode: int) -> Entry:
    digest, data, size = hashlib.sha256(), bytearray(), 0
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
            if size <= MAX_DIFF_BYTES:
                data += chunk
    return Entry("file", mode, digest.hexdigest(), bytes(data) if size <= MAX_DIFF_BYTES else None)


def _excluded(rel: str, exclude: Iterable[str]) -> bool:
    return any(rel == e or rel.startswith(e.rstrip("/") + "/") for e in exclude)


def snapshot(root: Path, exclude: tuple[str, ...]) -> dict[str, Entry]:
    """Every non-directory entry below `root` (not following links), by relative POSIX path."""
    found: dict[str, Entry] = {}
    stack = [""]
    while stack:
        prefix = stack.pop()
        with os.scandir(root / prefix if prefix else root) as entries:
            for entry in entries:
                rel = f"{prefix}{entry.name}"
                if _excluded(rel, (*ALWAYS_EXCLUDED, *exclude)):
                    continue
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    stack.append(rel + "/")
                elif stat.S_ISLNK(st.st_mode):
                    target = os.readlink(entry.path).encode(errors="surrogateescape")
                    found[rel] = Entry("link", 0, hashlib.sha256(target).hexdigest(), target)
                elif stat.S_ISREG(st.st_mode):
                    found[rel] = _file_entry(entry.path, stat.S_IMODE(st.st_mode) & 0o111)
                else:
                    found[rel] = Entry("other", 0, f"{stat.S_IFMT(st.st_mode):o}")
    return found


def _lines(entry: Entry | None) -> list[str] | None:
    """The entry as diffable lines (a link: its target), or None when it is binary, special or too large."""
    if entry is None:
        return []
    if entry.kind == "other" or entry.data is None or b"\0" in entry.data:
        return None
    try:
        return entry.data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _mode(entry: Entry) -> str:
    return "120000" if entry.kind == "link" else "100755" if entry.mode else "100644"


def _diff(rel: str, old: Entry | None, new: Entry | None) -> tuple[int, int, str]:
    """(insertions, deletions, git-style patch text) for one path."""
    header = f"diff --git a/{rel} b/{rel}\n"
    if old is None:
        header += f"new file mode {_mode(new)}\n"
    elif new is None:
        header += f"deleted file mode {_mode(old)}\n"
    elif _mode(old) != _mode(new):
        header += f"old mode {_mode(old)}\nnew mode {_mode(new)}\n"
    a, b = _lines(old), _lines(new)
    if a is None or b is None:
        return 0, 0, header + f"Binary files a/{rel} and b/{rel} differ\n"
    body = list(difflib.unified_diff(a, b, "/dev/null" if old is None else f"a/{rel}",
                                     "/dev/null" if new is None else f"b/{rel}"))
    body = [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in body]
    ins = sum(1 for line in body if line.startswith("+") and not line.startswith("+++"))
    dels = sum(1 for line in body if line.startswith("-") and not line.startswith("---"))
    return ins, dels, header + "".join(body)


def measure(before: Path, after: Path, exclude: tuple[str, ...]) -> tuple[dict[str, int], bytes]:
    """({diff_files, diff_insertions, diff_deletions}, patch) of `after` against `before`."""
    old, new = snapshot(before, exclude), snapshot(after, exclude)
    files = ins = dels = 0
    parts: list[str] = []
    for rel in sorted(set(old) | set(new)):
        if old.get(rel) == new.get(rel):
            continue
        i, d, text = _diff(rel, old.get(rel), new.get(rel))
        files, ins, dels = files + 1, ins + i, dels + d
        parts.append(text)
    patch = "".join(parts).encode("utf-8", errors="surrogateescape")
    if len(patch) > MAX_PATCH:
        patch = patch[:MAX_PATCH] + b"\n[skillevo: the patch was cut at 1 MiB]\n"
    return {"diff_files": files, "diff_insertions": ins, "diff_deletions": dels}, patch
