"""What keeps a transaction recoverable: the originals store, the recovery record, and the commit marker.

The record is written before the first change and rewritten as the transaction moves, saying where each
original and each new file is at that moment, so a rerun after a crash (skillevo.apply.recovery) or a person
can restore every original; the marker, written last, is what makes the transaction final.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from skillevo.apply import fs
from skillevo.apply.common import SCHEMA_VERSION, iso
from skillevo.apply.swaps import MadeDir, Swap
from skillevo.files import documents, safefs
from skillevo.files.digests import sha256_bytes
from skillevo.files.errors import BadInput


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


def record(swaps: list[Swap], dirs: list[MadeDir], *, kind: str, tx: str, repo: Path, store: Path,
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
            "Rerun the same command (`skillevo apply`, `skillevo revert`, `make apply`, `make revert` or "
            "`python -m skillevo.stages.apply [--revert]`): it "
            "restores every original listed here before doing anything else, and removes every file and "
            "directory the transaction created. By hand: paths are relative to `repo`; a destination holding "
            "new_sha256 has its original under `staged` beside it, and original_copy always holds the original "
            "bytes; a file with op `create` had no original (delete it if it holds new_sha256), and each of "
            "`dirs` did not exist before (remove it, or its `temp`, once empty)."
        ),
    }


def write_json(path: Path, doc: Mapping[str, Any]) -> None:
    safefs.write_atomic(path, documents.dump_json(doc))
