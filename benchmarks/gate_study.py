"""`make gate-study`: the gate's error rates, measured by simulation against its own code.

Each decision builds result rows for 4 tasks (base costs 0.5 to 4 USD) and both arms, runs them through
skillevo.results.aggregate and skillevo.gate.decide_arm with the params.yaml policy (and the seed's), and
records the verdict. Per-run cost is lognormal with coefficient of variation CV around the task's base cost
(times the candidate's true ratio), resolution is Bernoulli(p), and the grid covers p, CV, runs and six
scenarios: the boundary null (ratio 1), a dearer candidate (1.1), 10% and 20% cheaper, a quality regression
(20 points less resolution while 20% cheaper) and missing data (20 points less resolution, failed runs at 40%
of the cost, 5% of all runs lost to harness faults). A promotion in a null scenario is a false promotion.

The sequential mode (params sampling.sequential, switched on) simulates the same benches look by look: the
candidate's runs are shown to skillevo.sampling.interim one look at a time, the side stops where it says, and
the gate decides the stopped side at that look's boundary (gate.look_boundary, and bonferroni beside it), next
to the fixed design on the very same benches at the same maximum runs (5 and 10), at CV 0.2 and 0.5 and in
the two headline cells at CV 0.35 (benchmarks/gate_model.py says why).

Prints a summary, writes results/gate-study/{table.md,rates.csv,rates.svg} (fixed) and
{sequential.md,sequential.csv} (sequential), and ends with the line
`false_promotion_max=<x> power_20pct_runs10_cv035=<y> seed_false_promotion_max=<z>` (fixed) and then
`sequential_false_promotion_max=<x> sequential_power_20pct_runs10_cv035=<y> fixed_power_20pct_runs10_cv035=<f>
sequential_runs_boundary_runs10_cv035=<r>` (sequential), each line only in a mode that runs it. With --check it
exits 1 when a null cell exceeds alpha + 3 standard errors or the power is below 0.8, in either design.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tqdm import tqdm

from benchmarks.gate_model import (
    CVS,
    P_VALUES,
    RUNS,
    SCENARIOS,
    SEQUENTIAL_CVS,
    SEQUENTIAL_RUNS,
    Cell,
    SequentialRates,
    schedule,
    sequential_headline,
    simulate,
    simulate_sequential,
)
from benchmarks.gate_study_report import write, write_sequential
from skillevo import config
from skillevo.config import Policy, SamplingParams


def grid(runs_grid: tuple[int, ...] = RUNS, p_values: tuple[float, ...] = P_VALUES, cvs: tuple[float, ...] = CVS
         ) -> Iterator[Cell]:
    for scenario in SCENARIOS:
        for p in p_values:
            for cv in cvs:
                for runs in runs_grid:
                    yield Cell(scenario.name, p, cv, runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gate_study", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decisions", type=int, default=2000, help="decisions per cell [%(default)s]")
    parser.add_argument("--workers", type=int, default=2, help="processes [%(default)s]")
    parser.add_argument("--params", type=Path, default=Path("params.yaml"), help="the policy under study")
    parser.add_argument("--out", type=Path, default=Path("results/gate-study"), help="[%(default)s]")
    parser.add_argument("--mode", choices=("all", "fixed", "sequential"), default="all",
                        help="which designs to study [%(default)s]")
    parser.add_argument("--reduced", action="store_true",
                        help="sequential mode on p in {1, 0.7} only (CI's time)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    params = config.load(args.params)
    policy = params.gate
    default = {**policy.to_dict(), "policy": "stratified"}
    bound = policy.alpha + 3 * math.sqrt(policy.alpha * (1 - policy.alpha) / args.decisions)
    missed = []
    if args.mode in ("all", "fixed"):
        missed += _fixed(args, policy, default, bound)
    if args.mode in ("all", "sequential"):
        missed += _sequential(args, policy, default, params.sampling, bound)
    if args.check and missed:
        print("gate-study: target missed: " + "; ".join(missed), file=sys.stderr)
        return 1
    return 0


def _sequential(args: argparse.Namespace, policy: Policy, default: dict, plan: SamplingParams, bound: float
                ) -> list[str]:
    cells = [*grid(SEQUENTIAL_RUNS, (1.0, 0.7) if args.reduced else P_VALUES, SEQUENTIAL_CVS),
             *sequential_headline()]
    jobs = [(cell, args.decisions, default, plan) for cell in cells]
    rates: dict[Cell, SequentialRates] = {}
    with ProcessPoolExecutor(args.workers) as pool:
        for cell, found in tqdm(pool.map(simulate_sequential, jobs), total=len(jobs), desc="sequential",
                                unit="cell", file=sys.stderr):
            rates[cell] = found
    figures = write_sequential(args.out, rates, bound, args.decisions, policy, plan)
    print(f"sequential_false_promotion_max={figures['x']:.4f} sequential_power_20pct_runs10_cv035={figures['y']:.4f} "
          f"fixed_power_20pct_runs10_cv035={figures['f']:.4f} sequential_runs_boundary_runs10_cv035={figures['r']:.2f}")
    return ([f"sequential null cell {figures['x']:.4f} above {bound:.4f}"] if figures["x"] > bound else []) + (
        [f"sequential power {figures['y']:.4f} below 0.8"] if figures["y"] < 0.8 else [])


def _fixed(args: argparse.Namespace, policy: Policy, default: dict, bound: float) -> list[str]:
    seed = {**policy.to_dict(), "policy": "seed"}
    cells = list(grid())
    rates: dict[Cell, tuple[float, float]] = {}
    jobs = [(cell, args.decisions, default, seed) for cell in cells]
    with ProcessPoolExecutor(args.workers) as pool:
        for cell, ours, theirs in tqdm(pool.map(simulate, jobs), total=len(jobs), desc="gate study", unit="cell",
                                       file=sys.stderr):
            rates[cell] = (ours, theirs)
    power_runs = _runs_for_power(args.decisions, default, seed, args.workers)
    sched = _schedules(args.decisions, Policy.from_dict(default))
    figures = write(args.out, rates, power_runs, sched, bound, args.decisions, policy)
    print(f"false_promotion_max={figures['x']:.4f} power_20pct_runs10_cv035={figures['y']:.4f} "
          f"seed_false_promotion_max={figures['z']:.4f}")
    return ([f"null cell {figures['x']:.4f} above {bound:.4f}"] if figures["x"] > bound else []) + (
        [f"power {figures['y']:.4f} below 0.8"] if figures["y"] < 0.8 else [])


def _runs_for_power(decisions: int, default: dict, seed: dict, workers: int) -> dict[int, float]:
    """Power for a 20% saving at p = 1, CV 0.35, over runs 3..12: where it reaches 0.8."""
    jobs = [(Cell("20% cheaper", 1.0, 0.35, runs), max(300, decisions // 2), default, seed) for runs in range(3, 13)]
    with ProcessPoolExecutor(workers) as pool:
        return {cell.runs: ours for cell, ours, _ in tqdm(pool.map(simulate, jobs), total=len(jobs),
                                                         desc="power by runs", unit="runs", file=sys.stderr)}


def _schedules(decisions: int, policy: Policy) -> dict[tuple[int, bool], float]:
    """Final false promotions over evolve schedules of 1-5 generations, with and without confirmation."""
    cell = Cell("boundary", 1.0, 0.35, 5)
    count = max(200, decisions // 4)
    return {(g, confirm): schedule(g, count, policy, confirm, cell)
            for g in (1, 3, 5) for confirm in (False, True)}


if __name__ == "__main__":
    sys.exit(main())
