"""Stage `apply` (`make apply`, never `dvc repro`): swap the promoted, frozen overlay into the skills and their
mirrors as one transaction, after checking each output it reads against dvc.lock and the promotion against the
evidence as it is now (no stage is re-run). It leaves a diff, never commits; `--revert` (`make revert`) undoes it.
"""

from __future__ import annotations

import argparse
import functools
import sys
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path

from skillevo.apply import ApplyPaths, Fault, apply_promotion, revert
from skillevo.core import layout, stage
from skillevo.core.declared import Declared
from skillevo.files.errors import BadInput

EPILOG = """\
beside --receipt: receipt.json (what was replaced), originals/<sha256> (what --revert restores), and after an
interruption recovery-<UTC>.json: rerun the same command and it restores from it first.
exit status: 0 applied or reverted; 2 refused (nothing changed); 3 failed or interrupted, rolled back;
4 rollback incomplete (rerun the same command); 69 broken environment (say, no atomic swap); 130 interrupted.
"""
OPTIONS = (("--promotion", layout.PROMOTION, "the gate's promotion.json"),
           ("--freeze", layout.FREEZE, "freeze directory (manifest.json and overlay/)"),
           ("--incumbent-bench", layout.BENCH["incumbent"], "incumbent bench side directory"),
           ("--candidate-bench", layout.BENCH["candidate"], "candidate bench side directory"),
           ("--tasks", layout.TASKS_FILE, "tasks file the bench ran (its oracles and targets beside it)"),
           ("--params", layout.PARAMS, "params file"),
           ("--repo", None, "repository root every destination path is relative to [params skills.root]"),
           ("--pipeline", None, "the folder holding dvc.yaml and dvc.lock [--repo]"),
           ("--receipt", layout.APPLY_RECEIPT, "receipt to write (or read with --revert)"))


# the params this stage reads: none tracked, as DVC never runs it (frozen; make apply does)
PARAMS = Declared((), untracked=("skills", "propose", "model", "gate", "tasks"))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillevo.stages.apply", description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, default, text in OPTIONS:
        p.add_argument(flag, type=Path, default=default, help=f"{text}" + ("" if default is None else " [%(default)s]"))
    stage.family_options(p)
    p.add_argument("--revert", action="store_true", help="restore the pre-apply bytes from the receipt")
    p.add_argument("--now", help="ISO-8601 time with offset to validate against (tests) [the clock]")
    return p


def run(args: argparse.Namespace, fault: Fault | None = None) -> str:
    try:
        now = datetime.now(UTC) if args.now is None else datetime.fromisoformat(args.now)
    except ValueError as e:
        raise BadInput(f"--now {args.now!r}: {e}") from None
    if now.utcoffset() is None:
        raise BadInput(f"--now {args.now!r} needs a UTC offset")
    if args.repo is None:
        args.repo = stage.repo_dir(args, stage.load_params("apply", args, PARAMS))
    paths = ApplyPaths(**{f.name: getattr(args, f.name) for f in fields(ApplyPaths)})  # one option per field
    log = functools.partial(print, file=sys.stderr, flush=True)
    if args.revert:
        return revert(paths, now=now, fault=fault, log=log).summary()
    return apply_promotion(paths, now=now, params=lambda: stage.load_params("apply", args, PARAMS), fault=fault,
                           log=log).summary()


def main(argv: list[str] | None = None) -> int:
    name = "revert" if "--revert" in (sys.argv[1:] if argv is None else argv) else "apply"  # how messages begin
    return stage.main(name, parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
