"""Stage `preflight`: before the candidate side is paid for, say what the configured runs can detect and what
each thing a promotion needs takes.

From the incumbent side's means, resolution and spread of the gate's metric on the gate's tasks (or
sampling.prior_cv when it shows no spread), print the smallest saving per resolved task the cost test finds at
sampling.power and gate.alpha with sampling.runs, and the runs per (task, arm) that gate.min_total_runs, the
resolution drop's bound, gate.min_improvement_pct and a 20% saving each take; warn when sampling.runs falls
short of one. Writes <out> (`dvc metrics show`). Advisory: it never stops the pipeline. Exit 2 on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from skillevo.core import layout, planned, sampling, stage, tasks
from skillevo.core.declared import Declared
from skillevo.core.results import load_side
from skillevo.files import documents, safefs

# the params this stage reads: `tracked` is its dvc.yaml entry's `params:` (tests/test_declared_params.py)
PARAMS = Declared(("sampling", "tasks", "gate.metric", "gate.alpha", "gate.min_improvement_pct",
                  "gate.max_resolution_drop_pct", "gate.min_total_runs", "gate.min_runs", "gate.policy", "gate.test"))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillevo.stages.preflight", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--incumbent", type=Path, default=layout.BENCH["incumbent"], help="[%(default)s]")
    p.add_argument("--tasks", type=Path, default=layout.TASKS_FILE, help="for the gate's tasks [%(default)s]")
    p.add_argument("--params", type=Path, default=layout.PARAMS, help="[%(default)s]")
    p.add_argument("--out", type=Path, default=layout.PREFLIGHT, help="[%(default)s]")
    return p


def run(args: argparse.Namespace) -> str:
    params = stage.load_params("preflight", args, PARAMS)
    loaded = tasks.load(args.tasks, target_roots=params.tasks.target_roots)
    split = tasks.split(loaded, params.tasks.gate, params.tasks.evidence, params.tasks.shared, params.source)
    side = load_side(args.incumbent, "incumbent")
    result = sampling.preflight(side.rows, split.gate, params.sampling, params.gate)
    # the simulated sides are judged on every core this process may use: how fast, never what it states
    result = dataclasses.replace(result, planned=planned.planned_power(side.rows, split.gate, params.sampling,
                                                                        params.gate, progress=True,
                                                                        workers=len(os.sched_getaffinity(0))))
    safefs.write_atomic(args.out, documents.dump_json(result.to_dict()))
    stage.warn("preflight", result.warnings)
    found = "nothing (too few runs)" if result.detectable_pct is None else f"{result.detectable_pct:.1f}%"
    needed = result.runs_needed
    return (f"preflight: {result.runs} runs per (task, arm) on {result.tasks} gate task(s) detect a saving per "
            f"resolved task of {found} with power {params.sampling.power:g} at level {params.gate.alpha:.3g} "
            f"(CV {result.cv:.3f} from the {result.spread_from}); runs needed per (task, arm): "
            f"{needed['min_total_runs']} for gate.min_total_runs, {needed['resolution_bound']} to bound a resolution "
            f"drop within {params.gate.max_resolution_drop_pct:g} points, {needed['min_improvement']} to find a "
            f"{params.gate.min_improvement_pct:g}% saving, {needed['saving_20pct']} to find a 20% saving"
            + ("" if result.planned is None else
               f"; the schedule finds a {result.planned['saving_pct']:g}% saving with power "
               f"{result.planned['power']:.2f} within {result.runs} runs a task (mean "
               f"{result.planned['mean_runs']:.1f} runs a task; {result.planned['draws']} sides simulated through "
               "the bench's own looks at the incumbent's resolution and spread)"))


def main(argv: list[str] | None = None) -> int:
    return stage.main("preflight", parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
