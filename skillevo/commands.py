"""The `skillevo` command: what a team runs in its own repository, one subcommand per job.

    skillevo init [DIR]            write the pipeline into DIR (default evolve/) of this git repository
    skillevo setup                 install the pinned Claude Code CLI (~/.local/share/skillevo)
    skillevo check                 what can be known wrong before anything is paid, one line per problem
    skillevo task add --from-commit FIX   a task from a fix and its tests
    skillevo run TASK [--arm A]    one task on one arm, once, as the bench runs it; skillevo show DIR reads it
    skillevo apply | revert        write the promoted skills into the repository, or undo that
    skillevo status | report       the current generation's decision; every archived generation
    skillevo cells ls|push|pull|gc the cell store (docs/cell-store.md)
    skillevo gc | modes            free the DVC cache; record the family's execute bits

`dvc repro` runs the pipeline's stages (`python -m skillevo.stages.<name>`); each subcommand here calls the same
module a `make` target does, with the rest of the command line passed on (`skillevo apply --help`).
"""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import PackageNotFoundError, version

# name -> (module whose main(argv) runs it, arguments put before the user's, one line of help)
COMMANDS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "init": ("skillevo.ops.init", (), "write the pipeline into a folder of this repository"),
    "setup": ("skillevo.agent.install", (), "install the pinned Claude Code CLI"),
    "check": ("skillevo.ops.check", (), "everything that can be known wrong before any money is spent"),
    "task": ("skillevo.ops.task_add", (), "add a task from a fix commit and the tests it brought"),
    "run": ("skillevo.ops.one_cell", (), "one task on one arm, once, as the bench runs it"),
    "show": ("skillevo.ops.transcript_view", (), "a run's or a side's transcripts, readably"),
    # run in the pipeline's folder: dvc.lock is here, the skills below params skills.root
    "apply": ("skillevo.stages.apply", ("--pipeline", "."), "write the promoted skills, transactionally, for review"),
    "revert": ("skillevo.stages.apply", ("--pipeline", ".", "--revert"), "undo the last apply"),
    "status": ("skillevo.ops.generations", ("status",), "the current generation's decision"),
    "report": ("skillevo.ops.generations", ("report",), "the decision, then every archived generation"),
    "evolve": ("skillevo.ops.generations", ("evolve",), "run generations until one promotes"),
    "cells": ("skillevo.ops.cells", (), "the cell store: ls, push, pull, gc"),
    "gc": ("skillevo.ops.gc", (), "free DVC's cache and the cell store of what can never be served"),
    "modes": ("skillevo.ops.modes", (), "record (--write) or check the family's execute bits"),
}


def _version() -> str:
    try:
        return version("skillevo")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"usage: skillevo COMMAND [ARGS...]   (skillevo {_version()})", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, _, text) in COMMANDS.items()]
    lines += ["", "`skillevo COMMAND --help` for a command's options; `dvc repro` runs a generation."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if args else 2
    if args[0] == "--version":
        print(f"skillevo {_version()}")
        return 0
    if args[0] not in COMMANDS:
        print(f"skillevo: unknown command {args[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module, before, _ = COMMANDS[args[0]]
    return importlib.import_module(module).main([*before, *args[1:]])


if __name__ == "__main__":
    sys.exit(main())
