"""`make bench-economy`: paid agent sessions per gate decision over a scripted three-generation schedule.

The schedule, on the offline simulator with `realistic` noise (real CLI, real bubblewrap): generation 1 and 2
propose a null candidate (a hand-written rewording of a line that steers nothing the agent does), generation 3
the known-better one (tests/overlays/known-better: the wasteful instruction dropped). Each schedule is run on a
fresh clone of this checkout, per seed, three ways, all on the same tasks and the `auto` arm (every overlay is
tested there; one session a cell keeps the benchmark short):

- ours: the cell store (the incumbent side, sampling.incumbent_runs a cell, is paid in generation 1 and served
  afterwards) and sequential candidate sampling (sampling.sequential, up to RUNS runs; each look runs the
  candidate arm and its contemporaneous control), judged by the gate (per resolved task) at the stopped look's
  boundary;
- fixed_rerun: no store, the incumbent side re-measured every generation (a fresh replicate: new noise), the
  candidate and its control at a fixed number of runs chosen to give the same power as ours (make gate-study's
  model and the gate's own code: the smallest runs, at least gate.min_total_runs over the gate's tasks, whose
  fixed-design power for a 20% saving at resolution 0.9 and CV 0.2 reaches the sequential design's), the same
  gate;
- seed-style, for reference: 3 runs, no reuse, the seed's rule (gate.policy: seed), beside its controls too.

A promotion of a null candidate is a false promotion. The last line is
`paid_sessions_per_decision=<ours>,<fixed_rerun> ratio=<x> false_promotions=<ours>,<fixed_rerun>`.

    python -m benchmarks.economy --seeds 3
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import yaml

from benchmarks import gate_model
from skillevo.bench import plan, run_side
from skillevo.core import config
from skillevo.core.results import load_side
from skillevo.freeze import freeze
from skillevo.gate import build_promotion, load_freeze

ROOT = Path(__file__).resolve().parents[1]
RUNS = config.load(ROOT / "params.yaml").sampling.runs  # ours: the default schedule's most candidate runs per cell
INCUMBENT_RUNS = 5  # the incumbent side's runs per (task, arm): params.yaml's sampling.incumbent_runs
GATE_TASKS = 3
POWER_CELL = ("20% cheaper", 0.9, 0.2)  # the study model's nearest cell: p about 0.9, CV about 0.1-0.2
WORK = "skills/work/SKILL.md"
NULLS = (("- End with two or three sentences on what changed and why.",
          "- Close with two or three sentences on what changed and why."),
         ("in the style of the surrounding code.", "in the style of the code around it."))
SCHEDULE = ("null", "null", "better")


def _null(clone: Path, n: int) -> Path:
    old, new = NULLS[n]
    text = (clone / WORK).read_text()
    assert old in text, f"{WORK} no longer holds {old!r}: update benchmarks/economy.py"
    out = clone.parent / f"null-{n + 1}/work"
    out.mkdir(parents=True)
    (out / "SKILL.md").write_text(text.replace(old, new))
    return out.parent


def _params(clone: Path, seed: int, runs: int, *, sequential: bool, policy: str = "per_resolved",
            replicate: int = 0) -> config.Params:
    doc = yaml.safe_load((clone / "params.yaml").read_text())
    doc["arms"] = {"auto": doc["arms"]["auto"]}
    doc["simulator"].update(noise="realistic", seed=seed)
    doc["sampling"].update(runs=runs, incumbent_runs=INCUMBENT_RUNS, replicate=replicate)
    doc["sampling"].setdefault("sequential", {})["enabled"] = sequential
    doc["gate"].update(policy=policy)
    (clone / "params.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return config.load(clone / "params.yaml")


def _paid(side: Path, since: str) -> int:
    """Sessions this bench paid for: its rows recorded since it started (a served row keeps when it ran)."""
    rows = [json.loads(line) for line in (side / "results.jsonl").read_text().splitlines()]
    return sum(len(r["session_ids"]) for r in rows if r["recorded_at"] >= since)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def schedule(clone: Path, seed: int, way: str, runs: int) -> dict:
    """One way through the three generations: sessions paid and the decision of each."""
    work = clone / "results" / way
    store = work / "cells" if way == "ours" else None
    overlays = {"null": [_null(clone, 0), _null(clone, 1)], "better": [ROOT / "tests/overlays/known-better"]}
    decisions, paid, runs_used = [], 0, []
    os.chdir(clone)  # params name the family relative to the project, as a stage sees it
    for g, kind in enumerate(SCHEDULE, start=1):
        overlay = overlays[kind].pop(0)
        replicate = 0 if way == "ours" else g  # a re-run incumbent is a fresh measurement
        p = _params(clone, seed, runs, sequential=way == "ours",
                    policy="seed" if way == "seed-style" else "per_resolved", replicate=replicate)
        frozen = work / f"gen{g}/freeze"
        freeze(overlay, params=p, tasks_file=clone / "tasks/tasks.yaml", repo=clone, out=frozen, session=None)
        inc, cand = work / f"gen{g}/incumbent", work / f"gen{g}/candidate"
        start = _now()
        run_side(plan("incumbent", clone / "tasks/tasks.yaml", clone / "skills", None, p), p, inc, quiet=True,
                 store=store)
        paid += _paid(inc, start)
        start = _now()
        run_side(plan("candidate", clone / "tasks/tasks.yaml", clone / "skills", frozen / "overlay", p,
                      incumbent=inc), p, cand, quiet=True, store=store)
        paid += _paid(cand, start)
        promotion = build_promotion(load_side(inc, "incumbent"), load_side(cand, "candidate"),
                                    load_freeze(frozen / "manifest.json"), p.gate, now=datetime.now(UTC),
                                    plan=p.sampling)
        decision = "promote" if all(d["decision"] == "promote" for d in promotion["decisions"]) else "keep"
        decisions.append((kind, decision))
        for d in promotion["decisions"]:
            print(f"  gen {g} ({kind}) {way}: {d['candidate_arm']} {d['decision']}: {(d['reasons'] or [''])[0]}",
                  flush=True)
        runs_used.append(max(json.loads(line)["run"] for line in (cand / "results.jsonl").read_text().splitlines()))
    os.chdir(ROOT)
    return {"paid": paid, "decisions": decisions, "candidate_runs": runs_used}


def fixed_runs_for_equal_power(decisions: int = 600) -> tuple[int, float, dict[int, float]]:
    """The fewest fixed-design runs, at least what gate.min_total_runs needs on the gate's 3 tasks, whose power for
    a 20% saving (resolution 0.9, CV 0.2) reaches the sequential design's at RUNS, both by make gate-study's model
    (4 tasks, its minimum scaled to them) with the gate's own code."""
    default = config.load(ROOT / "params.yaml")
    floor = -(-default.gate.min_total_runs // GATE_TASKS)
    scaled = floor * len(gate_model.TASKS)  # the same runs per task on the model's 4 tasks
    policy = {**default.gate.to_dict(), "policy": "per_resolved", "min_total_runs": scaled}
    plan = dataclasses.replace(default.sampling, sequential=dataclasses.replace(
        default.sampling.sequential, min_total_runs=scaled))
    name, p, cv = POWER_CELL
    cell = gate_model.Cell(name, "interleaved", RUNS, p, cv)
    _, rates = gate_model.simulate_sequential((cell, decisions, policy, plan))
    powers = {}
    fixed = dataclasses.replace(plan, sequential=dataclasses.replace(plan.sequential, enabled=False))
    for runs in range(floor, RUNS + 1, 2):
        _, (power,) = gate_model.simulate((dataclasses.replace(cell, runs=runs), decisions, (policy,),
                                           dataclasses.replace(fixed, runs=runs)))
        powers[runs] = power
        if power >= rates.spending:
            return runs, rates.spending, powers
    return RUNS, rates.spending, powers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="how many simulator seeds [%(default)s]")
    parser.add_argument("--first-seed", type=int, default=0, help="the first of them [%(default)s]")
    args = parser.parse_args(argv)
    if not os.environ.get("SKILLEVO_CLAUDE"):
        raise SystemExit("run through `make bench-economy` (it sets SKILLEVO_CLAUDE to the pinned CLI)")
    fixed, seq_power, powers = fixed_runs_for_equal_power()
    print(f"power for a 20% saving (gate-study model, p={POWER_CELL[1]}, CV {POWER_CELL[2]}): sequential up to "
          f"{RUNS} runs {seq_power:.3f}; "
          f"fixed " + ", ".join(f"{n}: {pw:.3f}" for n, pw in powers.items()) + f" -> fixed_rerun at {fixed} runs")
    ways = {"ours": RUNS, "fixed_rerun": fixed, "seed-style": 3}
    totals = {way: {"paid": 0, "false": 0, "true": 0} for way in ways}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        with tempfile.TemporaryDirectory(prefix="skillevo-economy-") as tmp:
            for way, runs in ways.items():
                clone = Path(tmp) / way / "clone"
                clone.parent.mkdir(parents=True)
                subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
                result = schedule(clone, seed, way, runs)
                shutil.rmtree(clone / "results", ignore_errors=True)
                totals[way]["paid"] += result["paid"]
                totals[way]["false"] += sum(k == "null" and d == "promote" for k, d in result["decisions"])
                totals[way]["true"] += sum(k == "better" and d == "promote" for k, d in result["decisions"])
                print(f"seed {seed} {way}: paid {result['paid']} sessions; "
                      + ", ".join(f"{k}={d}" for k, d in result["decisions"])
                      + f"; candidate runs {result['candidate_runs']}", flush=True)
    decisions = len(SCHEDULE) * args.seeds
    per = {way: t["paid"] / decisions for way, t in totals.items()}
    for way, t in totals.items():
        print(f"{way}: {per[way]:.1f} paid sessions per decision, false promotions {t['false']} of "
              f"{2 * args.seeds}, known-better promoted {t['true']} of {args.seeds}")
    print("simulated: the offline simulator played the model (realistic noise); sessions are its, not a bill")
    print(f"paid_sessions_per_decision={per['ours']:.1f},{per['fixed_rerun']:.1f} "
          f"ratio={per['ours'] / per['fixed_rerun']:.2f} "
          f"false_promotions={totals['ours']['false']},{totals['fixed_rerun']['false']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
