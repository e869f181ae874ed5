"""One transaction: stage every new file beside its destination, swap them in, verify, commit, or roll back.

New bytes are staged beside each destination and swapped in with renameat2(RENAME_EXCHANGE), which leaves
the replaced file under the staged name: a rollback is the same exchange again, and it restores exactly
what was replaced, even an edit that raced the swap. Where the exchange is unsupported, apply refuses before
any file changed (BrokenEnvironment): a non-atomic replace could lose an edit racing it, so there is no
fallback. A journal (`recovery-<UTC>.json`) is written before the first swap, so even a SIGKILL leaves a
record a rerun restores from (skillevo.apply.recovery).
"""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from skillevo import documents, safefs
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
from skillevo.digests import sha256_bytes
from skillevo.errors import BadInput, BrokenEnvironment, SkillevoError
from skillevo.schemas import validate

EXCHANGE = "renameat2-exchange"
NO_EXCHANGE = ("this filesystem cannot swap files atomically (renameat2 RENAME_EXCHANGE: {reason}), and apply will "
               "not replace them non-atomically (an edit racing the replace could be lost)")


class ExchangeUnsupported(SkillevoError):
    """renameat2(RENAME_EXCHANGE) is not available for a destination: the transaction stops and rolls back."""


@dataclass
class Swap:
    """One destination in a transaction: what it must hold now, what it will hold, and where both live."""

    path: str  # repo-relative destination
    parent: int  # held directory fd
    parent_id: tuple[int, int]
    name: str
    mode: int  # the original's permission bits
    expect: bytes  # the bytes it must still hold when swapped (its original)
    new: bytes
    new_mode: int  # what the new file gets: the original's, with the execute bits the overlay says
    staged: str  # temp name beside it: the new bytes until the exchange, the original after
    new_ino: int | None = None
    state: str = "planned"  # planned, staged, swapped, restored, restore-failed, unchanged

    def rel(self, name: str) -> str:
        return "/".join([*self.path.split("/")[:-1], name])


def exec_mode(mode: int, executable: bool) -> int:
    """`mode` with x where it has r when `executable`, without any x otherwise (a skill script's bit)."""
    return safefs.with_exec(mode) if executable else mode & ~0o111


def open_all(tree: fs.Tree, targets: Mapping[str, bytes], tx: str,
             new_mode: Callable[[str, int], int] = lambda rel, mode: mode) -> list[Swap]:
    """Open every destination (refusing symlinks, special and missing files) and read what it holds now;
    `new_mode(path, current mode)` is the mode its new file gets (apply: the overlay's execute bit; revert: the
    mode before the apply)."""
    swaps = []
    for i, rel in enumerate(sorted(targets)):
        parts = fs.split_relative(rel, "destination")
        parent = tree.open_dir(parts[:-1], hold=True)
        try:
            data, st = fs.read_stat(parent, parts[-1], rel, "destination")
        except FileNotFoundError:
            raise ApplyRefused(f"{rel}: does not exist; every destination recorded at freeze (canonical skill and "
                               "mirrors) must exist (a missing mirror?)") from None
        pst = os.fstat(parent)
        mode = stat.S_IMODE(st.st_mode)
        swaps.append(Swap(rel, parent, (pst.st_dev, pst.st_ino), parts[-1], mode, data, targets[rel],
                          new_mode(rel, mode), f"{fs.TEMP_PREFIX}{tx}-{i}.swap"))
    return swaps


@dataclass
class Commit:
    """How a transaction makes itself final: write `marker` (carrying the transaction id under `key`, and
    validated against `schema` when one is named), then remove `then_remove` if it still carries
    `then_remove_tx` (revert retires the receipt so)."""

    marker: Path
    key: str
    method_key: str
    body: dict[str, Any]
    schema: str | None = None
    then_remove: Path | None = None
    then_remove_tx: str | None = None

    def spec(self) -> dict[str, Any]:
        return {"path": str(self.marker.resolve()), "key": self.key,
                "then_remove": str(self.then_remove.resolve()) if self.then_remove else None,
                "then_remove_transaction": self.then_remove_tx}


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


def _journal(swaps: list[Swap], *, kind: str, tx: str, repo: Path, store: Path, commit: Mapping[str, Any],
             started: datetime, state: str, failure: str | None = None,
             failures: list[str] | None = None) -> dict[str, Any]:
    """The recovery record: for each destination, where its original and its new bytes are right now."""
    files = []
    for s in swaps:
        swapped = s.state in ("swapped", "restore-failed")
        files.append({
            "path": s.path,
            "state": s.state,
            "original_sha256": sha256_bytes(s.expect),
            "new_sha256": sha256_bytes(s.new),
            "original_at": s.rel(s.staged) if swapped else s.path,
            "new_at": s.path if swapped else s.rel(s.staged),
            "original_copy": str(store / sha256_bytes(s.expect)),
            "staged": s.rel(s.staged),
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
        "instructions": (
            "Rerun the same command (`make apply`, `make revert` or `python -m stages.apply [--revert]`): it "
            "restores every original listed here before doing anything else. By hand: paths are relative to "
            "`repo`; a destination holding new_sha256 has its original under `staged` beside it, and "
            "original_copy always holds the original bytes."
        ),
    }


def _same_parent(tree: fs.Tree, s: Swap) -> None:
    with tree.directory(s.path.split("/")[:-1]) as fd:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != s.parent_id:
            raise ApplyRefused(f"{s.path}: its directory was moved or replaced during apply")


def _recheck(tree: fs.Tree, s: Swap) -> None:
    """Immediately before a swap: the parent is still the directory we opened and the bytes are unchanged."""
    _same_parent(tree, s)
    if fs.read(s.parent, s.name, s.path) != s.expect:
        raise ApplyRefused(f"{s.path}: changed during apply (concurrent edit); it was not replaced")


def _swap(s: Swap) -> None:
    """Exchange the staged new bytes with the destination; no fallback when the filesystem cannot."""
    try:
        fs.renameat2(s.parent, s.staged, s.parent, s.name, fs.RENAME_EXCHANGE)
    except OSError as e:
        if e.errno in fs.UNSUPPORTED:
            raise ExchangeUnsupported(f"{s.path}: {NO_EXCHANGE.format(reason=e.strerror or e)}") from None
        raise
    s.state = "swapped"


def _check_replaced(s: Swap) -> None:
    """What the swap displaced must be the original; otherwise an edit raced the swap and is kept for rollback."""
    if fs.read(s.parent, s.staged, s.rel(s.staged)) != s.expect:
        raise ApplyRefused(
            f"{s.path}: was edited between the last check and the swap (concurrent edit); the rollback puts "
            "that edit back"
        )


def _verify(tree: fs.Tree, swaps: list[Swap]) -> None:
    for s in swaps:
        _same_parent(tree, s)
        data, st = fs.read_stat(s.parent, s.name, s.path)
        if st.st_ino != s.new_ino or data != s.new or stat.S_IMODE(st.st_mode) != s.new_mode:
            raise ApplyRefused(f"{s.path}: does not hold the new bytes and mode after the swap")
        if fs.read(s.parent, s.staged, s.rel(s.staged)) != s.expect:
            raise ApplyRefused(f"{s.rel(s.staged)}: the kept original changed during apply")


def _rollback(swaps: list[Swap], fault: Fault) -> list[str]:
    """Undo every swap that happened, newest first, deciding by inode rather than by bookkeeping (a signal
    can land between a swap and its state update). Never clobbers a destination edited after the swap."""
    failures = []
    for i in reversed(range(len(swaps))):
        s = swaps[i]
        try:
            try:
                data, st = fs.read_stat(s.parent, s.name, s.path)
            except FileNotFoundError:
                raise ApplyRefused(f"{s.path}: disappeared after the swap; its original is at "
                                   f"{s.rel(s.staged)}") from None
            if s.new_ino is None or st.st_ino != s.new_ino:
                if s.state == "swapped":
                    raise ApplyRefused(f"{s.path}: was replaced after the swap; left as is, its original is at "
                                       f"{s.rel(s.staged)}")
                s.state = "unchanged"
                continue
            s.state = "swapped"
            fault("before-restore", i, s.path)
            if data != s.new:
                raise ApplyRefused(f"{s.path}: was edited after the swap; left as is, its original is at "
                                   f"{s.rel(s.staged)}")
            fs.renameat2(s.parent, s.staged, s.parent, s.name, fs.RENAME_EXCHANGE)
            if os.lstat(s.name, dir_fd=s.parent).st_ino == s.new_ino:
                raise ApplyRefused(f"{s.path}: still holds the new file after restoring")
            s.state = "restored"
        except Exception as e:  # noqa: BLE001 - every failure is recorded, the rest still get restored
            s.state = "restore-failed"
            failures.append(str(e) if isinstance(e, SkillevoError) else f"{s.path}: {type(e).__name__}: {e}")
    return failures


def _remove_temps(swaps: list[Swap], log: Log) -> None:
    """Drop temp names that hold only the new bytes or an original (the originals store keeps those)."""
    for s in swaps:
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


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (SkillevoError, TransactionInterrupted)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _write_json(path: Path, doc: Mapping[str, Any]) -> None:
    safefs.write_atomic(path, documents.dump_json(doc))


def transact(tree: fs.Tree, swaps: list[Swap], *, kind: str, tx: str, paths: ApplyPaths, commit: Commit,
             now: datetime, fault: Fault, log: Log) -> str:
    """Stage, swap, verify, commit; on any failure or signal, restore every original. Returns the swap method."""
    store = paths.originals.resolve()
    journal_path = paths.state_dir / f"recovery-{utc_stamp()}.json"

    def journal(state: str, **kw: Any) -> dict[str, Any]:
        return _journal(swaps, kind=kind, tx=tx, repo=paths.repo, store=store, commit=commit.spec(),
                        started=now, state=state, **kw)

    done = 0
    with SignalGuard() as guard:
        try:
            for s in swaps:
                store_original(store, s.expect)
            _write_json(journal_path, journal("in-progress"))
            for s in swaps:
                s.new_ino = safefs.create_at(s.parent, s.staged, s.new, mode=s.new_mode)
                s.state = "staged"
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
            commit.body[commit.method_key] = method = EXCHANGE
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
            journal_path.unlink(missing_ok=True)
            undone = sum(s.state == "restored" for s in swaps)
            if isinstance(exc, ExchangeUnsupported):  # refused, not failed: nothing new is on disk
                raise BrokenEnvironment(f"{reason}; " + ("nothing was changed" if done == 0 else
                                        f"the {done} file(s) already swapped are back as they were")) from None
            raise RolledBack(f"{reason} (after {done} of {len(swaps)} swaps); rolled back: every file apply "
                             f"replaced is back as it was ({undone} restored), no new bytes remain") from exc
        try:  # committed: whatever happens now, the new bytes stay
            fault("committed", len(swaps), None)
            if commit.then_remove and marker_tx(commit.then_remove, "transaction") == commit.then_remove_tx:
                commit.then_remove.unlink()
            _remove_temps(swaps, log)
            journal_path.unlink(missing_ok=True)
        except Exception as e:  # noqa: BLE001
            log(f"apply: warning: the change is complete but cleaning up failed ({_describe(e)}); a rerun "
                f"finishes it from {journal_path}")
    if guard.pending is not None:
        log(f"apply: {signal.Signals(guard.pending).name} arrived after the point of no return; the {kind} completed")
    return method
