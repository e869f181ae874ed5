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
This module is the forward path; what a transaction changes is skillevo.apply.swaps, its records
skillevo.apply.journal, and undoing it skillevo.apply.rollback.
"""

from __future__ import annotations

import os
import signal
import stat
from datetime import datetime
from typing import Any

from skillevo.apply import fs
from skillevo.apply.common import (
    ApplyPaths,
    ApplyRefused,
    Fault,
    Log,
    RollbackIncomplete,
    RolledBack,
    TransactionInterrupted,
    utc_stamp,
)
from skillevo.apply.guard import SignalGuard
from skillevo.apply.journal import Commit, marker_tx, record, store_original, write_json
from skillevo.apply.rollback import remove_empty_dirs, remove_made_dirs, remove_temps, roll_back
from skillevo.apply.swaps import NEW_DIR_MODE, NEW_FILE_MODE, MadeDir, Swap, made_dirs
from skillevo.files import safefs
from skillevo.files.errors import BrokenEnvironment, SkillevoError
from skillevo.files.schemas import validate

EXCHANGE = "renameat2-exchange"
NOREPLACE = "renameat2-noreplace"
EXCHANGE_AND_NOREPLACE = "renameat2-exchange+noreplace"
NO_EXCHANGE = ("this filesystem cannot swap files atomically (renameat2 RENAME_EXCHANGE: {reason}), and apply will "
               "not replace them non-atomically (an edit racing the replace could be lost)")
NO_NOREPLACE = ("this filesystem cannot rename without the risk of overwriting (renameat2 RENAME_NOREPLACE: "
                "{reason}), and apply will not create or remove files otherwise (a file someone created meanwhile "
                "could be lost)")
CREATED_ELSEWHERE = ("was created by someone else during apply (it was absent when apply checked); apply never "
                     "overwrites it, and the rollback leaves it as is")


class ExchangeUnsupported(SkillevoError):
    """renameat2 with the flag a destination needs is not available: the transaction stops and rolls back."""


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


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (SkillevoError, TransactionInterrupted)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


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
        return record(swaps, dirs, kind=kind, tx=tx, repo=paths.repo, store=store, commit=commit.spec(),
                        started=now, state=state, **kw)

    done = 0
    with SignalGuard() as guard:
        try:
            for s in swaps:
                if s.expect is not None:
                    store_original(store, s.expect)
            write_json(journal_path, journal("in-progress"))
            for j, d in enumerate(dirs):
                _make_dir(tree, d)
                write_json(journal_path, journal("in-progress"))  # its inode: what recovery may remove
                fault("before-mkdir", j, d.path)
                _place_dir(d)
                write_json(journal_path, journal("in-progress"))
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
            write_json(journal_path, journal("in-progress"))  # the staged inodes: a created file is known by its own
            for s in swaps:
                os.fsync(s.parent)
            for i, s in enumerate(swaps):
                _recheck(tree, s)
                fault("before-swap", i, s.path)
                _swap(s)
                done = i + 1
                write_json(journal_path, journal("in-progress"))  # where each original is now, for a human
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
            write_json(commit.marker, commit.body)
        except BaseException as exc:  # noqa: BLE001 - an interrupt must roll back too
            guard.defer()
            reason = _describe(exc)
            failures = roll_back(swaps, fault)
            if marker_tx(commit.marker, commit.key) == tx:  # failed after the marker landed: withdraw it
                commit.marker.unlink()
            if failures:
                doc = journal("rollback-incomplete", failure=reason, failures=failures)
                try:
                    write_json(journal_path, doc)
                except OSError as e:
                    journal_path = paths.state_dir / f"recovery-{utc_stamp()}-{tx}.json"
                    log(f"apply: could not update the recovery record ({e}); trying {journal_path}")
                    write_json(journal_path, doc)
                raise RollbackIncomplete(
                    f"{reason}; rolling back failed for: {'; '.join(failures)}. Recovery record: {journal_path} "
                    "(rerun the same command to restore from it)", journal_path) from exc
            remove_temps(swaps, log)
            kept = remove_made_dirs(dirs, log)
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
            remove_temps(swaps, log)
            remove_empty_dirs(tree, commit.then_remove_dirs, log)
            journal_path.unlink(missing_ok=True)
        except Exception as e:  # noqa: BLE001
            log(f"apply: warning: the change is complete but cleaning up failed ({_describe(e)}); a rerun "
                f"finishes it from {journal_path}")
    if guard.pending is not None:
        log(f"apply: {signal.Signals(guard.pending).name} arrived after the point of no return; the {kind} completed")
    return method
