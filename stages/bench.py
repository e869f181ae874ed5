"""Bench stage: run one side of the benchmark and write results.jsonl, transcripts/, patches/, report.md.

    python -m stages.bench --side incumbent
    python -m stages.bench --side candidate --overlay results/freeze/overlay

The incumbent side runs every arm in params.yaml on the incumbent skills; the candidate side runs the
candidate arms the frozen overlay requires. They are separate DVC stages, so an unchanged incumbent
side is never paid for twice.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skillevo import params as params_mod
from skillevo.bench.side import BenchInterrupted, plan, run_side


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stages.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", choices=["incumbent", "candidate"], required=True)
    parser.add_argument("--tasks", type=Path, default=Path("tasks/tasks.yaml"), help="tasks file [%(default)s]")
    parser.add_argument("--skills", type=Path, default=None, help="incumbent skills [params skills.dir]")
    parser.add_argument("--overlay", type=Path, default=None,
                        help="frozen overlay directory, candidate side only [results/freeze/overlay]")
    parser.add_argument("--params", type=Path, default=Path("params.yaml"), help="[%(default)s]")
    parser.add_argument("--out", type=Path, default=None, help="output directory [results/bench-<side>]")
    parser.add_argument("--include-expensive", action="store_true", default=None,
                        help="also run tasks marked expensive [params bench.include_expensive]")
    args = parser.parse_args(argv)
    params = params_mod.load(args.params)
    skills = args.skills or Path(params_mod.section(params, "skills").get("dir", "skills"))
    overlay = args.overlay or (Path("results/freeze/overlay") if args.side == "candidate" else None)
    out = args.out or Path(f"results/bench-{args.side}")
    try:
        side_plan = plan(args.side, args.tasks, skills, overlay, params, args.include_expensive)
        rows = run_side(side_plan, args.tasks, skills, overlay, params, out)
    except BenchInterrupted as e:
        print(f"bench: {e}", file=sys.stderr)
        return 130
    except ValueError as e:
        print(f"bench: {e}", file=sys.stderr)
        return 2
    resolved = sum(r["resolved"] for r in rows)
    print(f"bench {args.side}: {len(rows)} cells, {resolved} resolved; report: {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
