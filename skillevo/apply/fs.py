"""The repository as apply touches it: directories held open by fd, files read with their inode, renameat2.

A transaction must keep writing into the very directories it checked, so it opens the repository root once
and reaches every destination's directory through directory fds, holding them for the swap. Reading a file
is safefs.read_at; apply also needs the inode and mode of what it read (it decides a rollback by inode).
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from skillevo.apply.common import ApplyRefused
from skillevo.core import layout
from skillevo.files import safefs
from skillevo.files.errors import BadInput

TEMP_PREFIX = ".skillevo-apply-"
MAX_FILE_BYTES = layout.MAX_SKILL_FILE_BYTES  # what freeze reads a destination with
RENAME_NOREPLACE = 1  # <linux/fs.h>: fail with EEXIST rather than replace the target
RENAME_EXCHANGE = 2
UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}


def split_relative(rel: str, what: str = "path") -> list[str]:
    """A plain repo-relative POSIX path as components (safefs.plain_parts), refused as ApplyRefused."""
    try:
        return safefs.plain_parts(rel, what)
    except BadInput as e:
        raise ApplyRefused(str(e)) from None


class Tree:
    """A directory opened once; everything below it is reached through directory fds, never by path string."""

    def __init__(self, root: Path):
        self.root = root
        try:
            self.fd = os.open(root, safefs.DIR_FLAGS)
        except OSError as e:
            raise ApplyRefused(f"{root}: cannot open as a directory without following symlinks: {e.strerror}") from e
        self._held: list[int] = []

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in (*self._held, self.fd):
            os.close(fd)
        self._held.clear()

    def open_dir(self, parts: list[str], *, hold: bool = False) -> int:
        """The directory at `parts`; a symlink or non-directory anywhere on the way is refused."""
        try:
            fd = safefs.open_dir_below(self.fd, parts, str(self.root))
        except BadInput as e:
            raise ApplyRefused(f"{e}; apply never follows symlinks") from None
        if hold:
            self._held.append(fd)
        return fd

    def open_existing(self, parts: list[str]) -> tuple[int, int]:
        """The deepest directory of `parts` that exists (held) and how many components it took; a symlink or a
        non-directory on the way is refused like open_dir's."""
        try:
            fd, found = safefs.open_existing_below(self.fd, parts, str(self.root))
        except BadInput as e:
            raise ApplyRefused(f"{e}; apply never follows symlinks") from None
        self._held.append(fd)
        return fd, found

    def hold(self, fd: int) -> None:
        """Close `fd` with the tree (a directory the transaction made and keeps writing into)."""
        self._held.append(fd)

    @contextmanager
    def directory(self, parts: list[str]) -> Iterator[int]:
        fd = self.open_dir(parts)
        try:
            yield fd
        finally:
            os.close(fd)


def read(dir_fd: int | None, name: str | Path, where: str, what: str = "file") -> bytes:
    """safefs.read_at within the skill-file bound; FileNotFoundError passes through."""
    return safefs.read_at(dir_fd, name, where, max_bytes=MAX_FILE_BYTES, what=what)


def read_stat(dir_fd: int, name: str, where: str, what: str = "file") -> tuple[bytes, os.stat_result]:
    """A file's bytes and the stat of that same open file (apply decides a rollback by its inode)."""
    return safefs.read_at_stat(dir_fd, name, where, max_bytes=MAX_FILE_BYTES, what=what)


def renameat2(old_dir: int, old: str, new_dir: int, new: str, flags: int) -> None:
    """libc renameat2 through ctypes (the os module has neither exchange nor no-replace); ENOSYS when libc lacks
    it."""
    fn = getattr(_LIBC, "renameat2", None)
    if fn is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available in this C library")
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    if fn(old_dir, os.fsencode(old), new_dir, os.fsencode(new), flags) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), new)


_LIBC = ctypes.CDLL(None, use_errno=True)
