"""`make gate-study-simulator`: the gate's false promotion rate on the simulator's own noise, with drift on.

make gate-study draws costs from a model. Here the simulator plays the model through the real CLI and bubblewrap,
under its `drifting` profile (realistic noise, plus drift between measuring moments and prompt-cache windows
warm or cold along a bench's order; docs/simulator.md). The candidate is the incumbent with one more newline at
the end of its `work` skill (a bench refuses an overlay that changes nothing; one token among some 17,000 of the
prompt is a null), benchmarked in M moments as the bench runs a candidate side: the `auto` candidate arm beside
its control, interleaved in blocks of (task, run), POOL runs each per gate task.

A/A benches are then drawn from those runs and decided by the real gate (params.yaml's policy). Within a moment
the candidate's and the control's runs are one pool (they are the same skills measured side by side), and each
bench draws 2 x RUNS runs per gate task from it without replacement and labels half of them at random as the
candidate: an exact null whatever the pool's own luck, with the moment's drift and cache windows on both arms.
Two ways:

- interleaved (what skillevo runs): both arms from one moment's pool;
- separate (the design before it): the control from one moment's pool, the candidate from another's, as when
  the incumbent side measured weeks earlier stood in for the control.

Every promotion is false. The rows are kept in results/gate-study-simulator/moments.jsonl (--reuse decides again
on them without a session). The last line is
`simulator_null moments=<m> pool=<n> resamples=<r> false_promotion_interleaved=<x> false_promotion_separate=<y>
alpha=<a> bound=<alpha + 3 standard errors>`.

    python -m benchmarks.simulator_null --moments 8 --pool 20 --resamples 1000
"""

from __future__ import annotations

import argparse
import json
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
from skillevo.bench import plan, run_side
from skillevo.core import config
from skillevo.core.layout import CANDIDATE_PREFIX

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


def _pools(tasks: list[str], sides: list[list[dict]]) -> list[dict[str, list[dict]]]:
    """Per moment and gate task, every run of both arms: under the null they are one sample of that moment."""
    return [{task: [r for r in rows if r["task"] == task] for task in tasks} for rows in sides]


def _bench(control: dict[str, list[dict]], candidate: dict[str, list[dict]], same: bool, rng: random.Random
           ) -> list[dict]:
    """One A/A bench: RUNS runs per task and arm drawn without replacement; from one pool (`same`), a random half
    of the draws is labelled the candidate."""
    rows = []
    for task in control:
        if same:
            drawn = rng.sample(control[task], 2 * RUNS)
            mine, theirs = drawn[:RUNS], drawn[RUNS:]
        else:
            mine, theirs = rng.sample(control[task], RUNS), rng.sample(candidate[task], RUNS)
        rows += [dict(r, arm=gate_model.INCUMBENT, run=i) for i, r in enumerate(mine, start=1)]
        rows += [dict(r, arm=gate_model.CANDIDATE, run=i) for i, r in enumerate(theirs, start=1)]
    return rows


def study(tasks: list[str], sides: list[list[dict]], resamples: int, seed: int) -> dict[str, float]:
    policy = config.load(ROOT / "params.yaml").gate
    pools = _pools(tasks, sides)
    rng = random.Random(f"simulator-null {seed}")
    promoted = {"interleaved": 0, "separate": 0}
    for _ in range(resamples):
        here = rng.randrange(len(pools))
        there = rng.choice([m for m in range(len(pools)) if m != here])
        for way, rows in (("interleaved", _bench(pools[here], pools[here], True, rng)),
                          ("separate", _bench(pools[here], pools[there], False, rng))):
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
    parser.add_argument("--reuse", action="store_true", help="decide again on the kept moments, no session")
    args = parser.parse_args(argv)
    if args.pool < RUNS or args.moments < 2:
        parser.error(f"--pool must be at least {RUNS} (each bench draws {RUNS} runs an arm) and --moments at least 2")
    if not os.environ.get("SKILLEVO_CLAUDE") and not args.reuse:
        raise SystemExit("run through `make gate-study-simulator` (it sets SKILLEVO_CLAUDE to the pinned CLI)")
    kept = ROOT / "results/gate-study-simulator/moments.jsonl"
    if args.reuse:
        found = [json.loads(line) for line in kept.read_text().splitlines()]
        tasks, sides = found[0]["tasks"], [m["rows"] for m in found]
    else:
        tasks, sides = moments(args.moments, args.pool, args.seed)
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text("".join(json.dumps({"tasks": tasks, "rows": rows}) + "\n" for rows in sides))
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
