"""Unpacking a tar into a directory under tarfile's "data" filter, on every Python skillevo supports: a git target's
pinned tree arrives as `git archive` output, and its members are the repository's, not ours to trust."""

from __future__ import annotations

import posixpath
import tarfile
from pathlib import Path

from skillevo.files.errors import BadInput


def extract_tar(tar: tarfile.TarFile, dest: str | Path, members: list[tarfile.TarInfo], where: str) -> None:
    """Extract `members` into `dest` under tarfile's "data" filter, or, on a Python without it (3.11.0 to 3.11.3:
    Debian 12's 3.11.2, the container image's), its rules checked here: names made relative, no `..` name, no link that
    leaves `dest`, no device or FIFO, no setuid, setgid or sticky bit, no group or other write."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, members=members, filter="data")
        return
    for m in members:
        m.name = name = m.name.lstrip("/").rstrip("/")  # as the filter does: an absolute name lands inside dest
        bad = ".." in name.split("/")
        if m.issym():
            bad |= m.linkname.startswith("/") or posixpath.normpath(
                posixpath.join(posixpath.dirname(name), m.linkname)).split("/")[0] == ".."
        elif m.islnk():
            bad |= m.linkname.startswith("/") or ".." in m.linkname.split("/")
        elif not (m.isfile() or m.isdir()):
            bad = True
        if bad:
            raise BadInput(f"{where}: {m.name!r} would leave {dest} or is not a file, directory or link inside it "
                           "(rule: the data filter)")
        m.mode &= 0o755
        m.uid = m.gid = 0
        m.uname = m.gname = ""
    tar.extractall(dest, members=members)
