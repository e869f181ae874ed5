"""`skillevo run`: one task on one arm, once, to see what a session does before a generation is paid for.

    skillevo run greet                    # the task on arm auto (or the first arm), one run, offline on the simulator
    skillevo run greet --arm workflow     # any incumbent-side arm of params
    skillevo show results/run/greet-auto  # then read its transcripts

The cell is built, sandboxed, checked and recorded exactly as the bench does it (skillevo.bench: the same plan,
workspace, sessions, verify and hidden oracle), into its own directory (results/run/<task>-<arm>/: results.jsonl,
transcripts/, report.md), on whatever backend params name: with a real model it is paid, one cell's worth. It
uses no cell store and touches no stage's outputs, so DVC sees nothing of it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from skillevo.core import layout, stage
from skillevo.files.errors import BadInput

RUNS = layout.RESULTS / "run"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="skillevo run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("task", help="a task id of the tasks file")
    p.add_argument("--arm", default=None, help="an incumbent-side arm of params [auto, else the first]")
    p.add_argument("--runs", type=int, default=1, help="runs of the cell [%(default)s]")
    p.add_argument("--params", type=Path, default=layout.PARAMS, help="[%(default)s]")
    p.add_argument("--tasks", type=Path, default=layout.TASKS_FILE, help="[%(default)s]")
    stage.family_options(p, mirrors=False)
    p.add_argument("--out", type=Path, default=None, help="[results/run/<task>-<arm>]")
    return p


def run(args: argparse.Namespace) -> str:
    from skillevo.bench import plan, run_side  # the whole bench: only once the arguments are known good

    if not 1 <= args.runs <= 20:
        raise BadInput(f"--runs {args.runs}: one to 20 runs (rule: a look at one task, not a bench)")
    params = stage.load_params("run", args)
    side = plan("incumbent", args.tasks, stage.skills_dir(args, params), None, params, include_expensive=True)
    tasks = [t for t in side.tasks if t.id == args.task]
    if not tasks:
        known = ", ".join(sorted(t.id for t in side.tasks))
        raise BadInput(f"{args.tasks}: no task {args.task!r} (rule: a task of the tasks file; there are: {known})")
    names = [a.name for a in side.arms]
    arm = args.arm or ("auto" if "auto" in names else names[0])
    if arm not in names:
        raise BadInput(f"{args.params}: no incumbent-side arm {arm!r} (rule: an arm of params; there are: "
                       f"{', '.join(names)})")
    one = dataclasses.replace(side, tasks=tasks, arms=[a for a in side.arms if a.name == arm], runs=args.runs)
    out = args.out or RUNS / f"{args.task}-{arm}"
    if out.exists():
        raise BadInput(f"{out}: exists; remove it or give --out (rule: a run never overwrites another)")
    rows = run_side(one, params, out)
    for row in rows:
        cost = "unmeasured" if row["cost_usd"] is None else f"${row['cost_usd']:.4f}"
        outcome = "resolved" if row["resolved"] else f"unresolved ({row['error_kind']})"
        print(f"run {row['run']}: {outcome}, {cost}, {row['num_turns']} turn(s); transcripts: "
              + ", ".join(str(out / m["path"]) for m in row["transcripts"]))
    return f"run: {args.task} on arm {arm}, {len(rows)} run(s) in {out}; read them: skillevo show {out}"


def main(argv: list[str] | None = None) -> int:
    return stage.main("run", parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
