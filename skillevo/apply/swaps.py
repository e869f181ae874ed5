"""What a transaction will change: every destination opened and read, and the directories it must make.

A destination is held by its directory's fd and checked as it is opened (no symlink, no special file, no
missing mirror), so the transaction later swaps exactly the file that was read; a file to create gets the
directories it needs planned under names of the transaction's own (skillevo.apply.transaction makes them).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from skillevo.apply import fs
from skillevo.apply.common import ApplyRefused
from skillevo.files import safefs

NEW_FILE_MODE = 0o644  # a created file's mode before the overlay's execute bit
NEW_DIR_MODE = 0o755  # a created directory's (less the umask, as git would make it)


@dataclass
class MadeDir:
    """A directory the transaction makes for created files: made as `temp` (a name only this transaction uses),
    its inode journaled, then renamed to `name` without overwriting anything."""

    path: str  # repo-relative
    name: str
    above: MadeDir | None  # the made directory it goes in, or None: it goes in the held `parent`
    parent: int = -1
    temp: str = ""
    fd: int = -1
    ino: int | None = None
    state: str = "planned"  # planned, staged (made as temp), created, removed, kept

    def parent_fd(self) -> int:
        return self.above.fd if self.above is not None else self.parent

    def rel(self, name: str) -> str:
        return "/".join([*self.path.split("/")[:-1], name])


@dataclass
class Swap:
    """One destination in a transaction: what it must hold now, what it will hold, and where both live. A
    created file expects nothing there (`create`); a file a revert deletes gets nothing (`new` None)."""

    path: str  # repo-relative destination
    parent: int  # held directory fd; -1 until `made` (the directory a created file goes in) exists
    parent_id: tuple[int, int]
    name: str
    mode: int | None  # the original's permission bits (None: there is no original)
    expect: bytes | None  # the bytes it must still hold when swapped (its original); None: absent
    new: bytes | None  # None: the transaction deletes it
    new_mode: int | None  # what the new file gets: the original's, with the execute bits the overlay says
    staged: str  # temp name beside it: the new bytes until the rename, the original (if any) after
    create: bool = False
    present: tuple[bytes, int] | None = None  # create: the file found where it goes (bytes, mode); callers refuse it
    made: MadeDir | None = None
    new_ino: int | None = None
    state: str = "planned"  # planned, staged, swapped, restored, restore-failed, unchanged

    @property
    def kind(self) -> str:
        return "create" if self.create else "delete" if self.new is None else "replace"

    def holds_new(self) -> bool:
        """It already is what the transaction would make it (bytes and mode)."""
        if self.create:
            return self.present == (self.new, self.new_mode)
        return self.expect == self.new and self.mode == self.new_mode

    def rel(self, name: str) -> str:
        return "/".join([*self.path.split("/")[:-1], name])


def exec_mode(mode: int, executable: bool) -> int:
    """`mode` with x where it has r when `executable`, without any x otherwise (a skill script's bit)."""
    return safefs.with_exec(mode) if executable else mode & ~0o111


MISSING = ("does not exist; every destination recorded at freeze (canonical skill and mirrors) must exist (a missing "
           "mirror?)")


def open_all(tree: fs.Tree, targets: Mapping[str, bytes | None], tx: str,
             new_mode: Callable[[str, int], int | None] = lambda rel, mode: mode, *,
             absent: Collection[str] = (), missing: str = MISSING) -> list[Swap]:
    """Open every destination (refusing symlinks, special and missing files) and read what it holds now;
    `new_mode(path, current mode)` is the mode its new file gets (apply: the overlay's execute bit; revert: the
    mode before the apply). A path in `absent` is created: the directories it needs are planned, and whatever is
    there already is only recorded (`present`), for the caller to refuse."""
    swaps = []
    made: dict[str, MadeDir] = {}
    for i, rel in enumerate(sorted(targets)):
        parts = fs.split_relative(rel, "destination")
        staged = f"{fs.TEMP_PREFIX}{tx}-{i}.swap"
        if rel in absent:
            swaps.append(_plan_create(tree, rel, parts, targets[rel], new_mode, staged, made))
            continue
        parent = tree.open_dir(parts[:-1], hold=True)
        try:
            data, st = fs.read_stat(parent, parts[-1], rel, "destination")
        except FileNotFoundError:
            raise ApplyRefused(f"{rel}: {missing}") from None
        pst = os.fstat(parent)
        mode = stat.S_IMODE(st.st_mode)
        new = targets[rel]
        swaps.append(Swap(rel, parent, (pst.st_dev, pst.st_ino), parts[-1], mode, data, new,
                          None if new is None else new_mode(rel, mode), staged))
    for j, d in enumerate(made[p] for p in sorted(made)):
        d.temp = f"{fs.TEMP_PREFIX}{tx}-d{j}.dir"
    return swaps


def _plan_create(tree: fs.Tree, rel: str, parts: list[str], new: bytes | None,
                 new_mode: Callable[[str, int], int | None], staged: str, made: dict[str, MadeDir]) -> Swap:
    if new is None:
        raise ApplyRefused(f"{rel}: a file to create needs its new bytes")
    parent, found = tree.open_existing(parts[:-1])
    pst = os.fstat(parent)
    swap = Swap(rel, parent, (pst.st_dev, pst.st_ino), parts[-1], None, None, new, new_mode(rel, NEW_FILE_MODE),
                staged, create=True)
    if found < len(parts) - 1:  # its directory does not exist: the transaction makes it, and what is missing above
        above: MadeDir | None = None
        for k in range(found, len(parts) - 1):
            path = "/".join(parts[: k + 1])
            if path not in made:
                made[path] = MadeDir(path, parts[k], above, parent if above is None else -1)
            above = made[path]
        swap.made, swap.parent, swap.parent_id = above, -1, (0, 0)
        return swap
    try:
        st = os.lstat(parts[-1], dir_fd=parent)
    except FileNotFoundError:
        return swap
    if not stat.S_ISREG(st.st_mode):
        kind = ("a symlink" if stat.S_ISLNK(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode)
                else "not a regular file")
        raise ApplyRefused(f"{rel}: is {kind}, where apply would create a new file (freeze recorded it absent); "
                           "apply never overwrites or follows it")
    data, st = fs.read_stat(parent, parts[-1], rel, "destination")
    swap.present = (data, stat.S_IMODE(st.st_mode))
    return swap


def made_dirs(swaps: list[Swap]) -> list[MadeDir]:
    """Every directory the transaction makes, parents first."""
    found: dict[str, MadeDir] = {}
    for s in swaps:
        d = s.made
        while d is not None and d.path not in found:
            found[d.path] = d
            d = d.above
    return [found[p] for p in sorted(found)]
