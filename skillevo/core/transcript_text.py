"""A session's transcript as a person reads it, one line per step: what `skillevo show` prints
(skillevo.ops.transcript_view) and what the gate's page shows per cell (skillevo.gate.page).

Each assistant text, tool call (its input, shortened to WIDTH), tool result (shortened, errors marked) and the
session's end (its cost, turns and how it ended). Transcripts are stored redacted (skillevo.agent.transcript);
this only reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from skillevo.core import events
from skillevo.files import safefs
from skillevo.files.errors import BadInput

WIDTH = 300  # characters of a tool's input or result shown; `skillevo show --full` shows them whole


def _short(text: str, width: int | None) -> str:
    flat = " ".join(text.split())
    return flat if width is None or len(flat) <= width else flat[:width] + f" ... ({len(flat)} chars)"


def _content(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return " ".join(_content(v.get("text", "")) if isinstance(v, dict) else str(v) for v in value)
    return json.dumps(value, ensure_ascii=False)


def _usd(value: Any) -> str:
    return f"${value:.4f}" if isinstance(value, int | float) and not isinstance(value, bool) else f"${value}"


def lines(events_: list[dict[str, Any]], width: int | None = WIDTH) -> Iterator[str]:
    """One line per step of the session."""
    for event in events_:
        kind = event.get("type")
        message = event.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        # a transcript is the agent's output: a block that is not an object is skipped, never a crash
        blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
        if kind == "system" and event.get("subtype") == "init":
            yield f"session {event.get('session_id', '?')}: model {event.get('model', '?')}, CLI " \
                  f"{event.get('claude_code_version', '?')}, tools {', '.join(event.get('tools') or [])}"
        elif kind == "assistant":
            for block in blocks:
                if block.get("type") == "text":
                    yield f"assistant: {_short(str(block.get('text', '')), width)}"
                elif block.get("type") == "tool_use":
                    arguments = json.dumps(block.get("input"), ensure_ascii=False, sort_keys=True)
                    yield f"  -> {block.get('name')} {_short(arguments, width)}"
        elif kind == "user":
            for block in blocks:
                if block.get("type") == "tool_result":
                    mark = "  <- error: " if block.get("is_error") else "  <- "
                    yield mark + _short(_content(block.get("content")), width)
        elif kind == "result":
            yield (f"end: {event.get('subtype')} after {event.get('num_turns')} turn(s), "
                   f"{_usd(event.get('total_cost_usd'))}, {event.get('duration_ms')} ms")
        elif kind == events.STOPPED:
            yield (f"stopped by the harness: {event.get('subtype')}: {_short(str(event.get('reason', '')), width)}; "
                   f"{_usd(event.get('total_cost_usd'))} from the relay's count")


def parse(data: bytes, where: str) -> list[dict[str, Any]]:
    out = []
    for number, line in enumerate(safefs.decode(data, where, "transcript").splitlines(), start=1):
        try:
            event = json.loads(line)
        except ValueError:
            raise BadInput(f"{where}: line {number} is not JSON (rule: a transcript is JSON lines)") from None
        if isinstance(event, dict):
            out.append(event)
    return out
