"""One transaction: stage every new file beside its destination, put them in place, verify, commit, or roll back.

A replaced file's new bytes are staged beside it and swapped in with renameat2(RENAME_EXCHANGE), which leaves
the replaced file under the staged name: a rollback is the same exchange again, and it restores exactly
what was replaced, even an edit that raced the swap. A created file is staged the same way and renamed in
with renameat2(RENAME_NOREPLACE), which fails rather than overwrite what someone created meanwhile; each
directory it needs is made under a name of the transaction's own and renamed in the same way, so whatever a
rollback or a recovery removes is provably the transaction's (by its name, or by the inode the journal
recorded). A revert takes a created file out by renaming it aside, never over anything, until it commits.
Where the filesystem lacks either rename, apply refuses (BrokenEnvironment) and rolls back: a non-atomic
replace could lose an edit racing it, so there is no fallback. A journal (`recovery-<UTC>.json`) is written
before the first change, so even a SIGKILL leaves a record a rerun restores from (skillevo.apply.recovery).
"""

from __future__ import annotations

import errno
import os
import signal
import stat
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from skillevo.apply import fs
from skillevo.apply.common import (
    SCHEMA_VERSION,
    ApplyPaths,
    ApplyRefused,
    Fault,
    Log,
    RollbackIncomplete,
    RolledBack,
    TransactionInterrupted,
    iso,
    utc_stamp,
)
from skillevo.apply.guard import SignalGuard
from skillevo.core import documents, safefs
from skillevo.core.digests import sha256_bytes
from skillevo.core.errors import BadInput, BrokenEnvironment, SkillevoError
from skillevo.core.schemas import validate

EXCHANGE = "renameat2-exchange"
NOREPLACE = "renameat2-noreplace"
EXCHANGE_AND_NOREPLACE = "renameat2-exchange+noreplace"
NO_EXCHANGE = ("this filesystem cannot swap files atomically (renameat2 RENAME_EXCHANGE: {reason}), and apply will "
               "not replace them non-atomically (an edit racing the replace could be lost)")
NO_NOREPLACE = ("this filesystem cannot rename without the risk of overwriting (renameat2 RENAME_NOREPLACE: "
                "{reason}), and apply will not create or remove files otherwise (a file someone created meanwhile "
                "could be lost)")
NEW_FILE_MODE = 0o644  # a created file's mode before the overlay's execute bit
NEW_DIR_MODE = 0o755  # a created directory's (less the umask, as git would make it)
CREATED_ELSEWHERE = ("was created by someone else during apply (it was absent when apply checked); apply never "
                     "overwrites it, and the rollback leaves it as is")


class ExchangeUnsupported(SkillevoError):
    """renameat2 with the flag a destination needs is not available: the transaction stops and rolls back."""


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


@dataclass
class Commit:
    """How a transaction makes itself final: write `marker` (carrying the transaction id under `key`, and
    validated against `schema` when one is named), then remove `then_remove` if it still carries
    `then_remove_tx` (revert retires the receipt so) and the directories `then_remove_dirs` that are empty
    (revert: the ones apply created)."""

    marker: Path
    key: str
    method_key: str
    body: dict[str, Any]
    schema: str | None = None
    then_remove: Path | None = None
    then_remove_tx: str | None = None
    then_remove_dirs: list[str] = field(default_factory=list)

    def spec(self) -> dict[str, Any]:
        return {"path": str(self.marker.resolve()), "key": self.key,
                "then_remove": str(self.then_remove.resolve()) if self.then_remove else None,
                "then_remove_transaction": self.then_remove_tx, "then_remove_dirs": list(self.then_remove_dirs)}


def marker_tx(path: Path, key: str) -> str | None:
    """`key` of the JSON object at `path`; None when there is none (missing, unreadable, not an object)."""
    try:
        doc = documents.load_json(path, what="marker")
    except (OSError, BadInput):
        return None
    return doc.get(key) if isinstance(doc, dict) else None


def store_original(store: Path, data: bytes) -> None:
    """Content-addressed copy of bytes a transaction replaces: what revert and recovery restore from."""
    path = store / sha256_bytes(data)
    try:
        if sha256_bytes(fs.read(None, path, str(path), "stored original")) == path.name:
            return
    except (OSError, BadInput):
        pass
    safefs.write_atomic(path, data)


def sha_or_none(data: bytes | None) -> str | None:
    """sha256 of `data`; None for no file (one that is created, or deleted)."""
    return None if data is None else sha256_bytes(data)


def _journal(swaps: list[Swap], dirs: list[MadeDir], *, kind: str, tx: str, repo: Path, store: Path,
             commit: Mapping[str, Any], started: datetime, state: str, failure: str | None = None,
             failures: list[str] | None = None) -> dict[str, Any]:
    """The recovery record: for each destination, where its original and its new bytes are right now, and the
    directories the transaction makes (by temp name and inode: recovery removes only those)."""
    files = []
    for s in swaps:
        swapped = s.state in ("swapped", "restore-failed")
        original_at = None if s.expect is None else s.rel(s.staged) if swapped else s.path
        new_at = None if s.new is None else s.path if swapped else s.rel(s.staged)
        files.append({
            "path": s.path,
            "op": s.kind,
            "state": s.state,
            "original_sha256": sha_or_none(s.expect),
            "new_sha256": sha_or_none(s.new),
            "original_at": original_at,
            "new_at": new_at,
            "original_copy": None if s.expect is None else str(store / sha256_bytes(s.expect)),
            "staged": s.rel(s.staged),
            "new_ino": s.new_ino,
        })
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "transaction": tx,
        "repo": str(repo.resolve()),
        "started_at": iso(started),
        "state": state,
        "failure": failure,
        "rollback_failures": failures or [],
        "commit": dict(commit),
        "files": files,
        "dirs": [{"path": d.path, "temp": d.rel(d.temp), "ino": d.ino, "state": d.state} for d in dirs],
        "instructions": (
            "Rerun the same command (`make apply`, `make revert` or `python -m stages.apply [--revert]`): it "
            "restores every original listed here before doing anything else, and removes every file and "
            "directory the transaction created. By hand: paths are relative to `repo`; a destination holding "
            "new_sha256 has its original under `staged` beside it, and original_copy always holds the original "
            "bytes; a file with op `create` had no original (delete it if it holds new_sha256), and each of "
            "`dirs` did not exist before (remove it, or its `temp`, once empty)."
        ),
    }


def _same_parent(tree: fs.Tree, s: Swap) -> None:
    with tree.directory(s.path.split("/")[:-1]) as fd:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != s.parent_id:
            raise ApplyRefused(f"{s.path}: its directory was moved or replaced during apply")


def _recheck(tree: fs.Tree, s: Swap) -> None:
    """Immediately before a swap: the parent is still the directory we opened and the bytes are unchanged (for a
    created file: still nothing there)."""
    _same_parent(tree, s)
    if s.create:
        try:
            os.lstat(s.name, dir_fd=s.parent)
        except FileNotFoundError:
            return
        raise ApplyRefused(f"{s.path}: {CREATED_ELSEWHERE}")
    if fs.read(s.parent, s.name, s.path) != s.expect:
        raise ApplyRefused(f"{s.path}: changed during apply (concurrent edit); it was not "
                           f"{'replaced' if s.new is not None else 'deleted'}")


def _rename(parent: int, old: str, new: str, flags: int, where: str) -> None:
    """renameat2 with `flags`; no fallback when the filesystem cannot, and EEXIST (no-replace) as a refusal."""
    try:
        fs.renameat2(parent, old, parent, new, flags)
    except OSError as e:
        if e.errno in fs.UNSUPPORTED:
            why = NO_EXCHANGE if flags == fs.RENAME_EXCHANGE else NO_NOREPLACE
            raise ExchangeUnsupported(f"{where}: {why.format(reason=e.strerror or e)}") from None
        raise


def _swap(s: Swap) -> None:
    """Put the staged new bytes in place: exchanged with the original, renamed in where there was none, or (a
    revert's delete) the file renamed aside to the staged name."""
    try:
        if s.kind == "replace":
            _rename(s.parent, s.staged, s.name, fs.RENAME_EXCHANGE, s.path)
        elif s.kind == "create":
            _rename(s.parent, s.staged, s.name, fs.RENAME_NOREPLACE, s.path)
        else:
            _rename(s.parent, s.name, s.staged, fs.RENAME_NOREPLACE, s.path)
    except FileExistsError:
        if s.create:
            raise ApplyRefused(f"{s.path}: {CREATED_ELSEWHERE}") from None
        raise
    s.state = "swapped"


def _check_replaced(s: Swap) -> None:
    """What the swap displaced must be the original; otherwise an edit raced the swap and is kept for rollback."""
    if s.expect is not None and fs.read(s.parent, s.staged, s.rel(s.staged)) != s.expect:
        raise ApplyRefused(
            f"{s.path}: was edited between the last check and the swap (concurrent edit); the rollback puts "
            "that edit back"
        )


def _verify(tree: fs.Tree, swaps: list[Swap]) -> None:
    for s in swaps:
        _same_parent(tree, s)
        if s.new is None:
            try:
                os.lstat(s.name, dir_fd=s.parent)
            except FileNotFoundError:
                pass
            else:
                raise ApplyRefused(f"{s.path}: exists again after it was deleted")
        else:
            data, st = fs.read_stat(s.parent, s.name, s.path)
            if st.st_ino != s.new_ino or data != s.new or stat.S_IMODE(st.st_mode) != s.new_mode:
                raise ApplyRefused(f"{s.path}: does not hold the new bytes and mode after the swap")
        if s.expect is not None and fs.read(s.parent, s.staged, s.rel(s.staged)) != s.expect:
            raise ApplyRefused(f"{s.rel(s.staged)}: the kept original changed during apply")


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


def _rollback(swaps: list[Swap], fault: Fault) -> list[str]:
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


def _remove_temps(swaps: list[Swap], log: Log) -> None:
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


def _make_dir(tree: fs.Tree, d: MadeDir) -> None:
    parent = d.parent_fd()
    os.mkdir(d.temp, NEW_DIR_MODE, dir_fd=parent)
    fd = os.open(d.temp, safefs.DIR_FLAGS, dir_fd=parent)
    tree.hold(fd)
    d.fd, d.ino, d.state = fd, os.fstat(fd).st_ino, "staged"


def _place_dir(d: MadeDir) -> None:
    try:
        _rename(d.parent_fd(), d.temp, d.name, fs.RENAME_NOREPLACE, d.path)
    except FileExistsError:
        raise ApplyRefused(f"{d.path}: was created by someone else during apply (apply makes this directory for new "
                           "files, never over anything); the rollback leaves it as is") from None
    d.state = "created"
    os.fsync(d.parent_fd())


def _remove_made(dirs: list[MadeDir], log: Log) -> list[str]:
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


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (SkillevoError, TransactionInterrupted)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _write_json(path: Path, doc: Mapping[str, Any]) -> None:
    safefs.write_atomic(path, documents.dump_json(doc))


def _method(swaps: list[Swap]) -> str:
    kinds = {s.kind for s in swaps}
    if kinds <= {"replace"}:
        return EXCHANGE
    return NOREPLACE if "replace" not in kinds else EXCHANGE_AND_NOREPLACE


def transact(tree: fs.Tree, swaps: list[Swap], *, kind: str, tx: str, paths: ApplyPaths, commit: Commit,
             now: datetime, fault: Fault, log: Log) -> str:
    """Make directories, stage, swap, verify, commit; on any failure or signal, restore every original and remove
    everything the transaction created. Returns the swap method."""
    store = paths.originals.resolve()
    journal_path = paths.state_dir / f"recovery-{utc_stamp()}.json"
    dirs = made_dirs(swaps)

    def journal(state: str, **kw: Any) -> dict[str, Any]:
        return _journal(swaps, dirs, kind=kind, tx=tx, repo=paths.repo, store=store, commit=commit.spec(),
                        started=now, state=state, **kw)

    done = 0
    with SignalGuard() as guard:
        try:
            for s in swaps:
                if s.expect is not None:
                    store_original(store, s.expect)
            _write_json(journal_path, journal("in-progress"))
            for j, d in enumerate(dirs):
                _make_dir(tree, d)
                _write_json(journal_path, journal("in-progress"))  # its inode: what recovery may remove
                fault("before-mkdir", j, d.path)
                _place_dir(d)
                _write_json(journal_path, journal("in-progress"))
                fault("after-mkdir", j, d.path)
            for s in swaps:
                if s.made is not None:
                    s.parent = s.made.fd
                    st = os.fstat(s.parent)
                    s.parent_id = (st.st_dev, st.st_ino)
                if s.new is not None:
                    s.new_ino = safefs.create_at(s.parent, s.staged, s.new,
                                                 mode=NEW_FILE_MODE if s.new_mode is None else s.new_mode)
                s.state = "staged"
            _write_json(journal_path, journal("in-progress"))  # the staged inodes: a created file is known by its own
            for s in swaps:
                os.fsync(s.parent)
            for i, s in enumerate(swaps):
                _recheck(tree, s)
                fault("before-swap", i, s.path)
                _swap(s)
                done = i + 1
                _write_json(journal_path, journal("in-progress"))  # where each original is now, for a human
                _check_replaced(s)
                fault("after-swap", i, s.path)
            for s in swaps:
                os.fsync(s.parent)
            _verify(tree, swaps)
            fault("verified", len(swaps), None)
            guard.defer()
            commit.body[commit.key] = tx
            commit.body[commit.method_key] = method = _method(swaps)
            if commit.schema:
                validate(commit.body, commit.schema, commit.marker)
            _write_json(commit.marker, commit.body)
        except BaseException as exc:  # noqa: BLE001 - an interrupt must roll back too
            guard.defer()
            reason = _describe(exc)
            failures = _rollback(swaps, fault)
            if marker_tx(commit.marker, commit.key) == tx:  # failed after the marker landed: withdraw it
                commit.marker.unlink()
            if failures:
                doc = journal("rollback-incomplete", failure=reason, failures=failures)
                try:
                    _write_json(journal_path, doc)
                except OSError as e:
                    journal_path = paths.state_dir / f"recovery-{utc_stamp()}-{tx}.json"
                    log(f"apply: could not update the recovery record ({e}); trying {journal_path}")
                    _write_json(journal_path, doc)
                raise RollbackIncomplete(
                    f"{reason}; rolling back failed for: {'; '.join(failures)}. Recovery record: {journal_path} "
                    "(rerun the same command to restore from it)", journal_path) from exc
            _remove_temps(swaps, log)
            kept = _remove_made(dirs, log)
            journal_path.unlink(missing_ok=True)
            undone = sum(s.state == "restored" for s in swaps)
            if isinstance(exc, ExchangeUnsupported):  # refused, not failed: nothing new is on disk
                raise BrokenEnvironment(f"{reason}; " + ("nothing was changed" if done == 0 else
                                        f"the {done} file(s) already swapped are back as they were")) from None
            created = ("every file and directory it created is gone" if not kept else
                       f"every file it created is gone, but not the directories {', '.join(kept)} it made (they hold "
                       "what apply did not put there)")
            raise RolledBack(f"{reason} (after {done} of {len(swaps)} swaps); rolled back: every file apply "
                             f"replaced is back as it was ({undone} restored), {created}, no new bytes remain") from exc
        try:  # committed: whatever happens now, the new bytes stay
            fault("committed", len(swaps), None)
            if commit.then_remove and marker_tx(commit.then_remove, "transaction") == commit.then_remove_tx:
                commit.then_remove.unlink()
            _remove_temps(swaps, log)
            remove_empty_dirs(tree, commit.then_remove_dirs, log)
            journal_path.unlink(missing_ok=True)
        except Exception as e:  # noqa: BLE001
            log(f"apply: warning: the change is complete but cleaning up failed ({_describe(e)}); a rerun "
                f"finishes it from {journal_path}")
    if guard.pending is not None:
        log(f"apply: {signal.Signals(guard.pending).name} arrived after the point of no return; the {kind} completed")
    return method
