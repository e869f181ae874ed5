"""`make gate-study-simulator`: the gate's false promotion rate on the simulator's own noise, not the study's model.

make gate-study draws lognormal costs; the realistic simulator's are a mixture (prose verbosity, Poisson extra
calls, mistakes the oracle catches, skipped skills) seen through the real CLI's token accounting. Here the same
incumbent is measured twice, as two independent replicates (real CLI, real bubblewrap, `auto` arm, realistic
noise), and A/A benches are drawn from the two pools: per gate task RUNS runs of replicate A as the incumbent,
RUNS of replicate B as the candidate, decided by the real gate whole (fixed) and look by look through the real
interim (sequential, params.yaml's sampling.sequential). Any promotion is false. The resamples share two finite
pools, so the rate is that of the pools' empirical distributions; more runs make it the simulator's.

    python -m benchmarks.simulator_null --pool 40 --resamples 1000
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import gate_model
from benchmarks.economy import MAX_DROP, RUNS, _params
from skillevo import config
from skillevo.bench.side import plan, run_side
from skillevo.config import Policy

ROOT = Path(__file__).resolve().parents[1]
REPLICATES = (101, 102)  # any two replicates are independent measurements of the same incumbent


def pools(pool: int, seed: int) -> tuple[list[str], list[list[dict]]]:
    """The gate tasks and the two replicates' rows, `pool` runs per (task, arm)."""
    with tempfile.TemporaryDirectory(prefix="skillevo-simnull-") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        os.chdir(clone)  # params name the family relative to the project, as a stage sees it
        sides = []
        for replicate in REPLICATES:
            p = _params(clone, seed, pool, sequential=False, replicate=replicate)
            out = Path(tmp) / f"replicate-{replicate}"
            sides.append(run_side(plan("incumbent", clone / "tasks/tasks.yaml", clone / "skills", None, p), p, out,
                                  quiet=False))
        tasks = json.loads((out / "bench.json").read_text())["task_split"]["gate"]
        os.chdir(ROOT)
    return tasks, sides


def _draw(rows: list[dict], task: str, arm: str, rng: random.Random) -> list[dict]:
    chosen = rng.sample([r for r in rows if r["task"] == task], RUNS)
    return [dict(r, arm=arm, run=i) for i, r in enumerate(chosen, start=1)]


def study(tasks: list[str], sides: list[list[dict]], resamples: int, seed: int) -> dict[str, float]:
    default = config.load(ROOT / "params.yaml")
    policy = Policy.from_dict({**default.gate.to_dict(), "policy": "stratified", "max_resolution_drop_pct": MAX_DROP})
    sampling_plan = gate_model.sequential_plan(dataclasses.replace(default.sampling, sequential=dataclasses.replace(
        default.sampling.sequential, max_resolution_drop_pct=MAX_DROP)), RUNS)
    rng = random.Random(f"simulator-null {seed}")
    fixed = sequential = runs = 0
    for _ in range(resamples):
        rows = [row for task in tasks for row in (*_draw(sides[0], task, gate_model.INCUMBENT, rng),
                                                   *_draw(sides[1], task, gate_model.CANDIDATE, rng))]
        fixed += gate_model.decide(rows, policy, tasks=tasks) == "promote"
        seen, record = gate_model.stopped(rows, sampling_plan)
        sequential += gate_model.decide(seen, policy, record, tasks=tasks) == "promote"
        runs += record["looks"][record["stopped_at_look"] - 1]
    return {"fixed": fixed / resamples, "sequential": sequential / resamples, "runs": runs / resamples}


def describe(tasks: list[str], sides: list[list[dict]]) -> None:
    for task in tasks:
        for replicate, rows in zip(REPLICATES, sides, strict=True):
            logs = [math.log(r["cost_usd"]) for r in rows if r["task"] == task and r["cost_usd"]]
            mean, sd = statistics.mean(logs), statistics.stdev(logs)
            skew = sum((x - mean) ** 3 for x in logs) / len(logs) / sd ** 3
            resolved = sum(r["resolved"] for r in rows if r["task"] == task)
            print(f"{task} replicate {replicate}: {len(logs)} runs, log cost sd {sd:.3f} (CV {math.sqrt(math.exp(sd * sd) - 1):.2f}), "
                  f"skew {skew:.2f}, resolved {resolved}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", type=int, default=40, help="runs per (task, arm) in each replicate [%(default)s]")
    parser.add_argument("--resamples", type=int, default=1000, help="A/A benches drawn [%(default)s]")
    parser.add_argument("--seed", type=int, default=0, help="the simulator's seed [%(default)s]")
    args = parser.parse_args(argv)
    if args.pool < 2 * RUNS:
        parser.error(f"--pool must be at least {2 * RUNS}: each bench draws {RUNS} runs an arm")
    if not os.environ.get("SKILLEVO_CLAUDE"):
        raise SystemExit("run through `make gate-study-simulator` (it sets SKILLEVO_CLAUDE to the pinned CLI)")
    tasks, sides = pools(args.pool, args.seed)
    describe(tasks, sides)
    rates = study(tasks, sides, args.resamples, args.seed)
    alpha = config.load(ROOT / "params.yaml").gate.alpha
    print("simulated: the offline simulator played the model (realistic noise)")
    print(f"simulator_null resamples={args.resamples} pool={args.pool} false_promotion_fixed={rates['fixed']:.4f} "
          f"false_promotion_sequential={rates['sequential']:.4f} alpha={alpha:g} "
          f"mean_candidate_runs={rates['runs']:.2f}/{RUNS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
