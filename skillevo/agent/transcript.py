"""Transcripts: the session's stream, redacted and in one canonical byte form, bound by sha256."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from skillevo.digests import canonical_json, sha256_bytes
from skillevo.redact import redact_obj


class TranscriptMismatch(ValueError):
    """A stored transcript is not the one its record describes."""


def render(events: list[dict[str, Any]], secrets: tuple[str, ...]) -> bytes:
    return b"".join(canonical_json(redact_obj(e, secrets)) + b"\n" for e in events)


def write(data: bytes, directory: Path, name: str) -> dict[str, Any]:
    """Write once (O_EXCL, 0600, fsync); return {path, sha256, bytes} with path relative to `directory`."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return {"path": name, "sha256": sha256_bytes(data), "bytes": len(data)}


def verify(meta: dict[str, Any], directory: Path) -> bytes:
    """The transcript's bytes, if and only if they match the record's size and sha256."""
    path = Path(directory) / meta["path"]
    if path.is_symlink() or not path.is_file():
        raise TranscriptMismatch(f"{path}: transcript missing or not a regular file")
    data = path.read_bytes()
    if len(data) != meta["bytes"] or sha256_bytes(data) != meta["sha256"]:
        raise TranscriptMismatch(f"{path}: transcript does not match its record (size or sha256 differs)")
    return data
