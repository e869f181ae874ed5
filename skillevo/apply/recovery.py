"""Finish or undo what a crashed transaction left behind, from its recovery record, before anything else runs.

A transaction writes `recovery-<UTC>.json` before its first swap and removes it when it is done, so a record
that is still there means the process died (SIGKILL, power loss) or its rollback failed. Every apply,
revert and rerun starts here.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skillevo import documents, safefs
from skillevo.apply import fs
from skillevo.apply.common import ApplyPaths, ApplyRefused, Log
from skillevo.apply.transaction import marker_tx
from skillevo.digests import sha256_bytes
from skillevo.errors import BadInput


def recover(paths: ApplyPaths, *, log: Log) -> int:
    """Finish or undo every transaction a crash left behind (recovery-*.json). Returns how many it handled.

    A committed transaction (its marker carries its id) is only cleaned up; any other is undone: every
    destination that holds the new bytes gets back what it held before, from the kept backup or the originals
    store. A destination holding anything else is never overwritten: that is a refusal with instructions.
    """
    records = sorted(paths.state_dir.glob("recovery-*.json")) if paths.state_dir.is_dir() else []
    for record in records:
        try:
            doc = documents.load_json(record, what="recovery record")
            files, commit, tx = doc["files"], doc["commit"], doc["transaction"]
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
                log(f"apply: {record.name}: the {doc.get('kind')} had committed; cleaned up after it")
            else:
                restored = sum(_recover_entry(tree, entry, record, restore=True, log=log) for entry in files)
                log(f"apply: recovered from {record}: restored {restored} file(s) to their pre-{doc.get('kind')} "
                    "bytes")
        record.rename(record.with_name("resolved-" + record.name))
    return len(records)


def _stored_copy(copy: Path) -> bytes:
    try:
        return fs.read(None, copy, str(copy), "stored original")
    except (OSError, BadInput):
        return b""


def _recover_entry(tree: fs.Tree, entry: Mapping[str, Any], record: Path, *, restore: bool, log: Log) -> bool:
    path, original, new = entry["path"], entry["original_sha256"], entry["new_sha256"]
    parts = fs.split_relative(path, "destination")
    # `link`: where records of the former non-atomic link-and-replace swap kept the original; still read
    temps = [fs.split_relative(entry[key], "temp")[-1] for key in ("staged", "link") if entry.get(key)]
    with tree.directory(parts[:-1]) as parent:
        def sha_of(name: str) -> str | None:
            try:
                return sha256_bytes(fs.read(parent, name, path))
            except FileNotFoundError:
                return None

        current = sha_of(parts[-1])
        restored = False
        if restore and current != original and (current == new or current is None):
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
            if digest in (original, new):
                os.unlink(temp, dir_fd=parent)
            elif digest is not None:
                log(f"apply: warning: kept {'/'.join([*parts[:-1], temp])}: it holds neither the original nor "
                    "the new bytes")
        return restored
