"""Stage `preflight`: before the candidate side is paid for, say what the configured runs can detect.

From the incumbent side's spread of the gate's metric on the gate's tasks (or sampling.prior_log_sd when it
shows none), print the minimum improvement the cost test finds at sampling.power and gate.alpha, and warn
when gate.min_improvement_pct is below it or when too few runs can ever bound a resolution drop. Writes
<out> (`dvc metrics show`). Advisory: it never stops the pipeline. Exit 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skillevo import documents, layout, safefs, sampling, stage, tasks
from skillevo.results import load_side


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m stages.preflight", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--incumbent", type=Path, default=layout.BENCH["incumbent"], help="[%(default)s]")
    p.add_argument("--tasks", type=Path, default=layout.TASKS_FILE, help="for the gate's tasks [%(default)s]")
    p.add_argument("--params", type=Path, default=layout.PARAMS, help="[%(default)s]")
    p.add_argument("--out", type=Path, default=layout.PREFLIGHT, help="[%(default)s]")
    return p


def run(args: argparse.Namespace) -> str:
    params = stage.load_params("preflight", args)
    loaded = tasks.load(args.tasks, target_roots=params.tasks.target_roots)
    split = tasks.split(loaded, params.tasks.gate, params.tasks.evidence, params.tasks.shared, params.source)
    side = load_side(args.incumbent, "incumbent")
    result = sampling.preflight(side.rows, split.gate, params.sampling, params.gate)
    safefs.write_atomic(args.out, documents.dump_json(result.to_dict()))
    stage.warn("preflight", result.warnings)
    found = "nothing (no degrees of freedom)" if result.detectable_pct is None else f"{result.detectable_pct:.1f}%"
    return (f"preflight: {result.runs} runs on {result.tasks} gate task(s) detect an improvement of {found} with "
            f"power {params.sampling.power:g} at level {params.gate.cost_alpha:.3g} (log spread "
            f"{result.log_sd:.3f} from the {result.spread_from}); bounding a resolution drop within "
            f"{params.gate.max_resolution_drop_pct:g} points takes {result.drop_runs_needed} runs per arm")


def main(argv: list[str] | None = None) -> int:
    return stage.main("preflight", parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
