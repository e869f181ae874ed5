"""Content digests. Every binding in the pipeline is a sha256 of exact bytes."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from skillevo.files.errors import BrokenEnvironment


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_text(text: str) -> str:
    return sha256_bytes(text.encode("utf-8"))


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def canonical_json(obj: Any) -> bytes:
    """One byte form per value: sorted keys, no spaces, UTF-8, no NaN."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def sha256_json(obj: Any) -> str:
    return sha256_bytes(canonical_json(obj))


def framed_digest(entries: Iterable[tuple[str, bytes]]) -> str:
    """sha256 over (path, content) pairs sorted by path.

    Framing, per entry in ascending order of the UTF-8 path bytes: 8-byte big-endian length of the
    path, the path bytes, 8-byte big-endian length of the content, the content bytes. Length framing
    makes the encoding injective: no two different sets of files can produce the same byte stream.
    """
    h = hashlib.sha256()
    for path, content in sorted(((p.encode("utf-8"), c) for p, c in entries), key=lambda e: e[0]):
        h.update(len(path).to_bytes(8, "big"))
        h.update(path)
        h.update(len(content).to_bytes(8, "big"))
        h.update(content)
    return h.hexdigest()


KEY_ENV = "SKILLEVO_CELL_KEY"  # the team's secret: it authenticates cell-store entries and benched sides
MIN_KEY_CHARS = 16


def team_key() -> bytes | None:
    """The team key from the environment (None when unset); a short one is refused without echoing it."""
    value = os.environ.get(KEY_ENV)
    if not value:
        return None
    if len(value) < MIN_KEY_CHARS:
        raise BrokenEnvironment(f"{KEY_ENV} is shorter than {MIN_KEY_CHARS} characters; use a random secret, "
                                "e.g. `openssl rand -hex 32` (rule: team key)")
    return value.encode()


def mac_of_bytes(secret: bytes, *parts: bytes) -> str:
    """HMAC-SHA256 of exact bytes under the team key, each part framed by its length (no two splits collide):
    checked before the bytes are decompressed or parsed."""
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(len(part).to_bytes(8, "big") + part)
    return mac.hexdigest()


def mac_of(secret: bytes, value: Any) -> str:
    """HMAC-SHA256 of a JSON value's canonical form under the team key."""
    return hmac.new(secret, canonical_json(value), hashlib.sha256).hexdigest()
