"""Finish or undo what a crashed transaction left behind, from its recovery record, before anything else runs.

A transaction writes `recovery-<UTC>.json` before its first change and removes it when it is done, so a record
that is still there means the process died (SIGKILL, power loss) or its rollback failed. Every apply,
revert and rerun starts here.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skillevo.apply import fs
from skillevo.apply.common import ApplyPaths, ApplyRefused, Log
from skillevo.apply.journal import marker_tx
from skillevo.apply.rollback import remove_empty_dirs, retract
from skillevo.files import documents, safefs
from skillevo.files.digests import sha256_bytes
from skillevo.files.errors import BadInput


def recover(paths: ApplyPaths, *, log: Log) -> int:
    """Finish or undo every transaction a crash left behind (recovery-*.json). Returns how many it handled.

    A committed transaction (its marker carries its id) is only cleaned up; any other is undone: every
    destination that holds the new bytes gets back what it held before, from the kept backup or the originals
    store, every file it created is deleted (only the very file it created, holding the bytes it wrote) and
    every directory it made is removed once empty. A destination holding anything else is never overwritten or
    deleted: that is a refusal with instructions.
    """
    records = sorted(paths.state_dir.glob("recovery-*.json")) if paths.state_dir.is_dir() else []
    for record in records:
        try:
            doc = documents.load_json(record, what="recovery record")
            files, commit, tx = doc["files"], doc["commit"], doc["transaction"]
            dirs = doc.get("dirs", [])
            repo = Path(doc["repo"])
        except (OSError, ValueError, KeyError, TypeError) as e:  # BadInput is a ValueError
            raise ApplyRefused(f"recovery record {record} is unreadable ({e}); restore the files it names by hand, "
                               "then move it aside") from None
        if repo != paths.repo.resolve():
            raise ApplyRefused(f"recovery record {record} is for repository {repo}; rerun with --repo {repo}")
        committed = marker_tx(Path(commit["path"]), commit["key"]) == tx
        with fs.Tree(paths.repo) as tree:
            if committed:
                retired = commit.get("then_remove")
                if retired and marker_tx(Path(retired), "transaction") == commit.get("then_remove_transaction"):
                    Path(retired).unlink()
                for entry in files:
                    _recover_entry(tree, entry, record, restore=False, log=log)
                remove_empty_dirs(tree, commit.get("then_remove_dirs") or [], log)
                log(f"apply: {record.name}: the {doc.get('kind')} had committed; cleaned up after it")
            else:
                restored = sum(_recover_entry(tree, entry, record, restore=True, log=log) for entry in files)
                for entry in reversed(dirs):
                    _remove_made(tree, entry, log)
                log(f"apply: recovered from {record}: restored {restored} file(s) to their pre-{doc.get('kind')} "
                    "state")
        record.rename(record.with_name("resolved-" + record.name))
    return len(records)


def _stored_copy(copy: Path) -> bytes:
    try:
        return fs.read(None, copy, str(copy), "stored original")
    except (OSError, BadInput):
        return b""


def _recover_entry(tree: fs.Tree, entry: Mapping[str, Any], record: Path, *, restore: bool, log: Log) -> bool:
    path, original, new = entry["path"], entry["original_sha256"], entry["new_sha256"]
    op = entry.get("op", "replace")  # records from before files could be created are all replacements
    parts = fs.split_relative(path, "destination")
    # `link`: where records of the former non-atomic link-and-replace swap kept the original; still read
    temps = [fs.split_relative(entry[key], "temp")[-1] for key in ("staged", "link") if entry.get(key)]
    if op == "create":
        parent, found = tree.open_existing(parts[:-1])
        if found < len(parts) - 1:  # its directory was never made (or is gone): nothing of it is left
            return False
    else:
        parent = tree.open_dir(parts[:-1], hold=True)

    def sha_of(name: str) -> str | None:
        try:
            return sha256_bytes(fs.read(parent, name, path))
        except FileNotFoundError:
            return None

    current = sha_of(parts[-1])
    restored = False
    if op == "create":
        restored = _recover_created(parent, parts[-1], temps[0], entry, current, record, restore=restore, log=log)
    elif op == "delete" and restore:
        restored = _recover_deleted(parent, parts[-1], temps[0], entry, current, record)
    elif restore and current != original and (current == new or current is None):
        backup = next((t for t in temps if sha_of(t) not in (None, new)), None)
        if backup is not None:  # exactly what the swap displaced
            os.rename(backup, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
        else:
            data = _stored_copy(Path(entry["original_copy"]))
            if sha256_bytes(data) != original:
                raise ApplyRefused(f"{record}: no intact copy of {path}'s original ({original[:12]}) is left; "
                                   f"restore it from git (git checkout -- {path}), then move {record} aside")
            mode = 0o644 if current is None else stat.S_IMODE(os.lstat(parts[-1], dir_fd=parent).st_mode)
            tmp = f"{fs.TEMP_PREFIX}recover-{secrets.token_hex(6)}"
            safefs.create_at(parent, tmp, data, mode=mode)
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
        if digest is not None and digest in (original, new):
            os.unlink(temp, dir_fd=parent)
        elif digest is not None:
            log(f"apply: warning: kept {'/'.join([*parts[:-1], temp])}: it holds neither the original nor "
                "the new bytes")
    return restored


def _recover_created(parent: int, name: str, staged: str, entry: Mapping[str, Any], current: str | None,
                     record: Path, *, restore: bool, log: Log) -> bool:
    """A file the transaction created: undone, it is deleted if it is the very file created (the journaled
    inode) and still holds the bytes written; anything else there is someone else's and is left alone."""
    path, new, ino = entry["path"], entry["new_sha256"], entry.get("new_ino")
    if not restore:
        if current != new:
            log(f"apply: warning: {path} changed after the committed {record.name}; left as is")
        return False
    if current is None or ino is None or os.lstat(name, dir_fd=parent).st_ino != ino:
        if current is not None and entry.get("state") == "swapped":
            log(f"apply: warning: {path} was replaced after the interrupted {record.name} created it; left as is")
        return False
    if current != new:
        raise ApplyRefused(
            f"{record}: {path} is the file the interrupted transaction created, but it holds other bytes "
            f"({current[:12]}, not {new[:12]}); recovery will not delete it. Inspect it; to finish undoing the "
            f"apply, remove it yourself; then move {record} aside (mv {record} "
            f"{record.with_name('resolved-' + record.name)}) and rerun")
    retract(parent, name, staged, ino, fs.read(parent, name, path), path)
    os.fsync(parent)
    return True


def _recover_deleted(parent: int, name: str, staged: str, entry: Mapping[str, Any], current: str | None,
                     record: Path) -> bool:
    """A file a revert was deleting: put back from beside it, never over a file created there since."""
    path = entry["path"]
    try:
        os.lstat(staged, dir_fd=parent)
    except FileNotFoundError:
        return False  # never taken out (or its removal had committed)
    if current is not None:
        raise ApplyRefused(
            f"{record}: {path} exists again, and the file the interrupted revert took out is beside it as "
            f"{staged}; recovery will not overwrite either. Keep the one you want, then move {record} aside (mv "
            f"{record} {record.with_name('resolved-' + record.name)}) and rerun")
    try:
        fs.renameat2(parent, staged, parent, name, fs.RENAME_NOREPLACE)
    except FileExistsError:
        raise ApplyRefused(f"{record}: {path} was created while recovery put it back; the file the revert took "
                           f"out is still at {staged}") from None
    os.fsync(parent)
    return True


def _remove_made(tree: fs.Tree, entry: Mapping[str, Any], log: Log) -> None:
    """A directory the interrupted transaction made: removed, once empty, under its temp name (only that
    transaction uses it) or under its own when the inode is the journaled one."""
    parts = fs.split_relative(entry["path"], "directory")
    parent, found = tree.open_existing(parts[:-1])
    if found < len(parts) - 1:
        return
    for name, ino in ((fs.split_relative(entry["temp"], "temp")[-1], None), (parts[-1], entry.get("ino"))):
        try:
            st = os.lstat(name, dir_fd=parent)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode) or (name == parts[-1] and st.st_ino != ino):
            continue
        try:
            os.rmdir(name, dir_fd=parent)
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            log(f"apply: warning: kept {'/'.join([*parts[:-1], name])}: the interrupted transaction made it, but "
                "it holds files it did not put there")
    os.fsync(parent)
