"""The filesystem rules every stage shares: walk without following links, read within bounds, write durably.

Everything an agent or a teammate could have touched is read here: a symlink or a device where a file should
be is refused (naming the path and the rule), a file over its limit is never read whole, and a write either
lands completely (fsynced, renamed into place, directory fsynced) or not at all.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path

from skillevo.files.errors import BadInput

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class TooLarge(BadInput):
    """A file over the limit its reader allows; refused before it is read whole."""


_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _kind(st: os.stat_result) -> str:
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink (rule: no symlinks)"
    return "is not a regular file (rule: no devices, fifos or sockets)"


def read_at_stat(dir_fd: int | None, name: str | Path, where: str, *, max_bytes: int,
                 what: str = "file") -> tuple[bytes, os.stat_result]:
    """A regular file's bytes and the fstat of the very file read, opened without following a link, refused
    past `max_bytes`. FileNotFoundError passes through (callers decide whether missing is an error); every other
    refusal is BadInput naming `where`."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise BadInput(f"{where}: {what} is a symlink (rule: no symlinks)") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"{where}: {what} {_kind(st)}")
        if st.st_size > max_bytes:
            raise TooLarge(f"{where}: {what} is {st.st_size} bytes, over the limit of {max_bytes} (rule: size limit)")
        chunks, total = [], 0
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if total > max_bytes:  # it grew while we read
                raise TooLarge(f"{where}: {what} is over the limit of {max_bytes} bytes (rule: size limit)")
            chunks.append(chunk)
        return b"".join(chunks), st
    finally:
        os.close(fd)


def read_at(dir_fd: int | None, name: str | Path, where: str, *, max_bytes: int, what: str = "file") -> bytes:
    """read_at_stat without the stat."""
    return read_at_stat(dir_fd, name, where, max_bytes=max_bytes, what=what)[0]


def read_file(path: str | Path, *, max_bytes: int, what: str = "file") -> bytes:
    """read_at for a path; a missing file is BadInput too (callers that allow absence check first)."""
    try:
        return read_at(None, path, str(path), max_bytes=max_bytes, what=what)
    except FileNotFoundError:
        raise BadInput(f"{path}: {what} does not exist (rule: inputs exist)") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: {what} is a directory, not a file") from None


def plain_parts(rel: str, where: str) -> list[str]:
    """A relative POSIX path as its components; anything that could leave the root ('/', '.', '..', empty parts,
    NUL) is BadInput naming `where`."""
    parts = rel.split("/")
    if not rel or "\0" in rel or any(p in ("", ".", "..") for p in parts):
        raise BadInput(f"{where}: {rel!r} is not a plain relative path (rule: no '/', '.', '..' or empty parts)")
    return parts


def open_dir_below(root: str | Path | int, parts: list[str], where: str) -> int:
    """An fd of root/parts..., each component opened with O_NOFOLLOW, so no link on the way is followed.

    `root` is a path or an fd the caller holds (it stays open). Refusals name `<where>/<component>`.
    """
    fd, found = open_existing_below(root, parts, where)
    if found < len(parts):
        os.close(fd)
        raise BadInput(f"{'/'.join(parts[: found + 1])}: does not exist (under {where})")
    return fd


def open_existing_below(root: str | Path | int, parts: list[str], where: str) -> tuple[int, int]:
    """open_dir_below as far as the directories exist: an fd of the deepest existing one and how many components
    it took. A missing component ends the walk (a caller that will create the rest decides); a symlink or a
    non-directory on the way is still BadInput."""
    fd = os.dup(root) if isinstance(root, int) else os.open(root, DIR_FLAGS)
    try:
        for i, part in enumerate(parts):
            if part in ("", ".", ".."):
                raise BadInput(f"{where}: not a plain relative path (rule: no '.', '..' or empty parts)")
            sub = "/".join(parts[: i + 1])
            try:
                st = os.lstat(part, dir_fd=fd)
            except FileNotFoundError:
                return fd, i
            if not stat.S_ISDIR(st.st_mode):
                raise BadInput(f"{sub}: {_kind(st) if stat.S_ISLNK(st.st_mode) else 'is not a directory'}")
            child = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd, len(parts)


def read_below(root: str | Path, rel: str, *, max_bytes: int, what: str = "file") -> bytes:
    """root/rel read without following a link in any component of rel; missing is BadInput."""
    where = f"{root}/{rel}"
    parts = plain_parts(rel, where)
    try:
        fd = open_dir_below(root, parts[:-1], str(root))
        try:
            return read_at(fd, parts[-1] or ".", where, max_bytes=max_bytes, what=what)
        finally:
            os.close(fd)
    except FileNotFoundError:
        raise BadInput(f"{where}: {what} does not exist (rule: inputs exist)") from None
    except IsADirectoryError:
        raise BadInput(f"{where}: {what} is a directory, not a file") from None


def decode(data: bytes, where: str, what: str = "file", *, allow_nul: bool = True) -> str:
    """UTF-8 text or BadInput naming where the first bad byte is."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"{where}: {what} is not UTF-8 text (bad byte at offset {e.start}) (rule: UTF-8)") from None
    if not allow_nul and "\0" in text:
        raise BadInput(f"{where}: {what} holds a NUL byte at offset {text.index(chr(0))} (rule: text without NUL)")
    return text


def read_text(path: str | Path, *, max_bytes: int, what: str = "file", allow_nul: bool = True) -> str:
    return decode(read_file(path, max_bytes=max_bytes, what=what), str(path), what, allow_nul=allow_nul)


def scan(root: str | Path, *, skip: Callable[[str], bool] = lambda rel: False, strict: bool = True,
         ) -> Iterator[tuple[str, int, str, os.stat_result]]:
    """(relative POSIX path, its directory's fd, its name, its lstat) of every entry below `root`, directories
    included (each before what it holds), in sorted order. One directory fd is open at a time (going up by `..`)
    and nothing recurses, so no depth or path length stops it; links are never followed, and `skip` prunes a path
    and what is below it. A directory fd yielded is valid until the next step. With strict=False, what vanishes or
    cannot be opened meanwhile is skipped; otherwise the OSError propagates. `root` must be a directory reached
    without symlinks (OSError)."""
    fd = os.open(root, DIR_FLAGS)

    def listing(dir_fd: int) -> list[str]:
        with os.scandir(dir_fd) as entries:
            return sorted((e.name for e in entries), reverse=True)  # popped from the end: sorted order

    try:
        stack = [(listing(fd), "")]  # (names left in a directory, its path below root)
        while stack:
            names, prefix = stack[-1]
            if not names:
                stack.pop()
                if stack:
                    parent = os.open("..", DIR_FLAGS, dir_fd=fd)
                    os.close(fd)
                    fd = parent
                continue
            name = names.pop()
            rel = f"{prefix}{name}"
            if skip(rel):
                continue
            try:
                st = os.lstat(name, dir_fd=fd)
            except OSError:
                if strict:
                    raise
                continue
            yield rel, fd, name, st
            if stat.S_ISDIR(st.st_mode):
                try:
                    child = os.open(name, DIR_FLAGS, dir_fd=fd)
                except OSError:
                    if strict:
                        raise
                    continue
                try:
                    below = listing(child)
                except BaseException as e:
                    os.close(child)
                    if strict or not isinstance(e, OSError):
                        raise
                    continue
                os.close(fd)
                fd = child
                stack.append((below, rel + "/"))
    finally:
        os.close(fd)


def walk(root: str | Path, *, ignore: frozenset[str] = frozenset(), max_entries: int = 100_000) -> Iterator[str]:
    """Relative POSIX paths of every regular file below `root`, in sorted order (scan: no depth stops it). A symlink
    or special file anywhere (root included) is BadInput naming it."""
    root = Path(root)
    try:
        os.close(os.open(root, DIR_FLAGS))
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise BadInput(f"{root}: must be a directory reached without symlinks (rule: no symlinks)") from None
        if e.errno == errno.ENOENT:
            raise BadInput(f"{root}: directory does not exist (rule: inputs exist)") from None
        raise
    count = 0
    for rel, _, _, st in scan(root, skip=lambda rel: rel.rsplit("/", 1)[-1] in ignore):
        count += 1
        if count > max_entries:
            raise BadInput(f"{root}/{rel}: more than {max_entries} entries below {root} (rule: entry count)")
        if stat.S_ISREG(st.st_mode):
            yield rel
        elif not stat.S_ISDIR(st.st_mode):
            raise BadInput(f"{root}/{rel}: {_kind(st)}")


def read_tree(root: str | Path, *, max_file_bytes: int, max_total_bytes: int, max_files: int = 100_000,
              ignore: frozenset[str] = frozenset(), what: str = "file",
              executables: set[str] | None = None) -> dict[str, bytes]:
    """Every regular file below `root` by relative POSIX path, within per-file and total limits.

    With `executables`, the path of every file read with an execute bit is added to it: taken from the fstat
    of the very file read, so the content and the mode a caller records are the same file's.
    """
    root = Path(root)
    files: dict[str, bytes] = {}
    total = 0
    for rel in walk(root, ignore=ignore, max_entries=max(max_files * 4, 1024)):
        if len(files) >= max_files:
            raise BadInput(f"{root}/{rel}: more than {max_files} files below {root} (rule: file count)")
        data, st = read_at_stat(None, root / rel, f"{root}/{rel}", max_bytes=max_file_bytes, what=what)
        total += len(data)
        if total > max_total_bytes:
            raise BadInput(f"{root}/{rel}: the files below {root} exceed {max_total_bytes} bytes in all "
                           "(rule: total size)")
        files[rel] = data
        if executables is not None and st.st_mode & 0o111:
            executables.add(rel)
    return files


def create_at(dir_fd: int | None, name: str | Path, data: bytes, *, mode: int = 0o644) -> int:
    """Create `name` exclusively (never through a link), write and fsync it; returns its inode.

    A failure leaves no half-written file behind.
    """
    fd = os.open(name, _CREATE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, mode)
        os.fsync(fd)
        return os.fstat(fd).st_ino
    except BaseException:
        os.unlink(name, dir_fd=dir_fd)
        raise
    finally:
        os.close(fd)


def fsync_dir(path_or_fd: str | Path | int) -> None:
    if isinstance(path_or_fd, int):
        os.fsync(path_or_fd)
        return
    fd = os.open(path_or_fd, DIR_FLAGS)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | Path, data: bytes, *, mode: int = 0o644) -> None:
    """Replace `path` so that a reader, or a rerun after a crash, sees the old bytes or the new ones, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    create_at(None, tmp, data, mode=mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def remove_tree(path: str | Path) -> None:
    """Remove a tree the harness owns, whatever an agent left in it: read-only and mode-000 directories are made
    ours again (chmod) before they are opened, files of any mode or kind are unlinked, links are removed and never
    followed, and the walk holds one directory fd at a time (going up by `..`), without recursion: no depth or
    path length stops it. OSError if something still cannot be removed."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        path.unlink()
        return
    if stat.S_IMODE(st.st_mode) & 0o700 != 0o700:
        os.chmod(path, 0o700)
    fd = os.open(path, DIR_FLAGS)
    stack: list[tuple[list[str], str]] = [(os.listdir(fd), "")]  # (names left in a directory, its own name)
    try:
        while stack:
            names, own = stack[-1]
            if not names:
                stack.pop()
                if stack:  # up one level, then remove the emptied directory from there
                    parent = os.open("..", DIR_FLAGS, dir_fd=fd)
                    os.close(fd)
                    fd = parent
                    os.rmdir(own, dir_fd=fd)
                continue
            name = names.pop()
            try:
                st = os.lstat(name, dir_fd=fd)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                os.unlink(name, dir_fd=fd)
                continue
            if stat.S_IMODE(st.st_mode) & 0o700 != 0o700:
                os.chmod(name, 0o700, dir_fd=fd)  # a directory, not a link (lstat): nothing is followed
            child = os.open(name, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
            stack.append((os.listdir(fd), name))
    finally:
        os.close(fd)
    os.rmdir(path)


def allocated(root: str | Path) -> int:
    """Bytes allocated on disk (st_blocks) to `root` and everything below it, links not followed (scan: no depth or
    path length hides a file); what vanishes or cannot be opened meanwhile is skipped."""
    try:
        total = os.lstat(root).st_blocks * 512
        return total + sum(st.st_blocks * 512 for _, _, _, st in scan(root, strict=False))
    except OSError:
        return 0


def with_exec(mode: int) -> int:
    """`mode` with x wherever it has r (0o644 -> 0o755, 0o444 -> 0o555): a script stays a script."""
    return mode | ((mode & 0o444) >> 2)


def write_tree(dest: str | Path, files: Mapping[str, bytes], *, file_mode: int = 0o644,
               dir_mode: int = 0o755, dirs: tuple[str, ...] = (), executables: Collection[str] = ()) -> None:
    """Write `files` (relative POSIX path -> bytes) as a new directory `dest`, all or nothing; the paths in
    `executables` get `file_mode` with the execute bit added wherever it has a read bit.

    The tree is built in a temporary sibling, every file fsynced, then renamed into place; `dest` must not
    exist (the caller decides what may be replaced).
    """
    dest = Path(dest)
    if dest.exists() or dest.is_symlink():
        raise FileExistsError(errno.EEXIST, "already exists", str(dest))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{secrets.token_hex(6)}.tmp")
    tmp.mkdir(mode=0o700)
    try:
        for rel in dirs:
            (tmp / rel).mkdir(parents=True, exist_ok=True)
        for rel in sorted(files):
            plain_parts(rel, f"{dest}/{rel}")
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            create_at(None, tmp / rel, files[rel], mode=with_exec(file_mode) if rel in executables else file_mode)
        for dirpath, _, _ in os.walk(tmp, topdown=False):
            fsync_dir(dirpath)
            os.chmod(dirpath, dir_mode)
        os.rename(tmp, dest)
    except BaseException:
        remove_tree(tmp)
        raise
    fsync_dir(dest.parent)

