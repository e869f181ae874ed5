"""`skillevo show`: a session's transcript as a person reads it, one line per step.

    skillevo show results/run/greet-auto                 # every transcript of a run (or a bench side's directory)
    skillevo show results/run/greet-auto/transcripts/X.jsonl

Each assistant text, tool call (its input, shortened), tool result (shortened, errors marked) and the session's
end (its cost, turns and how it ended). Transcripts are stored redacted (skillevo.agent.transcript); this only reads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from skillevo.core import events, safefs, stage
from skillevo.core.errors import BadInput

MAX_TRANSCRIPT = 64 << 20
WIDTH = 300  # characters of a tool's input or result shown; --full shows them whole


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
        message = event.get("message") if isinstance(event.get("message"), dict) else {}
        blocks = message.get("content") if isinstance(message.get("content"), list) else []
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


def transcripts(target: Path) -> list[tuple[str, bytes]]:
    """`target` itself, or a run's or side's transcripts in the order its rows list them (each read below the
    directory, no symlink on the way: a row names a path, the directory holds it)."""
    if target.is_file():
        return [(str(target), safefs.read_file(target, max_bytes=MAX_TRANSCRIPT, what="transcript"))]
    rows = target / "results.jsonl"
    if not rows.is_file():
        raise BadInput(f"{target}: neither a transcript nor a directory with results.jsonl (rule: show a transcript, "
                       "a `skillevo run` directory or a bench side)")
    found = []
    for line in safefs.read_text(rows, max_bytes=MAX_TRANSCRIPT, what="results").splitlines():
        row = json.loads(line)
        found += [(f"{target}/{meta['path']}", safefs.read_below(target, meta["path"], max_bytes=MAX_TRANSCRIPT,
                                                                 what="transcript"))
                  for meta in row.get("transcripts", [])]
    return found


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="skillevo show", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", type=Path, help="a transcript (.jsonl), or a directory with results.jsonl")
    p.add_argument("--full", action="store_true", help="tool inputs and results whole, not shortened")
    return p


def run(args: argparse.Namespace) -> str:
    found = transcripts(args.target)
    try:
        for where, data in found:
            print(f"== {where}")
            for line in lines(parse(data, where), None if args.full else WIDTH):
                print(line)
        sys.stdout.flush()
    except BrokenPipeError:  # `skillevo show DIR | head`: the reader has read enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return f"show: {len(found)} transcript(s)"


def main(argv: list[str] | None = None) -> int:
    return stage.main("show", parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
