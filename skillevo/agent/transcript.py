"""Transcripts: the session's stream, redacted and in one canonical byte form, bound by sha256 (read back with
skillevo.core.results.read_artifact)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skillevo.core.redact import redact_obj
from skillevo.files import safefs
from skillevo.files.digests import canonical_json, sha256_bytes


def render(events: list[dict[str, Any]], secrets: tuple[str, ...]) -> bytes:
    return b"".join(canonical_json(redact_obj(e, secrets)) + b"\n" for e in events)


def write(data: bytes, directory: Path, name: str) -> dict[str, Any]:
    """Write once (exclusive, 0600, fsync); return {path, sha256, bytes} with path relative to `directory`."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    safefs.create_at(None, directory / name, data, mode=0o600)
    return {"path": name, "sha256": sha256_bytes(data), "bytes": len(data)}
