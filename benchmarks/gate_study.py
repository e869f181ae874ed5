"""`make gate-study`: the gate's error rates about what a team pays, measured by simulation against its own code.

Each decision builds result rows for 4 tasks (base cost 0.5 to 4 USD a run) and both arms, in the order a
bench measures them, and runs them through skillevo.core.results.aggregate and skillevo.gate.decide_arm with the
params.yaml policy (benchmarks/gate_model.py has the model and every scenario). A scenario's truth is the
candidate's dollars per resolved task over the task set relative to the incumbent's; a promotion of a scenario
whose truth is not below 1 is a false promotion. The geometric-mean test (`gate.policy: geometric`, the gate
before this one) decides the same benches beside it.

Parts (--parts, all by default):
- claims: the issue's cases at the configurations it names, and the default schedule's headline power;
- preflight: the preflight's stated power (its own call, on simulated incumbent sides) beside the power the
  study measures, at three configurations (the first alone with --reduced);
- grid: every scenario at 5, 10 and 20 runs, p 0.9, CV 0.35, in both bench designs: `interleaved` (what the
  bench runs: contemporaneous controls in random order within blocks of task x run) and `separate` (the
  incumbent measured at another moment, as before: the gate now refuses such a control, and this shows why);
- robust: the nulls that break convenient assumptions at p in {1, 0.7} x CV in {0.2, 0.5}, 10 and 20 runs;
- power: 10% and 20% savings at p = 1, and the runs a 20% saving needs for power 0.8 (p = 1, CV 0.35);
- sequential: candidate runs in looks (sampling.sequential on), judged at the stopped look's boundary;
- evolve: schedules of null candidates over 1, 3, 5 and 20 generations, with and without evolve's confirmation:
  with it, the share of 20-generation runs that end in any false promotion is the family error rate
  gate.family_alpha bounds (skillevo/gate/family.py); --check fails when it is over family_alpha + 3 standard
  errors.

Writes results/gate-study/{table.md,rates.csv,rates.svg} and ends with the line
`false_promotion_max=<x> power_20pct_real=<y> mean_runs_20pct_real=<n>`, x over every null cell of the design
skillevo runs (interleaved; the sequential part included), y the default schedule's power for a 20% saving at
resolution 0.85, CV 0.35 on 4 tasks (the claims part) and n the mean candidate runs a task it spent there. With
--check it exits 1 when x exceeds alpha + 3 standard errors.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from tqdm import tqdm

from benchmarks.gate_model import (
    DESIGNS,
    RUNS,
    SCENARIOS,
    Cell,
    SequentialRates,
    is_null,
    preflight_power,
    schedule_rate,
    simulate,
    simulate_sequential,
)
from benchmarks.gate_study_report import Study, write
from skillevo.core import config

PARTS = ("claims", "preflight", "grid", "robust", "power", "sequential", "evolve")
# the cases issue 29 names, each at the configuration it names: (cell, how it is run)
CLAIMS = (
    (Cell("loop tail", "interleaved", 14, 0.8, tasks=3), "fixed"),
    (Cell("spread", "interleaved", 14, 0.8, tasks=3), "fixed"),
    (Cell("boundary", "interleaved", 14, 0.8, tasks=3), "fixed"),
    (Cell("resolves more, as dear", "interleaved", 14), "fixed"),
    (Cell("resolves more, 10% dearer", "interleaved", 14), "fixed"),
    (Cell("warm after the same task 0.3", "interleaved", 14), "fixed"),
    (Cell("warm after the same task 0.3", "unrandomised", 14), "fixed"),  # the reference: order not randomised
    (Cell("hides its worst run", "interleaved", 14), "fixed"),
    (Cell("20% cheaper, 10% faults", "interleaved", 14), "fixed"),
    (Cell("20% cheaper, 10% late faults", "interleaved", 14), "fixed"),
    (Cell("blind faults", "interleaved", 14), "fixed"),
)
# where the preflight's stated power is set beside the study's: (p, CV, gate tasks), a 20% saving per run
PREFLIGHT = ((0.85, 0.35, 4), (0.95, 0.35, 3), (0.85, 0.7, 4))
NULLS = tuple(s.name for s in SCENARIOS if is_null(s))
ROBUST = ("boundary", "spread", "retry loop", "cheap task only", "less resolution", "gives up")
ROBUST_SETTINGS = ((1.0, 0.2), (1.0, 0.5), (0.7, 0.2), (0.7, 0.5))
POWER_RUNS = (10, 12, 14, 16, 20, 24, 30)
SEQUENTIAL = ("boundary", "spread", "retry loop", "side drift 0.1", "10% cheaper", "20% cheaper")
FAMILY_GENERATIONS = 20  # the horizon gate.family_alpha 0.05 allows at gate.alpha 0.05 (skillevo.gate.family)
REDUCED = ("boundary", "spread", "retry loop", "cheap task only", "less resolution", "gives up", "side drift 0.1",
           "warm or cold 0.15", "hides its worst run", "20% cheaper")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gate_study", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decisions", type=int, default=2000, help="decisions per cell [%(default)s]")
    parser.add_argument("--workers", type=int, default=2, help="processes [%(default)s]")
    parser.add_argument("--params", type=Path, default=Path("params.yaml"), help="the policy under study")
    parser.add_argument("--out", type=Path, default=Path("results/gate-study"), help="[%(default)s]")
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated, of " + ", ".join(PARTS))
    parser.add_argument("--runs", default=",".join(map(str, RUNS)), help="the grid's runs per task [%(default)s]")
    parser.add_argument("--reduced", action="store_true",
                        help="CI's subset: the interleaved grid's nulls and the 20%% saving at 10 and 20 runs, the "
                             "headline power cell, the preflight's stated power there and two sequential cells")
    parser.add_argument("--check", action="store_true", help="exit 1 when a null cell is over its target")
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown parts {unknown}; known: {', '.join(PARTS)}")
    params = config.load(args.params)
    # the test by betting at params.yaml's schedule (docs/gate.md): what every part measures first; the bootstrap-t
    # test (gate.test: bootstrap) beside it in the claims, the geometric test beside it in the grid
    policy = {**params.gate.to_dict(), "policy": "per_resolved", "test": "betting"}
    bootstrap = {**params.gate.to_dict(), "policy": "per_resolved", "test": "bootstrap"}
    geometric = {**params.gate.to_dict(), "policy": "geometric"}
    if args.reduced:
        args.runs, parts = "10,20", [p for p in parts if p in ("claims", "preflight", "grid", "power", "sequential")]
    study = Study(args.decisions, config.Policy.from_dict(policy), params.sampling,
                  [int(r) for r in args.runs.split(",")])
    pool = ProcessPoolExecutor(args.workers)
    plan = params.sampling
    try:
        if "claims" in parts:
            headline = Cell("20% cheaper", "interleaved", plan.runs, p=0.85)  # the real case
            jobs = [(c, args.decisions, (policy, bootstrap), plan) for c, how in CLAIMS if how == "fixed"]
            study.claims = _map(pool, simulate, jobs, "claims")
            sequential = [(c, args.decisions, policy, plan) for c in (
                headline, Cell("boundary", "interleaved", plan.runs, p=0.85),
                Cell("20% cheaper, 10% faults", "interleaved", plan.runs, p=0.85))]
            study.headline = _map(pool, simulate_sequential, sequential, "claims (default schedule)")
        if "preflight" in parts:
            cells = [Cell("20% cheaper", "interleaved", plan.runs, p, cv, tasks)
                     for p, cv, tasks in PREFLIGHT[:1 if args.reduced else None]]
            measured = {c: r for c, r in study.headline.items() if c in cells}
            measured |= _map(pool, simulate_sequential, [(c, args.decisions, policy, plan) for c in cells
                                                         if c not in measured], "preflight (the study's power)")
            # the stated power varies with the incumbent side it reads: many sides, few simulated sides each
            incumbents = max(4, args.decisions // 10)
            stated = _map(pool, preflight_power, [(c, incumbents, max(10, args.decisions // incumbents), policy, plan)
                                                  for c in cells], "preflight (its stated power)")
            study.preflight = {c: (*stated[c], measured[c]) for c in cells}
        if "grid" in parts:
            chosen = [s for s in SCENARIOS if not args.reduced or s.name in REDUCED]
            cells = [Cell(s.name, d, r) for s in chosen for r in study.runs for d in DESIGNS[:2]
                     if not args.reduced or d == "interleaved"]
            study.grid = _map(pool, simulate, [(c, args.decisions, (policy, geometric), plan) for c in cells], "grid")
        if "robust" in parts:
            cells = [Cell(name, "interleaved", r, p, cv) for name in ROBUST for p, cv in ROBUST_SETTINGS
                     for r in study.runs if r >= 10]
            study.robust = _map(pool, simulate, [(c, args.decisions, (policy,), plan) for c in cells], "robust")
        if "power" in parts:
            cells = [Cell(name, "interleaved", r, 1.0) for name in ("10% cheaper", "20% cheaper") for r in study.runs]
            cells += [Cell("20% cheaper", "interleaved", r, 1.0) for r in POWER_RUNS
                      if r not in study.runs and not args.reduced]
            study.power = _map(pool, simulate, [(c, args.decisions, (policy,), plan) for c in cells], "power")
        if "sequential" in parts:
            cells = [Cell(name, "interleaved", r) for name in SEQUENTIAL for r in study.runs if r >= 10]
            cells += [Cell("20% cheaper", "interleaved", r, 1.0) for r in study.runs if r >= 10]
            if args.reduced:
                cells = [Cell("boundary", "interleaved", 10), Cell("20% cheaper", "interleaved", 10, 1.0)]
            jobs = [(c, args.decisions, policy, params.sampling) for c in cells]
            study.sequential = _map(pool, simulate_sequential, jobs, "sequential")
        if "evolve" in parts:
            cell = Cell("boundary", "interleaved", 10)
            count = max(100, args.decisions // 4)
            jobs = [(g, count, policy, confirm, cell, plan) for g in (1, 3, 5, FAMILY_GENERATIONS)
                    for confirm in (False, True)]
            study.schedules = _map(pool, schedule_rate, jobs, "evolve")
            study.family_alpha, study.family_schedules = params.gate.family_alpha, count
    finally:
        pool.shutdown()
    figures = write(args.out, study, NULLS)
    print(f"false_promotion_max={figures['x']:.4f} power_20pct_real={figures['y']:.4f} "
          f"mean_runs_20pct_real={figures['n']:.1f}")
    family_rate = study.schedules.get((FAMILY_GENERATIONS, True))
    if family_rate is not None:
        print(f"family_false_promotion_{FAMILY_GENERATIONS}gen={family_rate:.4f} target={study.family_bound:.4f}")
    if args.check and family_rate is not None and family_rate > study.family_bound:
        print(f"gate-study: {FAMILY_GENERATIONS}-generation evolutions of null candidates end in a false promotion "
              f"{family_rate:.4f} of the time, over gate.family_alpha's target {study.family_bound:.4f}",
              file=sys.stderr)
        return 1
    if args.check and figures["x"] > study.bound:
        print(f"gate-study: a null cell is over its target: {figures['x']:.4f} > {study.bound:.4f} "
              f"({figures['worst']})", file=sys.stderr)
        return 1
    return 0


def _map(pool: ProcessPoolExecutor, fn: Callable[[Any], tuple[Any, Any]], jobs: Iterable[Any], what: str
         ) -> dict[Any, Any]:
    jobs = list(jobs)
    out = {}
    for key, value in tqdm(pool.map(fn, jobs), total=len(jobs), desc=what, unit="cell", file=sys.stderr):
        out[key] = value
    return out


def bound(alpha: float, decisions: int) -> float:
    return alpha + 3 * math.sqrt(alpha * (1 - alpha) / decisions)


__all__ = ["SequentialRates", "bound", "main"]

if __name__ == "__main__":
    sys.exit(main())
