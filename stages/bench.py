"""Stage `bench`: run one side of the benchmark and write results.jsonl, transcripts/, patches/, report.md.

    python -m skillevo.stages.bench --side incumbent
    python -m skillevo.stages.bench --side candidate --overlay results/freeze/overlay

The incumbent side runs every arm in params.yaml on the incumbent skills, for the proposer's evidence and the
reports; the candidate side runs the candidate arms the frozen overlay requires on the gate's tasks, each beside
its contemporaneous control (the incumbent arm, measured again in the same blocks, in random order): the gate
compares those two. They are separate DVC stages, so an unchanged incumbent side is never paid for twice; and
within a side every finished cell goes to the cell store (--store) the moment it ends, so a killed bench resumes
without paying for a finished cell again. Exit 130 when interrupted (finished cells are kept), 2 on bad input, 69
when the machine cannot run sandboxed sessions.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skillevo.bench import plan, run_side
from skillevo.core import layout, stage
from skillevo.core.declared import Declared

# the params this stage reads: `tracked` is its dvc.yaml entry's `params:` (tests/test_declared_params.py)
PARAMS = Declared(("model", "arms", "tasks", "simulator", "sampling.runs", "sampling.incumbent_runs",
                  "sampling.replicate", "sampling.sequential", "sampling.prior_cv", "sampling.plan_saving_pct",
                  "sampling.cost_cap", "bench.limits", "bench.include_expensive", "bench.phase_timeout_s",
                  "bench.max_retries", "bench.churn_exclude", "bench.canary", "bench.canary_tolerance",
                  "gate.max_age_days", "bench.fault_reruns_pct",
                  "gate.metric", "gate.alpha", "gate.min_improvement_pct", "gate.max_resolution_drop_pct",
                  "gate.min_total_runs"),
                  untracked=("bench.check_runs", "bench.workers", "bench.executor", "bench.ray_address",
                             "bench.ray_max_retries",
                             "bench.ray_cell_resources", "bench.max_consecutive_failures", "bench.max_excluded_pct",
                             "skills.evolvable", "skills.frontmatter_keys",  # checks, never outcomes
                             "skills.root", "skills.paths.skills"))  # without --skills, which dvc.yaml passes


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillevo.stages.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--side", choices=["incumbent", "candidate"], required=True)
    p.add_argument("--tasks", type=Path, default=layout.TASKS_FILE, help="tasks file [%(default)s]")
    stage.family_options(p, mirrors=False)
    p.add_argument("--overlay", type=Path, default=None, help="frozen overlay directory, candidate side only")
    p.add_argument("--incumbent", type=Path, default=None,
                   help="candidate side: the incumbent side's directory, which each task's cost cap and the test's "
                        "bets are sized from (dvc.yaml: results/bench-incumbent) [none: no cap, and the gate refuses "
                        "the side]")
    p.add_argument("--params", type=Path, default=layout.PARAMS, help="[%(default)s]")
    p.add_argument("--modes", type=Path, default=layout.MODES,
                   help="the family's recorded execute bits, which must match it (`make modes`) [%(default)s]")
    p.add_argument("--out", type=Path, default=None, help="output directory [results/bench-<side>]")
    p.add_argument("--store", type=Path, default=None,
                   help=f"the cell store: finished cells are served from it and stored in it (dvc.yaml: "
                        f"{layout.CELL_STORE}) [none: pay for every cell]")
    p.add_argument("--include-expensive", action="store_true", default=None,
                   help="also run tasks marked expensive [params bench.include_expensive]")
    return p


def run(args: argparse.Namespace) -> str:
    params = stage.load_params("bench", args, PARAMS)
    out = args.out or layout.BENCH[args.side]
    side_plan = plan(args.side, args.tasks, stage.skills_dir(args, params), args.overlay, params,
                     args.include_expensive, modes=args.modes, incumbent=args.incumbent)
    rows = run_side(side_plan, params, out, store=args.store)
    return (f"bench {args.side}: {len(rows)} cells, {sum(r['resolved'] for r in rows)} resolved; "
            f"report: {out / 'report.md'}")


def main(argv: list[str] | None = None) -> int:
    return stage.main("bench", parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
