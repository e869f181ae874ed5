"""`skillevo check` (`make check`): everything that can be known wrong before any money is spent, one line per
problem (skillevo/readiness.py says what is checked). Exit 0 when nothing is, 2 when something is, 69 when the machine
cannot run the sandbox.

    skillevo check                 # params, tasks, skills, the gate's design, the credential, then each task
    skillevo check --no-tasks      # everything but the sandboxed runs of each task's setup and checks
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from skillevo import readiness, sandbox
from skillevo.bench import task_soundness
from skillevo.core import arms, layout, placeholder, price, stage, tasks
from skillevo.files.errors import BadInput


def _placeholders(tasks_file: Path, params: object) -> list[str]:
    if params is None:
        return []
    try:
        found = tasks.load(tasks_file, target_roots=params.tasks.target_roots)  # type: ignore[attr-defined]
    except BadInput:
        return []  # configuration() has said why
    return placeholder.placeholders(found, tasks_file)


def _price(params: Any, loaded: list[tasks.Task]) -> list[str]:
    """What the plan will cost (skillevo.core.price), when params and tasks are good enough to count it."""
    if params is None or not loaded:
        return []
    try:
        split = tasks.split(loaded, params.tasks.gate, params.tasks.evidence, params.tasks.shared, params.source)
    except BadInput:
        return []  # configuration() has said why
    chosen, _ = tasks.select(loaded, params.bench.include_expensive)
    gate = [t for t in chosen if t.id in split.gate]
    return price.price(params, len(chosen), len(gate), layout.BENCH["incumbent"] / "results.jsonl").lines()


def _unnamed(params: Any) -> list[str]:
    """Evolvable skills only `auto` can load: not a problem (auto may load them), but nothing guarantees a run
    will, and the bench report's "Skills no run loaded" would say so only after paying."""
    if params is None:
        return []
    return [f"{params.source}: evolvable skill {name!r} is named by no arm, so only an `auto` session can load it and "
            f"none may (add an arm whose prompt names it: `skillevo init` writes one per skill; docs/formats.md, Arms)"
            for name in arms.unnamed(params.skills.evolvable, params.arms)]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="skillevo check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--params", type=Path, default=layout.PARAMS, help="[%(default)s]")
    p.add_argument("--tasks", type=Path, default=layout.TASKS_FILE, help="[%(default)s]")
    p.add_argument("--modes", type=Path, default=layout.MODES, help="[%(default)s]")
    p.add_argument("--repo", type=Path, default=None,
                   help="the git repository the skills paths are relative to [params skills.root]")
    p.add_argument("--no-tasks", action="store_true", help="skip the sandboxed runs of each task")
    return p


def run(args: argparse.Namespace) -> str:
    problems, params, loaded = readiness.configuration(args.params, args.tasks, args.modes, args.repo)
    todo = _placeholders(args.tasks, params)
    ran = 0
    if params is not None and loaded and not args.no_tasks:
        sandbox.preflight()
        problems += task_soundness.run_tasks(loaded, params, str(args.tasks),
                                    on_task=lambda t: print(f"check: task {t.id} ...", file=sys.stderr, flush=True))
        ran = len(loaded)
    for line in _price(params, loaded):
        print(f"check: {line}", flush=True)
    for line in _unnamed(params):
        print(f"check: note: {line}", flush=True)
    for line in problems:
        print(f"check: {line}", file=sys.stderr, flush=True)
    for line in todo:
        print(f"check: to do: {line}", file=sys.stderr, flush=True)
    if problems:
        raise BadInput(f"{len(problems)} problem(s) above; fix them before `dvc repro` (rule: check before paying)")
    if todo:
        raise placeholder.Placeholder(f"{len(todo)} thing(s) left to do above before `dvc repro`; everything else "
                                "checked is ready")
    tasks_part = (f"{ran} task(s) set up and unsolved as given, every check steady over {params.bench.check_runs} "
                  "run(s) on each tree" if ran and params is not None else "tasks not run (--no-tasks)")
    return f"check: ok: params, tasks, skills, the gate's design and the backend; {tasks_part}"


def main(argv: list[str] | None = None) -> int:
    return stage.main("check", parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
