"""Undo a transaction: put every original back and take out every file and directory it created, by inode.

A signal can land between a swap and its bookkeeping, so each undo decides from what is on disk (the inode
the transaction made) rather than from its own state, and never clobbers an edit made after the swap nor
deletes a file the transaction did not create. Also the clean-up both a finished and an undone transaction
need: temp names and the directories a revert leaves empty.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Collection

from skillevo.apply import fs
from skillevo.apply.common import ApplyRefused, Fault, Log
from skillevo.apply.swaps import MadeDir, Swap
from skillevo.files.errors import SkillevoError


def retract(parent: int, name: str, aside: str, ino: int, data: bytes, where: str) -> None:
    """Take the file a transaction created out of the tree: rename it to `aside` (never over anything), then make
    sure the file moved is the one created (inode and bytes); if someone replaced it meanwhile, theirs goes
    back. The caller removes `aside`."""
    fs.renameat2(parent, name, parent, aside, fs.RENAME_NOREPLACE)
    try:
        moved, st = fs.read_stat(parent, aside, where)
        ours = st.st_ino == ino and moved == data
    except (OSError, SkillevoError):
        ours = False
    if not ours:
        try:
            fs.renameat2(parent, aside, parent, name, fs.RENAME_NOREPLACE)
        except OSError:
            raise ApplyRefused(f"{where}: was replaced while it was being removed; the other file is kept beside it "
                               f"as {aside}") from None
        raise ApplyRefused(f"{where}: was replaced while it was being removed; left as is")


def _undo_replace(s: Swap, i: int, fault: Fault) -> None:
    try:
        data, st = fs.read_stat(s.parent, s.name, s.path)
    except FileNotFoundError:
        raise ApplyRefused(f"{s.path}: disappeared after the swap; its original is at {s.rel(s.staged)}") from None
    if s.new_ino is None or st.st_ino != s.new_ino:
        if s.state == "swapped":
            raise ApplyRefused(f"{s.path}: was replaced after the swap; left as is, its original is at "
                               f"{s.rel(s.staged)}")
        s.state = "unchanged"
        return
    s.state = "swapped"
    fault("before-restore", i, s.path)
    if data != s.new:
        raise ApplyRefused(f"{s.path}: was edited after the swap; left as is, its original is at {s.rel(s.staged)}")
    fs.renameat2(s.parent, s.staged, s.parent, s.name, fs.RENAME_EXCHANGE)
    if os.lstat(s.name, dir_fd=s.parent).st_ino == s.new_ino:
        raise ApplyRefused(f"{s.path}: still holds the new file after restoring")
    s.state = "restored"


def _undo_create(s: Swap, i: int, fault: Fault) -> None:
    if s.parent < 0 or s.new_ino is None:  # its directory or its staged file was never made
        s.state = "unchanged"
        return
    try:
        data, st = fs.read_stat(s.parent, s.name, s.path)
    except FileNotFoundError:  # never created, or removed since: absent either way, as before
        s.state = "restored" if s.state == "swapped" else "unchanged"
        return
    except SkillevoError:  # a symlink or a special file: not what apply created
        data, st = None, None
    if st is None or st.st_ino != s.new_ino:
        if s.state == "swapped":
            raise ApplyRefused(f"{s.path}: was replaced after apply created it; left as is")
        s.state = "unchanged"  # another party's file (a concurrent creation): never deleted
        return
    s.state = "swapped"
    fault("before-restore", i, s.path)
    if data != s.new:
        raise ApplyRefused(f"{s.path}: was edited after apply created it; left as is (a rollback deletes only the "
                           "bytes apply wrote)")
    assert s.new is not None  # it equals the bytes just read
    retract(s.parent, s.name, s.staged, s.new_ino, s.new, s.path)
    s.state = "restored"


def _undo_delete(s: Swap, i: int, fault: Fault) -> None:
    try:
        os.lstat(s.staged, dir_fd=s.parent)
    except FileNotFoundError:
        if s.state == "swapped":
            raise ApplyRefused(f"{s.path}: the file the revert took out disappeared from {s.rel(s.staged)}") from None
        s.state = "unchanged"
        return
    s.state = "swapped"
    fault("before-restore", i, s.path)
    try:
        fs.renameat2(s.parent, s.staged, s.parent, s.name, fs.RENAME_NOREPLACE)
    except FileExistsError:
        raise ApplyRefused(f"{s.path}: was created again after the revert took it out; left as is, the file the "
                           f"revert took out is at {s.rel(s.staged)}") from None
    s.state = "restored"


def roll_back(swaps: list[Swap], fault: Fault) -> list[str]:
    """Undo every swap that happened, newest first, deciding by inode rather than by bookkeeping (a signal
    can land between a swap and its state update). Never clobbers a destination edited after the swap, and
    never deletes a file apply did not create."""
    failures = []
    undo = {"replace": _undo_replace, "create": _undo_create, "delete": _undo_delete}
    for i in reversed(range(len(swaps))):
        s = swaps[i]
        try:
            undo[s.kind](s, i, fault)
        except Exception as e:  # noqa: BLE001 - every failure is recorded, the rest still get restored
            s.state = "restore-failed"
            failures.append(str(e) if isinstance(e, SkillevoError) else f"{s.path}: {type(e).__name__}: {e}")
    return failures


def remove_temps(swaps: list[Swap], log: Log) -> None:
    """Drop temp names that hold only the new bytes or an original (the originals store keeps those)."""
    for s in swaps:
        if s.parent < 0:
            continue
        name = s.staged
        try:
            data = fs.read(s.parent, name, s.rel(name))
        except FileNotFoundError:
            data = None
        except SkillevoError as e:
            log(f"apply: warning: left {s.rel(name)} in place: {e}")
            data = None
        if data is not None and data in (s.new, s.expect):
            os.unlink(name, dir_fd=s.parent)
        elif data is not None:
            log(f"apply: warning: kept {s.rel(name)}: it holds bytes that are neither the original nor the new")
        os.fsync(s.parent)


def remove_made_dirs(dirs: list[MadeDir], log: Log) -> list[str]:
    """Remove the directories the transaction made, deepest first: under its temp name (only this transaction
    uses it) or its own name when the inode is the one made. One that holds a file someone else put there is
    kept; returns those."""
    kept = []
    for d in reversed(dirs):
        parent = d.parent_fd()
        if parent < 0:
            continue
        for name in (d.temp, d.name):
            try:
                st = os.lstat(name, dir_fd=parent)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(st.st_mode) or (name == d.name and st.st_ino != d.ino):
                continue  # not the directory this transaction made
            try:
                os.rmdir(name, dir_fd=parent)
                d.state = "removed"
            except OSError as e:
                d.state = "kept"
                kept.append(d.rel(name))
                why = ("it now holds files apply did not put there" if e.errno in (errno.ENOTEMPTY, errno.EEXIST)
                       else e.strerror)
                log(f"apply: warning: kept {d.rel(name)}: apply made it, but {why}")
        os.fsync(parent)
    return kept


def remove_empty_dirs(tree: fs.Tree, dirs: Collection[str], log: Log) -> None:
    """After a revert commits: remove the directories apply created, deepest first, each only if it is a
    directory (never a symlink) and empty; one that holds anything else is kept, with a warning."""
    for path in sorted(dirs, reverse=True):
        parts = fs.split_relative(path, "directory")
        parent, found = tree.open_existing(parts[:-1])
        if found < len(parts) - 1:
            continue
        try:
            st = os.lstat(parts[-1], dir_fd=parent)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            log(f"apply: warning: kept {path}: apply created a directory there, but it is not one now")
            continue
        try:
            os.rmdir(parts[-1], dir_fd=parent)
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            log(f"apply: warning: kept {path}: apply created it, but it holds files apply did not create")
        os.fsync(parent)
