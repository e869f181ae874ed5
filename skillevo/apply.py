"""Apply: promote a frozen, gated overlay onto the canonical skills and their mirrors as one transaction.

The files apply rewrites are a team's shared skills, so it trusts nothing it did not just check: the
promotion is re-validated against what the pipeline holds now, every destination must still have the bytes
it had at freeze, and paths are walked one directory at a time with O_NOFOLLOW so a planted symlink can never
redirect a write. New bytes are staged beside each destination and swapped in with
renameat2(RENAME_EXCHANGE), which leaves the replaced file under the staged name: a rollback is the same
exchange again, and it restores exactly what was replaced, even an edit that raced the swap. A journal
(`recovery-<UTC>.json`) is written before the first swap, so even a SIGKILL leaves a record a rerun restores
from. Apply leaves an ordinary working-tree diff; it never commits or pushes.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import secrets
import signal
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jsonschema

from skillevo import params as params_mod
from skillevo.digests import framed_digest, sha256_bytes
from skillevo.gate import GateInputError, PromotionRefused, load_freeze, load_policy, pipeline_bindings
from skillevo.gate.promotion import validate_for_apply
from skillevo.schemas import InvalidDocument, validate

SCHEMA_VERSION = 1
TEMP_PREFIX = ".skillevo-apply-"
MAX_FILE_BYTES = 8 << 20
RENAME_EXCHANGE = 2
EXCHANGE = "renameat2-exchange"
REPLACE = "link-and-replace"  # no atomic compare-and-swap: an edit racing the replace itself can be lost
_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
RERUN = "run `dvc repro` first"

Fault = Callable[[str, int, "str | None"], None]
"""Test seam: called as fault(event, index, path) at before-swap, after-swap, verified, committed and
before-restore; whatever it raises is treated like any other failure at that point."""
Log = Callable[[str], None]


class ApplyError(Exception):
    exit_code = 1


class ApplyRefused(ApplyError):
    """Nothing was changed; the message names the reason."""

    exit_code = 2


class RolledBack(ApplyError):
    """The transaction failed or was interrupted and every replaced original is back."""

    exit_code = 3


class RollbackIncomplete(ApplyError):
    """Some original could not be put back; `record` is the recovery record a rerun restores from."""

    exit_code = 4

    def __init__(self, message: str, record: Path):
        super().__init__(message)
        self.record = record


class _Interrupted(BaseException):
    """SIGINT/SIGTERM during a transaction: BaseException so no `except Exception` swallows it."""


@dataclass(frozen=True)
class ApplyPaths:
    """Every input and output of the stage (defaults = the DVC layout, relative to the working directory)."""

    promotion: Path = Path("results/gate/promotion.json")
    freeze: Path = Path("results/freeze")
    incumbent_bench: Path = Path("results/bench-incumbent")
    params: Path = Path("params.yaml")
    repo: Path = Path(".")
    receipt: Path = Path("results/apply/receipt.json")

    @property
    def state_dir(self) -> Path:
        """Receipt, originals store, recovery records and the lock live together."""
        return self.receipt.parent

    @property
    def originals(self) -> Path:
        return self.state_dir / "originals"


@dataclass
class Outcome:
    """What an apply or revert did, and the summary the stage prints."""

    action: str  # applied | reverted
    files: list[dict[str, str]]
    swap: str
    record: Path  # the receipt (applied) or the reverted record
    diff_stat: str
    inputs: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [*self.inputs, f"apply: {self.action} {len(self.files)} file(s) (swap: {self.swap}):"]
        lines += [f"  {f['path']}  {f['before_sha256'][:12]} -> {f['after_sha256'][:12]}" for f in self.files]
        lines += [f"{'receipt' if self.action == 'applied' else 'revert record'}: {self.record}", "git diff --stat:"]
        lines += ["  " + line for line in self.diff_stat.splitlines()]
        paths = " ".join(f["path"] for f in self.files)
        lines += [
            "next steps:",
            f"  1. review the change: git diff -- {paths}",
            "  2. run your checks (make test, your own evaluation)",
            f"  3. commit it yourself when satisfied: git add -- {paths} && git commit",
            "apply never commits or pushes." + ("  To undo this apply: make revert" if self.action == "applied"
                                                else ""),
        ]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- paths


def split_relative(rel: str, what: str = "path") -> list[str]:
    """A plain repo-relative POSIX path as components; anything that could escape the root is refused."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or "\0" in rel or any(p in ("", ".", "..") for p in parts):
        raise ApplyRefused(f"{what} {rel!r} is not a plain relative path (no '/', '.', '..' components)")
    return parts


class _Tree:
    """A directory opened once; everything below it is reached through directory fds, never by path string."""

    def __init__(self, root: Path):
        self.root = root
        try:
            self.fd = os.open(root, _DIR_FLAGS)
        except OSError as e:
            raise ApplyRefused(f"{root}: cannot open as a directory without following symlinks: {e.strerror}") from e
        self._held: list[int] = []

    def __enter__(self) -> _Tree:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in (*self._held, self.fd):
            os.close(fd)
        self._held.clear()

    def open_dir(self, parts: list[str], *, hold: bool = False) -> int:
        """The directory at `parts`; a symlink or non-directory anywhere on the way is refused."""
        fd = os.dup(self.fd)
        try:
            for i, part in enumerate(parts):
                where = "/".join(parts[: i + 1])
                try:
                    st = os.lstat(part, dir_fd=fd)
                except FileNotFoundError:
                    raise ApplyRefused(f"{where}: does not exist") from None
                if stat.S_ISLNK(st.st_mode):
                    raise ApplyRefused(f"{where}: is a symlink; apply never follows symlinks")
                if not stat.S_ISDIR(st.st_mode):
                    raise ApplyRefused(f"{where}: is not a directory")
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        if hold:
            self._held.append(fd)
        return fd

    @contextmanager
    def directory(self, parts: list[str]) -> Iterator[int]:
        fd = self.open_dir(parts)
        try:
            yield fd
        finally:
            os.close(fd)

    def files(self) -> dict[str, bytes]:
        """Every regular file below the root, by relative POSIX path; symlinks and special files are refused."""
        found: dict[str, bytes] = {}

        def walk(fd: int, prefix: str) -> None:
            with os.scandir(fd) as entries:
                names = sorted(e.name for e in entries)
            for name in names:
                rel = f"{prefix}{name}"
                st = os.lstat(name, dir_fd=fd)
                if stat.S_ISDIR(st.st_mode):
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    try:
                        walk(child, rel + "/")
                    finally:
                        os.close(child)
                else:
                    found[rel] = read_at(fd, name, f"{self.root}/{rel}")[0]

        walk(self.fd, "")
        return found


def read_at(dir_fd: int, name: str, where: str) -> tuple[bytes, os.stat_result]:
    """A regular file's bytes, opened without following a symlink; FileNotFoundError passes through."""
    st = os.lstat(name, dir_fd=dir_fd)
    if stat.S_ISLNK(st.st_mode):
        raise ApplyRefused(f"{where}: is a symlink; apply never follows symlinks")
    if not stat.S_ISREG(st.st_mode):
        raise ApplyRefused(f"{where}: is not a regular file")
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ApplyRefused(f"{where}: is not a regular file")
        chunks, total = [], 0
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if total > MAX_FILE_BYTES:
                raise ApplyRefused(f"{where}: larger than {MAX_FILE_BYTES} bytes")
            chunks.append(chunk)
        return b"".join(chunks), st
    finally:
        os.close(fd)


def _write_new(dir_fd: int, name: str, data: bytes, mode: int) -> int:
    """Create `name` exclusively with `data` and `mode`, durable before it is used; returns its inode."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, mode)
        os.fsync(fd)
        return os.fstat(fd).st_ino
    except BaseException:
        os.unlink(name, dir_fd=dir_fd)  # never leave a half-written file beside a destination
        raise
    finally:
        os.close(fd)


def _renameat2(old_dir: int, old: str, new_dir: int, new: str, flags: int) -> None:
    """libc renameat2 through ctypes (the os module has no exchange); ENOSYS when libc lacks it."""
    fn = getattr(_LIBC, "renameat2", None)
    if fn is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available in this C library")
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    if fn(old_dir, os.fsencode(old), new_dir, os.fsencode(new), flags) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), new)


_LIBC = ctypes.CDLL(None, use_errno=True)


def _fsync_dir(path_or_fd: Path | int) -> None:
    if isinstance(path_or_fd, int):
        os.fsync(path_or_fd)
        return
    fd = os.open(path_or_fd, _DIR_FLAGS)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_json(path: Path, doc: Mapping[str, Any]) -> None:
    """Atomically and durably: a reader (or a rerun after a crash) sees the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    with open(tmp, "x", encoding="utf-8") as f:
        f.write(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _store(store: Path, data: bytes) -> Path:
    """Content-addressed copy of bytes a transaction replaces: what revert and recovery restore from."""
    path = store / sha256_bytes(data)
    if path.is_file() and not path.is_symlink() and sha256_bytes(path.read_bytes()) == path.name:
        return path
    store.mkdir(parents=True, exist_ok=True)
    tmp = store / f".{path.name}.{secrets.token_hex(4)}.tmp"
    with open(tmp, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(store)
    return path


def _utc_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat()


@contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    """One apply, revert or recovery at a time per state directory."""
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ApplyRefused(f"another apply or revert holds {state_dir / '.lock'}; wait for it to finish") from None
        yield
    finally:
        os.close(fd)


class _SignalGuard:
    """SIGINT/SIGTERM become _Interrupted until defer(); afterwards they are noted, never allowed to cut a
    rollback or a commit short. Previous handlers come back on exit."""

    def __init__(self) -> None:
        self.deferring = False
        self.pending: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _SignalGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        if self.deferring:
            self.pending = signum
            return
        self.deferring = True
        raise _Interrupted(f"interrupted by {signal.Signals(signum).name}")

    def defer(self) -> None:
        self.deferring = True

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


# ---------------------------------------------------------------------------------------- transaction


@dataclass
class _Swap:
    """One destination in a transaction: what it must hold now, what it will hold, and where both live."""

    path: str  # repo-relative destination
    parent: int  # held directory fd
    parent_id: tuple[int, int]
    name: str
    mode: int
    expect: bytes  # the bytes it must still hold when swapped (its original)
    new: bytes
    staged: str  # temp name beside it: the new bytes until an exchange, the original after
    link: str  # temp name for the replace fallback's hard link (or copy) of the original
    new_ino: int | None = None
    method: str | None = None
    state: str = "planned"  # planned, staged, swapped, restored, restore-failed, unchanged

    @property
    def backup(self) -> str:
        return self.staged if self.method == EXCHANGE else self.link

    def rel(self, name: str) -> str:
        return "/".join([*self.path.split("/")[:-1], name])


def _open_destination(tree: _Tree, rel: str) -> tuple[int, str, bytes, os.stat_result]:
    parts = split_relative(rel, "destination")
    parent = tree.open_dir(parts[:-1], hold=True)
    try:
        data, st = read_at(parent, parts[-1], rel)
    except FileNotFoundError:
        raise ApplyRefused(
            f"{rel}: does not exist; every destination recorded at freeze (canonical skill and mirrors) must "
            "exist (a missing mirror?)"
        ) from None
    return parent, parts[-1], data, st


def _open_all(tree: _Tree, targets: Mapping[str, bytes], tx: str) -> list[_Swap]:
    """Open every destination (refusing symlinks, special and missing files) and read what it holds now."""
    swaps = []
    for i, rel in enumerate(sorted(targets)):
        parent, name, data, st = _open_destination(tree, rel)
        pst = os.fstat(parent)
        swaps.append(_Swap(rel, parent, (pst.st_dev, pst.st_ino), name, stat.S_IMODE(st.st_mode), data,
                           targets[rel], f"{TEMP_PREFIX}{tx}-{i}.swap", f"{TEMP_PREFIX}{tx}-{i}.orig"))
    return swaps


def _journal(swaps: list[_Swap], *, kind: str, tx: str, repo: Path, store: Path, commit: Mapping[str, Any],
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
            "original_at": s.rel(s.backup) if swapped else s.path,
            "new_at": s.path if swapped else s.rel(s.staged),
            "original_copy": str(store / sha256_bytes(s.expect)),
            "staged": s.rel(s.staged),
            "link": s.rel(s.link),
        })
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "transaction": tx,
        "repo": str(repo.resolve()),
        "started_at": _iso(started),
        "state": state,
        "failure": failure,
        "rollback_failures": failures or [],
        "commit": dict(commit),
        "files": files,
        "instructions": (
            "Rerun the same command (`make apply`, `make revert` or `python -m stages.apply [--revert]`): it "
            "restores every original listed here before doing anything else. By hand: paths are relative to "
            "`repo`; a destination holding new_sha256 has its original under `staged` (exchange) or `link` "
            "(replace) beside it, and original_copy always holds the original bytes."
        ),
    }


def _recheck(tree: _Tree, s: _Swap) -> None:
    """Immediately before a swap: the parent is still the directory we opened and the bytes are unchanged."""
    with tree.directory(s.path.split("/")[:-1]) as fd:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != s.parent_id:
            raise ApplyRefused(f"{s.path}: its directory was moved or replaced during apply")
    data, _ = read_at(s.parent, s.name, s.path)
    if data != s.expect:
        raise ApplyRefused(f"{s.path}: changed during apply (concurrent edit); it was not replaced")


def _swap(s: _Swap) -> None:
    s.method = EXCHANGE
    try:
        _renameat2(s.parent, s.staged, s.parent, s.name, RENAME_EXCHANGE)
        s.state = "swapped"
        return
    except OSError as e:
        if e.errno not in _UNSUPPORTED:
            raise
    s.method = REPLACE
    try:
        os.link(s.name, s.link, src_dir_fd=s.parent, dst_dir_fd=s.parent, follow_symlinks=False)
    except OSError:
        data, _ = read_at(s.parent, s.name, s.path)
        _write_new(s.parent, s.link, data, s.mode)
    os.rename(s.staged, s.name, src_dir_fd=s.parent, dst_dir_fd=s.parent)
    s.state = "swapped"


def _check_replaced(s: _Swap) -> None:
    """What the swap displaced must be the original; otherwise an edit raced the swap and is kept for rollback."""
    data, _ = read_at(s.parent, s.backup, s.rel(s.backup))
    if data != s.expect:
        raise ApplyRefused(
            f"{s.path}: was edited between the last check and the swap (concurrent edit); the rollback puts "
            "that edit back"
        )


def _verify(tree: _Tree, swaps: list[_Swap]) -> None:
    for s in swaps:
        with tree.directory(s.path.split("/")[:-1]) as fd:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != s.parent_id:
                raise ApplyRefused(f"{s.path}: its directory was moved or replaced during apply")
        data, st = read_at(s.parent, s.name, s.path)
        if st.st_ino != s.new_ino or data != s.new:
            raise ApplyRefused(f"{s.path}: does not hold the new bytes after the swap")
        if read_at(s.parent, s.backup, s.rel(s.backup))[0] != s.expect:
            raise ApplyRefused(f"{s.rel(s.backup)}: the kept original changed during apply")


def _rollback(swaps: list[_Swap], fault: Fault) -> list[str]:
    """Undo every swap that happened, newest first, deciding by inode rather than by bookkeeping (a signal
    can land between a swap and its state update). Never clobbers a destination edited after the swap."""
    failures = []
    for i in reversed(range(len(swaps))):
        s = swaps[i]
        try:
            try:
                data, st = read_at(s.parent, s.name, s.path)
            except FileNotFoundError:
                raise ApplyRefused(f"{s.path}: disappeared after the swap; its original is at "
                                   f"{s.rel(s.backup)}") from None
            if s.new_ino is None or st.st_ino != s.new_ino:
                if s.state == "swapped":
                    raise ApplyRefused(f"{s.path}: was replaced after the swap; left as is, its original is at "
                                       f"{s.rel(s.backup)}")
                s.state = "unchanged"
                continue
            s.state = "swapped"
            fault("before-restore", i, s.path)
            if data != s.new:
                raise ApplyRefused(f"{s.path}: was edited after the swap; left as is, its original is at "
                                   f"{s.rel(s.backup)}")
            if s.method == EXCHANGE:
                _renameat2(s.parent, s.staged, s.parent, s.name, RENAME_EXCHANGE)
            else:
                os.rename(s.link, s.name, src_dir_fd=s.parent, dst_dir_fd=s.parent)
            if os.lstat(s.name, dir_fd=s.parent).st_ino == s.new_ino:
                raise ApplyRefused(f"{s.path}: still holds the new file after restoring")
            s.state = "restored"
        except Exception as e:  # noqa: BLE001 - every failure is recorded, the rest still get restored
            s.state = "restore-failed"
            failures.append(str(e) if isinstance(e, ApplyError) else f"{s.path}: {type(e).__name__}: {e}")
    return failures


def _remove_temps(swaps: list[_Swap], log: Log) -> None:
    """Drop temp names that hold only the new bytes or an original (the originals store keeps those)."""
    for s in swaps:
        for name in {s.staged, s.link}:
            try:
                data, _ = read_at(s.parent, name, s.rel(name))
            except FileNotFoundError:
                continue
            except ApplyError as e:
                log(f"apply: warning: left {s.rel(name)} in place: {e}")
                continue
            if data in (s.new, s.expect):
                os.unlink(name, dir_fd=s.parent)
            else:
                log(f"apply: warning: kept {s.rel(name)}: it holds bytes that are neither the original nor the new")
        os.fsync(s.parent)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (ApplyError, _Interrupted)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


@dataclass
class _Commit:
    """How a transaction makes itself final: write `marker` (carrying the transaction id under `key`),
    then remove `then_remove` if it still carries `then_remove_tx` (revert retires the receipt so)."""

    marker: Path
    key: str
    method_key: str
    body: dict[str, Any]
    then_remove: Path | None = None
    then_remove_tx: str | None = None

    def spec(self) -> dict[str, Any]:
        return {"path": str(self.marker.resolve()), "key": self.key,
                "then_remove": str(self.then_remove.resolve()) if self.then_remove else None,
                "then_remove_transaction": self.then_remove_tx}


def _transact(tree: _Tree, swaps: list[_Swap], *, kind: str, tx: str, paths: ApplyPaths, commit: _Commit,
              now: datetime, fault: Fault, log: Log) -> str:
    """Stage, swap, verify, commit; on any failure or signal, restore every original. Returns the swap method."""
    store = paths.originals.resolve()
    journal_path = paths.state_dir / f"recovery-{_utc_stamp()}.json"

    def journal(state: str, **kw: Any) -> dict[str, Any]:
        return _journal(swaps, kind=kind, tx=tx, repo=paths.repo, store=store, commit=commit.spec(),
                        started=now, state=state, **kw)

    done = 0
    with _SignalGuard() as guard:
        try:
            for s in swaps:
                _store(store, s.expect)
            _write_json(journal_path, journal("in-progress"))
            for s in swaps:
                s.new_ino = _write_new(s.parent, s.staged, s.new, s.mode)
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
            commit.body[commit.method_key] = method = "+".join(sorted({s.method for s in swaps if s.method}))
            _write_json(commit.marker, commit.body)
        except BaseException as exc:  # noqa: BLE001 - an interrupt must roll back too
            guard.defer()
            reason = _describe(exc)
            failures = _rollback(swaps, fault)
            if _marker_tx(commit.marker, commit.key) == tx:  # failed after the marker landed: withdraw it
                commit.marker.unlink()
            if failures:
                doc = journal("rollback-incomplete", failure=reason, failures=failures)
                try:
                    _write_json(journal_path, doc)
                except OSError as e:
                    journal_path = paths.state_dir / f"recovery-{_utc_stamp()}-{tx}.json"
                    log(f"apply: could not update the recovery record ({e}); trying {journal_path}")
                    _write_json(journal_path, doc)
                raise RollbackIncomplete(
                    f"{reason}; rolling back failed for: {'; '.join(failures)}. Recovery record: {journal_path} "
                    "(rerun the same command to restore from it)", journal_path) from exc
            _remove_temps(swaps, log)
            journal_path.unlink(missing_ok=True)
            undone = sum(s.state == "restored" for s in swaps)
            raise RolledBack(f"{reason} (after {done} of {len(swaps)} swaps); rolled back: every file apply "
                             f"replaced is back as it was ({undone} restored), no new bytes remain") from exc
        try:  # committed: whatever happens now, the new bytes stay
            fault("committed", len(swaps), None)
            if commit.then_remove and _marker_tx(commit.then_remove, "transaction") == commit.then_remove_tx:
                commit.then_remove.unlink()
            _remove_temps(swaps, log)
            journal_path.unlink(missing_ok=True)
        except Exception as e:  # noqa: BLE001
            log(f"apply: warning: the change is complete but cleaning up failed ({_describe(e)}); a rerun "
                f"finishes it from {journal_path}")
    if guard.pending is not None:
        log(f"apply: {signal.Signals(guard.pending).name} arrived after the point of no return; the {kind} completed")
    return method


def _marker_tx(path: Path, key: str) -> str | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc.get(key) if isinstance(doc, dict) else None


# ------------------------------------------------------------------------------------------- recovery


def recover(paths: ApplyPaths, *, log: Log) -> int:
    """Finish or undo every transaction a crash left behind (recovery-*.json). Returns how many it handled.

    A committed transaction (its marker carries its id) is only cleaned up; any other is undone: every
    destination that holds the new bytes gets back what it held before, from the kept backup or the originals
    store. A destination holding anything else is never overwritten: that is a refusal with instructions.
    """
    records = sorted(paths.state_dir.glob("recovery-*.json")) if paths.state_dir.is_dir() else []
    for record in records:
        try:
            doc = json.loads(record.read_text(encoding="utf-8"))
            files, commit, tx = doc["files"], doc["commit"], doc["transaction"]
            repo = Path(doc["repo"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ApplyRefused(f"recovery record {record} is unreadable ({e}); restore the files it names by hand, "
                               "then move it aside") from None
        if repo != paths.repo.resolve():
            raise ApplyRefused(f"recovery record {record} is for repository {repo}; rerun with --repo {repo}")
        committed = _marker_tx(Path(commit["path"]), commit["key"]) == tx
        with _Tree(paths.repo) as tree:
            if committed:
                retired = commit.get("then_remove")
                if retired and _marker_tx(Path(retired), "transaction") == commit.get("then_remove_transaction"):
                    Path(retired).unlink()
                for entry in files:
                    _recover_entry(tree, entry, record, restore=False, log=log)
                log(f"apply: {record.name}: the {doc.get('kind')} had committed; cleaned up after it")
            else:
                restored = sum(_recover_entry(tree, entry, record, restore=True, log=log) for entry in files)
                log(f"apply: recovered from {record}: restored {restored} file(s) to their pre-{doc.get('kind')} "
                    "bytes")
        record.rename(record.with_name("resolved-" + record.name))
    return len(records)


def _recover_entry(tree: _Tree, entry: Mapping[str, Any], record: Path, *, restore: bool, log: Log) -> bool:
    path, original, new = entry["path"], entry["original_sha256"], entry["new_sha256"]
    parts = split_relative(path, "destination")
    temps = [split_relative(entry[key], "temp")[-1] for key in ("staged", "link")]
    with tree.directory(parts[:-1]) as parent:
        def sha_of(name: str) -> str | None:
            try:
                return sha256_bytes(read_at(parent, name, path)[0])
            except FileNotFoundError:
                return None

        current = sha_of(parts[-1])
        restored = False
        if restore and current != original and (current == new or current is None):
            backup = next((t for t in temps if sha_of(t) not in (None, new)), None)
            if backup is not None:  # exactly what the swap displaced
                os.rename(backup, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
            else:
                copy = Path(entry["original_copy"])
                data = copy.read_bytes() if copy.is_file() else b""
                if sha256_bytes(data) != original:
                    raise ApplyRefused(f"{record}: no intact copy of {path}'s original ({original[:12]}) is left; "
                                       f"restore it from git (git checkout -- {path}), then move {record} aside")
                mode = 0o644 if current is None else stat.S_IMODE(os.lstat(parts[-1], dir_fd=parent).st_mode)
                tmp = f"{TEMP_PREFIX}recover-{secrets.token_hex(6)}"
                _write_new(parent, tmp, data, mode)
                os.rename(tmp, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
            os.fsync(parent)
            restored = True
        elif current not in (original, new) or (not restore and current != new):
            if restore:
                raise ApplyRefused(
                    f"{record}: {path} holds bytes ({(current or 'missing')[:12]}) that are neither its original "
                    f"({original[:12]}) nor the applied ones ({new[:12]}); recovery will not overwrite them. Inspect "
                    f"it; to restore the original run: cp {entry['original_copy']} {tree.root / path} ; then move "
                    f"{record} aside (mv {record} {record.with_name('resolved-' + record.name)}) and rerun"
                )
            log(f"apply: warning: {path} changed after the committed {record.name}; left as is")
        for temp in temps:
            digest = sha_of(temp)
            if digest in (original, new):
                os.unlink(temp, dir_fd=parent)
            elif digest is not None:
                log(f"apply: warning: kept {'/'.join([*parts[:-1], temp])}: it holds neither the original nor "
                    "the new bytes")
        return restored


# ----------------------------------------------------------------------------------------------- apply


@dataclass(frozen=True)
class _Inputs:
    promotion_sha256: str
    overlay_digest: str
    destinations: dict[str, str]  # repo-relative path -> sha256 at freeze
    new: dict[str, bytes]  # repo-relative path -> the frozen overlay bytes it receives
    described: list[str]


def _read_input(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ApplyRefused(f"{path}: missing ({what}); apply never re-runs earlier stages: {RERUN}") from None
    except OSError as e:
        raise ApplyRefused(f"{path}: cannot read ({what}): {e.strerror}") from None


def _json_input(path: Path, what: str) -> Any:
    try:
        return json.loads(_read_input(path, what))
    except (UnicodeDecodeError, ValueError) as e:
        raise ApplyRefused(f"{path}: not valid JSON ({what}): {e}") from None


def _load_inputs(paths: ApplyPaths, now: datetime) -> _Inputs:
    """Everything apply needs, each checked against the others as the pipeline holds them now."""
    promotion_bytes = _read_input(paths.promotion, "the gate's promotion.json")
    try:
        promotion = json.loads(promotion_bytes)
    except (UnicodeDecodeError, ValueError) as e:
        raise ApplyRefused(f"{paths.promotion}: not valid JSON: {e}") from None
    manifest_path = paths.freeze / "manifest.json"
    _read_input(manifest_path, "the freeze manifest")
    bench_path = paths.incumbent_bench / "bench.json"
    bench = _json_input(bench_path, "the incumbent bench provenance")
    try:
        manifest = load_freeze(manifest_path)
        validate(manifest, "freeze-manifest.schema.json", manifest_path)
        validate(bench, "bench-run.schema.json", bench_path)
        params = params_mod.load(paths.params)
        policy = load_policy(paths.params)
    except (GateInputError, InvalidDocument, params_mod.ParamsError) as e:
        raise ApplyRefused(str(e)) from None

    if isinstance(promotion, dict) and promotion.get("overlay_digest", manifest["overlay_digest"]) != manifest[
            "overlay_digest"]:
        raise ApplyRefused(
            f"{manifest_path}: overlay_digest {manifest['overlay_digest'][:12]} is not the overlay "
            f"{paths.promotion} was decided on ({str(promotion['overlay_digest'])[:12]}): the promotion is stale; "
            f"{RERUN}"
        )
    model_now = params_mod.model_binding(params)
    effort_now = params_mod.section(params, "model").get("effort")
    if (model_now, effort_now) != (bench["model"], bench["effort"]):
        raise ApplyRefused(
            f"{bench_path}: was benchmarked with model {bench['model']['name']!r} (effort {bench['effort']!r}) but "
            f"{paths.params} now says {model_now['name']!r} (effort {effort_now!r}): the bench is stale; {RERUN}"
        )
    try:
        validate_for_apply(promotion, pipeline_bindings(manifest, bench, policy), now)
    except PromotionRefused as e:
        raise ApplyRefused(f"{paths.promotion}: {e}") from None

    overlay = _verified_overlay(paths.freeze / "overlay", manifest)
    destinations = dict(manifest["destinations"])
    new = _destination_bytes(params, paths.params, manifest_path, destinations, overlay)
    return _Inputs(
        sha256_bytes(promotion_bytes), manifest["overlay_digest"], destinations, new,
        [f"apply: using {paths.promotion} (generated {promotion['generated_at']}, promotion "
         f"{sha256_bytes(promotion_bytes)[:12]}), frozen overlay {manifest['overlay_digest'][:12]} in {paths.freeze}, "
         f"{bench_path}; no stage was re-run"],
    )


def _verified_overlay(overlay_dir: Path, manifest: Mapping[str, Any]) -> dict[str, bytes]:
    """The frozen overlay's files, each matching the manifest, the set matching its digest."""
    with _Tree(overlay_dir) as tree:
        files = tree.files()
    listed = {f["path"]: f for f in manifest["files"]}
    stale = "the frozen overlay no longer matches its manifest; " + RERUN
    for rel in sorted(set(files) | set(listed)):
        if rel not in listed:
            raise ApplyRefused(f"{overlay_dir / rel}: not listed in manifest.json; {stale}")
        if rel not in files:
            raise ApplyRefused(f"{overlay_dir / rel}: listed in manifest.json but missing; {stale}")
        if sha256_bytes(files[rel]) != listed[rel]["sha256"] or len(files[rel]) != listed[rel]["size"]:
            raise ApplyRefused(f"{overlay_dir / rel}: sha256 {sha256_bytes(files[rel])[:12]} is not the manifest's "
                               f"{listed[rel]['sha256'][:12]}; {stale}")
    digest = framed_digest(files.items())
    if digest != manifest["overlay_digest"]:
        raise ApplyRefused(f"{overlay_dir}: digest {digest[:12]} is not the manifest's overlay_digest "
                           f"{manifest['overlay_digest'][:12]}; {stale}")
    return files


def skill_roots(params: Mapping[str, Any], params_path: Path) -> list[str]:
    """`skills.dir` then every `skills.mirrors` entry, as plain repo-relative directories."""
    try:
        skills = params_mod.section(dict(params), "skills")
    except params_mod.ParamsError as e:
        raise ApplyRefused(f"{params_path}: {e}") from None
    mirrors = skills.get("mirrors") or []
    roots = [skills.get("dir", "skills"), *(mirrors if isinstance(mirrors, list) else [mirrors])]
    clean = []
    for root in roots:
        if not isinstance(root, str):
            raise ApplyRefused(f"{params_path}: skills.dir / skills.mirrors entries must be strings, got {root!r}")
        root = root.strip().removeprefix("./").rstrip("/")
        split_relative(root, f"{params_path}: skills directory")
        if root in clean:
            raise ApplyRefused(f"{params_path}: skills directory {root!r} is listed twice")
        clean.append(root)
    return clean


def _destination_bytes(params: Mapping[str, Any], params_path: Path, manifest_path: Path,
                       destinations: Mapping[str, str], overlay: Mapping[str, bytes]) -> dict[str, bytes]:
    """Each destination's new bytes; the manifest's set must be exactly what skills.dir + skills.mirrors imply."""
    implied = {f"{root}/{rel}": data for root in skill_roots(params, params_path) for rel, data in overlay.items()}
    for rel in sorted(implied):
        if rel not in destinations:
            raise ApplyRefused(f"{manifest_path}: destinations lack {rel}, which {params_path} skills.dir/"
                               f"skills.mirrors implies (a missing mirror): the freeze is stale; {RERUN}")
    for rel in sorted(destinations):
        if rel not in implied:
            raise ApplyRefused(f"{manifest_path}: destination {rel} is not implied by {params_path} skills.dir/"
                               f"skills.mirrors and the overlay files")
    return implied


def apply_promotion(paths: ApplyPaths, *, now: datetime, fault: Fault | None = None,
                    log: Log = lambda line: None) -> Outcome:
    """Check every binding, then replace every destination with the frozen overlay's bytes, or nothing."""
    if now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    with _locked(paths.state_dir):
        recover(paths, log=log)
        inputs = _load_inputs(paths, now)
        tx = secrets.token_hex(8)
        with _Tree(paths.repo) as tree:
            swaps = _open_all(tree, inputs.new, tx)
            if _marker_tx(paths.receipt, "promotion_sha256") == inputs.promotion_sha256 and all(
                    s.expect == s.new for s in swaps):
                raise ApplyRefused(f"already applied: {paths.receipt} records promotion "
                                   f"{inputs.promotion_sha256[:12]} and every destination holds the overlay's bytes")
            for s in swaps:
                actual, frozen = sha256_bytes(s.expect), inputs.destinations[s.path]
                if actual != frozen:
                    raise ApplyRefused(
                        f"{s.path}: edited after freeze (sha256 {actual[:12]} is not the {frozen[:12]} recorded at "
                        "freeze); apply will not overwrite it: commit or discard the edit and re-run the pipeline")
            files = [{"path": s.path, "before_sha256": sha256_bytes(s.expect), "after_sha256": sha256_bytes(s.new)}
                     for s in swaps]
            receipt = {
                "schema_version": SCHEMA_VERSION,
                "promotion": str(paths.promotion),
                "promotion_sha256": inputs.promotion_sha256,
                "overlay_digest": inputs.overlay_digest,
                "applied_at": _iso(now),
                "repo": str(paths.repo.resolve()),
                "originals": str(paths.originals.resolve()),
                "files": files,
            }
            method = _transact(tree, swaps, kind="apply", tx=tx, paths=paths,
                               commit=_Commit(paths.receipt, "transaction", "swap", receipt),
                               now=now, fault=fault or _no_fault, log=log)
    return Outcome("applied", files, method, paths.receipt, diff_stat(paths.repo, [f["path"] for f in files]),
                   inputs.described)


def _no_fault(event: str, index: int, path: str | None) -> None:
    return None


# ---------------------------------------------------------------------------------------------- revert

_RECEIPT_SCHEMA = {
    "type": "object",
    "required": ["schema_version", "transaction", "promotion_sha256", "files"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "transaction": {"type": "string", "minLength": 1},
        "files": {
            "type": "array", "minItems": 1,
            "items": {
                "type": "object", "required": ["path", "before_sha256", "after_sha256"],
                "properties": {
                    "path": {"type": "string"},
                    "before_sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                    "after_sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                },
            },
        },
    },
}


def revert(paths: ApplyPaths, *, now: datetime, fault: Fault | None = None,
           log: Log = lambda line: None) -> Outcome:
    """Put back the pre-apply bytes the receipt names, as the same transaction, unless a file changed since."""
    if now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    with _locked(paths.state_dir):
        recover(paths, log=log)
        if not paths.receipt.exists():
            raise ApplyRefused(f"no receipt at {paths.receipt}: there is no apply to revert (apply writes one when "
                               "it succeeds; a reverted apply's receipt is renamed reverted-*.json)")
        receipt = _json_input(paths.receipt, "the apply receipt")
        errors = sorted(jsonschema.Draft202012Validator(_RECEIPT_SCHEMA).iter_errors(receipt), key=str)
        if errors:
            raise ApplyRefused(f"{paths.receipt}: not a receipt apply wrote: {errors[0].message}")
        after = {f["path"]: f["after_sha256"] for f in receipt["files"]}
        before = {}
        for f in receipt["files"]:
            copy = paths.originals / f["before_sha256"]
            data = copy.read_bytes() if copy.is_file() and not copy.is_symlink() else None
            if data is None or sha256_bytes(data) != f["before_sha256"]:
                raise ApplyRefused(f"{copy}: the pre-apply bytes of {f['path']} are missing or damaged; restore it "
                                   f"from git instead (git checkout -- {f['path']})")
            before[f["path"]] = data
        tx = secrets.token_hex(8)
        with _Tree(paths.repo) as tree:
            swaps = _open_all(tree, before, tx)
            for s in swaps:
                if sha256_bytes(s.expect) != after[s.path]:
                    raise ApplyRefused(
                        f"{s.path}: changed since the apply (sha256 {sha256_bytes(s.expect)[:12]} is not the applied "
                        f"{after[s.path][:12]}); revert will not overwrite it")
            marker = paths.state_dir / f"reverted-{_utc_stamp()}.json"
            body = {**receipt, "reverted_at": _iso(now), "receipt": str(paths.receipt)}
            commit = _Commit(marker, "revert_transaction", "revert_swap", body, paths.receipt, receipt["transaction"])
            method = _transact(tree, swaps, kind="revert", tx=tx, paths=paths, commit=commit, now=now,
                               fault=fault or _no_fault, log=log)
    files = [{"path": p, "before_sha256": after[p], "after_sha256": sha256_bytes(before[p])} for p in sorted(before)]
    return Outcome("reverted", files, method, marker, diff_stat(paths.repo, sorted(before)))


def diff_stat(repo: Path, paths: list[str]) -> str:
    """`git diff --stat` of exactly these paths, without running repo-configured helpers; never fatal."""
    command = ["git", "-c", "core.fsmonitor=false", "-C", str(repo), "diff", "--no-ext-diff", "--no-textconv",
               "--stat", "--", *paths]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"(git diff unavailable: {e})"
    if result.returncode != 0:
        return "(not a git repository, or git failed; no diff shown)"
    return result.stdout.rstrip() or "(no difference from the index)"
