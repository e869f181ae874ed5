"""Stage `evidence`: build the bounded, redacted, content-hashed evidence bundle the proposer reads.

    python -m skillevo.stages.evidence                        # from previous/memory/ (or a cold start)
    python -m skillevo.stages.evidence --seed path/to/results # from a seed results directory instead

Inputs: <previous>/bench-{incumbent,candidate}/ (results.jsonl, transcripts/, patches/), gate/promotion.json,
proposal.md, rejected.json (every candidate rejected against this incumbent, which `make evolve` hands on) — any
subset; --incumbent takes the place of <previous>/bench-incumbent; learnings.jsonl (one
{skill, date, task, friction, suggestion} per line); the tasks file, read only for the hidden oracles whose
bytes must never reach the bundle; params `evidence:` and `skills.evolvable`. The selection, redaction and
budget rules are in skillevo/evidence/bundle.py; the bundle's files in skillevo/evidence/__init__.py. Exit 2
on bad input or a bundle that cannot fit its budget.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skillevo.core import layout, stage
from skillevo.core.declared import Declared
from skillevo.evidence import make_bundle, write_bundle
from skillevo.files.errors import BadInput

# the params this stage reads: `tracked` is its dvc.yaml entry's `params:` (tests/test_declared_params.py)
PARAMS = Declared(("evidence", "skills.evolvable", "tasks", "arms"))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillevo.stages.evidence", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--previous", type=Path,
                   help=f"what the last generations handed on; missing or empty = cold start [{layout.MEMORY}]")
    p.add_argument("--incumbent", type=Path, help="this generation's incumbent side [none]")
    p.add_argument("--seed", type=Path, help="a seed results directory, instead of --previous/--incumbent [none]")
    p.add_argument("--learnings", type=Path, help="learnings queue, JSONL [learnings.jsonl, if it exists]")
    p.add_argument("--tasks", type=Path, default=layout.TASKS_FILE, help="for the hidden oracles only [%(default)s]")
    p.add_argument("--params", type=Path, default=layout.PARAMS, help="[%(default)s]")
    p.add_argument("--out", type=Path, default=layout.EVIDENCE, help="[%(default)s]")
    return p


def run(args: argparse.Namespace) -> str:
    params = stage.load_params("evidence", args, PARAMS)
    learnings = args.learnings or (layout.LEARNINGS if layout.LEARNINGS.exists() else None)
    if args.seed and args.previous:
        raise BadInput("--seed is used instead of --previous; give one or the other (rule: one evidence source)")
    bundle = make_bundle(params=params, previous=args.previous or layout.MEMORY, seed=args.seed,
                         incumbent=args.incumbent, learnings=learnings, tasks=args.tasks)
    write_bundle(bundle, args.out)
    m, rows = bundle.manifest, bundle.manifest["rows"]
    stage.warn("evidence", (f"left out {item['what']}: {item['reason']}" for item in m["dropped"]))
    return (f"evidence: source {m['source']}; {rows['selected']} rows selected of {rows['considered']} "
            f"({rows['excluded_infra']} excluded as infra, {rows['refused']} refused, {rows['over_cap']} over "
            f"max_rows, {rows['dropped_for_budget']} dropped for budget); {len(m['files'])} files, "
            f"{m['rejected']['selected']} rejected candidate(s) shown of {m['rejected']['considered']}; "
            f"{bundle.total_bytes} bytes -> {args.out}")


def main(argv: list[str] | None = None) -> int:
    return stage.main("evidence", parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
