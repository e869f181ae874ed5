"""`skillevo show`: a session's transcript as a person reads it, one line per step.

    skillevo show results/run/greet-auto                 # every transcript of a run (or a bench side's directory)
    skillevo show results/run/greet-auto/transcripts/X.jsonl

Each assistant text, tool call (its input, shortened), tool result (shortened, errors marked) and the session's
end (its cost, turns and how it ended), as skillevo.core.transcript_text renders them (the gate's page shows the
same lines). Transcripts are stored redacted (skillevo.agent.transcript); this only reads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from skillevo.core import stage
from skillevo.core.transcript_text import WIDTH, lines, parse
from skillevo.files import safefs
from skillevo.files.errors import BadInput

__all__ = ["WIDTH", "lines", "main", "parse", "run", "transcripts"]

MAX_TRANSCRIPT = 64 << 20


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
