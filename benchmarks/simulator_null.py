"""`make gate-study-simulator`: the gate's false promotion rate on the simulator's own noise, with drift on.

make gate-study draws costs from a model. Here the simulator plays the model through the real CLI and bubblewrap,
under its `drifting` profile (realistic noise, plus drift between measuring moments and prompt-cache windows
warm or cold along a bench's order; docs/simulator.md). The candidate is the incumbent with one more newline at
the end of its `work` skill (a bench refuses an overlay that changes nothing; one token among some 17,000 of the
prompt is a null), benchmarked in M moments as the bench runs a candidate side: the `auto`
candidate arm beside its control, interleaved in blocks of (task, run), POOL runs each per gate task. A/A
benches are drawn from those pools and decided by the real gate (params.yaml's policy), two ways:

- interleaved (what skillevo runs): the candidate's RUNS runs and the control's RUNS runs from one moment;
- separate (the design before it): the control's runs from one moment, the candidate's from another, as when the
  incumbent side measured weeks earlier stood in for the control.

Every promotion is false. The last line is
`simulator_null moments=<m> pool=<n> resamples=<r> false_promotion_interleaved=<x> false_promotion_separate=<y>
alpha=<a> bound=<alpha + 3 standard errors>`.

    python -m benchmarks.simulator_null --moments 8 --pool 20 --resamples 1000
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from benchmarks import gate_model
from skillevo import config
from skillevo.bench.side import plan, run_side
from skillevo.layout import CANDIDATE_PREFIX

ROOT = Path(__file__).resolve().parents[1]
ARM = "auto"
RUNS = 14  # per gate task and arm in one A/A bench: 3 gate tasks x 14 reach gate.min_total_runs 40


def _params(clone: Path, seed: int, pool: int, replicate: int) -> config.Params:
    doc = yaml.safe_load((clone / "params.yaml").read_text())
    doc["arms"] = {ARM: doc["arms"][ARM]}
    doc["simulator"].update(noise="drifting", seed=seed)
    doc["sampling"].update(runs=pool, incumbent_runs=1, replicate=replicate)
    doc["sampling"].setdefault("sequential", {})["enabled"] = False
    (clone / "params.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return config.load(clone / "params.yaml")


def moments(count: int, pool: int, seed: int) -> tuple[list[str], list[list[dict]]]:
    """The gate tasks and, per moment, a candidate side's rows: the identical candidate beside its control."""
    sides = []
    with tempfile.TemporaryDirectory(prefix="skillevo-simnull-") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        same = Path(tmp) / "identical" / "work"
        same.mkdir(parents=True)  # the incumbent's work skill and one more newline: a bench needs a change, and a
        (same / "SKILL.md").write_bytes((clone / "skills/work/SKILL.md").read_bytes() + b"\n")  # token is nothing
        same = same.parent
        os.chdir(clone)  # params name the family relative to the project, as a stage sees it
        try:
            for m in range(count):
                p = _params(clone, seed, pool, replicate=100 + m)  # a new replicate is a new moment
                out = Path(tmp) / f"moment-{m}"
                print(f"moment {m + 1} of {count}", file=sys.stderr, flush=True)
                side = plan("candidate", clone / "tasks/tasks.yaml", clone / "skills", same, p)
                sides.append(run_side(side, p, out, quiet=False))
            tasks = list(p.tasks.gate)
        finally:
            os.chdir(ROOT)
    return tasks, sides


def _draw(rows: list[dict], task: str, arm: str, as_arm: str, rng: random.Random) -> list[dict]:
    chosen = rng.sample([r for r in rows if r["task"] == task and r["arm"] == arm], RUNS)
    return [dict(r, arm=as_arm, run=i) for i, r in enumerate(chosen, start=1)]


def study(tasks: list[str], sides: list[list[dict]], resamples: int, seed: int) -> dict[str, float]:
    policy = config.load(ROOT / "params.yaml").gate
    rng = random.Random(f"simulator-null {seed}")
    control, candidate = ARM, CANDIDATE_PREFIX + ARM
    promoted = {"interleaved": 0, "separate": 0}
    for _ in range(resamples):
        here = rng.randrange(len(sides))
        there = rng.choice([m for m in range(len(sides)) if m != here])
        for way, source in (("interleaved", here), ("separate", there)):
            rows = [row for task in tasks for row in (
                *_draw(sides[here], task, control, gate_model.INCUMBENT, rng),
                *_draw(sides[source], task, candidate, gate_model.CANDIDATE, rng))]
            promoted[way] += gate_model.decide(rows, policy, tasks=tasks) == "promote"
    return {way: n / resamples for way, n in promoted.items()}


def describe(tasks: list[str], sides: list[list[dict]]) -> None:
    """Each moment's mean cost per arm: how far the moments drift, and that both arms of a moment move together."""
    for m, rows in enumerate(sides):
        means = {arm: statistics.mean(r["cost_usd"] for r in rows if r["arm"] == arm and r["cost_usd"])
                 for arm in (ARM, CANDIDATE_PREFIX + ARM)}
        print(f"moment {m + 1}: mean cost per run control {means[ARM]:.4f}, candidate "
              f"{means[CANDIDATE_PREFIX + ARM]:.4f}, resolved {sum(r['resolved'] for r in rows)}/{len(rows)}")
    logs = [math.log(statistics.mean(r["cost_usd"] for r in rows if r["cost_usd"])) for rows in sides]
    print(f"between moments: sd of log mean cost {statistics.stdev(logs):.3f} over {len(sides)} moments "
          f"({len(tasks)} gate tasks)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moments", type=int, default=8, help="candidate sides measured [%(default)s]")
    parser.add_argument("--pool", type=int, default=20, help="runs per (task, arm) in each moment [%(default)s]")
    parser.add_argument("--resamples", type=int, default=1000, help="A/A benches drawn [%(default)s]")
    parser.add_argument("--seed", type=int, default=0, help="the simulator's seed [%(default)s]")
    args = parser.parse_args(argv)
    if args.pool < RUNS or args.moments < 2:
        parser.error(f"--pool must be at least {RUNS} (each bench draws {RUNS} runs an arm) and --moments at least 2")
    if not os.environ.get("SKILLEVO_CLAUDE"):
        raise SystemExit("run through `make gate-study-simulator` (it sets SKILLEVO_CLAUDE to the pinned CLI)")
    tasks, sides = moments(args.moments, args.pool, args.seed)
    describe(tasks, sides)
    rates = study(tasks, sides, args.resamples, args.seed)
    alpha = config.load(ROOT / "params.yaml").gate.alpha
    bound = alpha + 3 * math.sqrt(alpha * (1 - alpha) / args.resamples)
    print("simulated: the offline simulator played the model (drifting noise)")
    print(f"simulator_null moments={args.moments} pool={args.pool} resamples={args.resamples} "
          f"false_promotion_interleaved={rates['interleaved']:.4f} false_promotion_separate={rates['separate']:.4f} "
          f"alpha={alpha:g} bound={bound:.4f}")
    return 0 if rates["interleaved"] <= bound else 1


if __name__ == "__main__":
    sys.exit(main())
