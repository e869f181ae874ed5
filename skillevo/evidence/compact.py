"""Make evidence small and safe to read: transcripts redacted and re-rendered, long files cut to their limit.

A transcript keeps whole trailing events (the end of a session says most about how it went); other text
keeps its head and tail. Redaction happens before any cut, so a cut can never leave half a key behind that
no pattern recognises.
"""

from __future__ import annotations

from typing import Any

from skillevo.core.redact import redact_obj
from skillevo.files import documents
from skillevo.files.digests import canonical_json

ELIDE_STRING_CHARS = 4096  # in an over-long transcript, longer strings keep only head and tail


def redact_jsonl(data: bytes, secrets: tuple[str, ...]) -> bytes:
    """Each event parsed, redacted and re-rendered canonically; BadInput if a line is not JSON."""
    out = []
    for number, line in enumerate(documents.jsonl_lines(data), start=1):
        if not line.strip():
            continue
        event = documents.parse_json(line, f"line {number}")
        out.append(canonical_json(redact_obj(event, secrets)) + b"\n")
    return b"".join(out)


def _elide(value: Any) -> Any:
    if isinstance(value, str) and len(value) > ELIDE_STRING_CHARS:
        head, tail = ELIDE_STRING_CHARS // 2, ELIDE_STRING_CHARS // 4
        return f"{value[:head]}…[skillevo: {len(value) - head - tail} chars elided]…{value[-tail:]}"
    if isinstance(value, dict):
        return {k: _elide(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_elide(v) for v in value]
    return value


def compaction_marker(omitted: int) -> bytes:
    return canonical_json({"type": "skillevo_compacted", "omitted_bytes": omitted}) + b"\n"


def compact_jsonl(data: bytes, limit: int) -> tuple[bytes, int]:
    """(at most `limit` bytes of whole trailing events, bytes omitted); never cuts an event.

    Over the limit, strings longer than ELIDE_STRING_CHARS keep only head and tail (so one huge tool
    result does not push every earlier event out), then the most recent events that fit are kept
    behind a first line {"type":"skillevo_compacted","omitted_bytes":N}.
    """
    if len(data) <= limit:
        return data, 0
    events = [canonical_json(_elide(documents.parse_json(line, "transcript"))) + b"\n"
              for line in documents.jsonl_lines(data) if line.strip()]
    size, kept = len(compaction_marker(len(data))), []
    for event in reversed(events):
        if size + len(event) > limit:
            break
        kept.append(event)
        size += len(event)
    body = b"".join(reversed(kept))
    omitted = len(data) - len(body)
    return compaction_marker(omitted) + body, omitted


def compact_text(text: str, limit: int) -> tuple[str, int]:
    """(head and tail of `text` in at most `limit` UTF-8 bytes with a marker line between, bytes omitted)."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text, 0
    reserve = len(f"\n[skillevo: {len(data)} bytes omitted from the middle of this file]\n".encode())
    room = max(limit - reserve, 0)
    head, tail = data[: room // 2], data[len(data) - (room - room // 2):]
    if b"\n" in head:
        head = head[: head.rindex(b"\n") + 1]
    if b"\n" in tail:
        tail = tail[tail.index(b"\n") + 1:]
    head_text = head.decode("utf-8", errors="ignore")
    tail_text = tail.decode("utf-8", errors="ignore")
    omitted = len(data) - len(head_text.encode()) - len(tail_text.encode())
    sep = "" if not head_text or head_text.endswith("\n") else "\n"
    return f"{head_text}{sep}[skillevo: {omitted} bytes omitted from the middle of this file]\n{tail_text}", omitted
