"""Prompt caching as the Messages API reports it, so simulated costs bill skill text the way the API does.

The CLI marks cache breakpoints (`cache_control`) on its system prompt and on the last block of the
conversation. The API caches the prefix (tools, then system, then messages) up to each breakpoint; a later
request whose prefix matches one already written, at a block boundary no more than LOOKBACK blocks before
one of its breakpoints, reads it instead. Usage then splits the request's tokens in three: read from the
cache, written to it (the prefix up to the last cacheable breakpoint, past what was read), and the uncached
rest. Without it every turn would bill the whole conversation, skill text included, as fresh input.

The cache is per CLI session (cell route and session id), never shared between sessions: that keeps every
run deterministic whatever ran beside it. The real API caches per organisation (per workspace since February
2026), so a session that starts minutes after another finds their shared tools-and-system prefix cached. A
session whose cache window is drawn warm (noise.SessionNoise.warm) plays that: its first request finds that
prefix already written, and reads it. Every other session pays its own write.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from typing import Any

BYTES_PER_TOKEN = 4
LOOKBACK = 20  # block boundaries checked before each breakpoint
MIN_CACHEABLE = {"claude-sonnet-4-6": 2048, "claude-opus-4-5": 4096, "claude-opus-4-6": 4096,
                 "claude-haiku-4-5": 4096, "claude-haiku-3-5": 2048}
DEFAULT_MIN_CACHEABLE = 1024  # every other model


def tokens(n_bytes: int) -> int:
    return max(1, math.ceil(n_bytes / BYTES_PER_TOKEN))


def _min_cacheable(model: str) -> int:
    return next((n for prefix, n in MIN_CACHEABLE.items() if model.startswith(prefix)), DEFAULT_MIN_CACHEABLE)


def _blocks(body: dict[str, Any]) -> list[tuple[bytes, bool, bool]]:
    """The request's blocks in cache order (tools, system, messages): canonical bytes without the breakpoint
    marker (it is not part of the cached content), whether a breakpoint is on it, and whether it is a tool or
    system block (the prefix every session of the same CLI and model shares)."""
    out: list[tuple[bytes, bool, bool]] = []

    def add(where: list[Any], block: Any) -> None:
        if not isinstance(block, dict):
            block = {"type": "text", "text": block if isinstance(block, str) else json.dumps(block)}
        bare = {k: v for k, v in block.items() if k != "cache_control"}
        data = json.dumps([*where, bare], separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode()
        out.append((data, "cache_control" in block, where[0] != "message"))

    for tool in body.get("tools") or []:
        add(["tool"], tool)
    system = body.get("system")
    for block in ([system] if isinstance(system, str) else system or []):
        add(["system"], block)
    for i, message in enumerate(m for m in body.get("messages") or [] if isinstance(m, dict)):
        content = message.get("content")
        for block in ([content] if isinstance(content, str) else content or []):
            add(["message", i, message.get("role")], block)
    return out


class PromptCache:
    """Per-session cache state in the simulator process: the prefixes each session has written."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._written: dict[tuple[object, ...], set[bytes]] = {}

    def usage(self, session: tuple[object, ...], body: dict[str, Any], raw_len: int, *,
              warm: bool = False) -> dict[str, int]:
        """input_tokens, cache_creation_input_tokens and cache_read_input_tokens of one answered request; the
        three add up to the request's size in tokens (what count_tokens says). `warm`: on the session's first
        request, its cacheable tools-and-system breakpoints count as already written by a neighbouring session."""
        total = tokens(raw_len)
        blocks = _blocks(body)
        breakpoints = [i for i, (_, marked, _) in enumerate(blocks) if marked]
        if not breakpoints:
            return {"input_tokens": total, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        prefix_tokens, hashes, size, h = [], [], 0, hashlib.sha256(str(body.get("model")).encode()).digest()
        for data, _, _ in blocks:
            size += len(data)
            h = hashlib.sha256(h + data).digest()
            prefix_tokens.append(min(total, tokens(size)))
            hashes.append(h)
        floor = _min_cacheable(str(body.get("model") or ""))
        cacheable = [bp for bp in breakpoints if prefix_tokens[bp] >= floor]
        with self._lock:
            written = self._written.get(session)
            if written is None:
                written = self._written[session] = set()
                if warm:
                    written.update(hashes[bp] for bp in cacheable if blocks[bp][2])
            hit = max((j for bp in breakpoints for j in range(bp, max(-1, bp - LOOKBACK - 1), -1)
                       if hashes[j] in written), default=-1)
            written.update(hashes[bp] for bp in cacheable)
        read = prefix_tokens[hit] if hit >= 0 else 0
        top = max(cacheable, default=-1)
        created = prefix_tokens[top] - read if top > hit else 0
        return {"input_tokens": max(0, total - read - created), "cache_creation_input_tokens": created,
                "cache_read_input_tokens": read}
