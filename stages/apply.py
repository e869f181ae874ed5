"""Stage `apply` (run by `make apply`, never by plain `dvc repro`): promote the frozen overlay onto the skills.

It works on the pipeline outputs that exist (it never re-runs a stage or starts an agent session), refuses
unless the promotion still holds, swaps every destination as one transaction, and leaves a working-tree diff
for review. It never commits or pushes. `--revert` (`make revert`) puts the pre-apply bytes back.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from skillevo.apply import ApplyError, ApplyPaths, Fault, apply_promotion, revert

EPILOG = """\
inputs:
  <promotion>                   promotion.json from the gate (every decision must be `promote`)
  <freeze>/manifest.json        overlay digest, files, destinations with their sha256 at freeze
  <freeze>/overlay/             the frozen overlay files (checked against the manifest before any write)
  <incumbent-bench>/bench.json  current model, effort and task bindings
  <params>                      gate: (policy), model:, skills.dir and skills.mirrors (where destinations live)
outputs (beside <receipt>):
  receipt.json                  files written, before/after sha256, promotion sha256, overlay digest, time
  originals/<sha256>            the bytes every apply or revert replaced (what --revert restores)
  recovery-<UTC>.json           only after an interruption or a failed rollback: a rerun restores from it
  reverted-<UTC>.json           the retired receipt after --revert
exit status: 0 applied or reverted; 2 refused (nothing changed); 3 failed or interrupted and rolled back;
4 rollback incomplete (the message names the recovery record; rerun the same command to restore).
"""

PAUSE_ENV = "SKILLEVO_APPLY_TEST_PAUSE"  # tests only: "<event>:<index>" stops there so a test can kill us


def _test_pause() -> Fault | None:
    spec = os.environ.get(PAUSE_ENV)
    if not spec:
        return None
    event, _, index = spec.partition(":")

    def pause(at: str, i: int, path: str | None) -> None:
        if at == event and str(i) == index:
            print(f"apply: test pause at {at} {i}", file=sys.stderr, flush=True)
            time.sleep(30)

    return pause


def _now(text: str | None) -> datetime:
    if text is None:
        return datetime.now(timezone.utc)
    moment = datetime.fromisoformat(text)
    if moment.utcoffset() is None:
        raise ValueError(f"--now {text!r} needs a UTC offset")
    return moment


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stages.apply",
        description="Apply a promoted, frozen overlay to the canonical skills and their mirrors (or --revert it).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for flag, default, text in (
        ("--promotion", "results/gate/promotion.json", "the gate's promotion.json"),
        ("--freeze", "results/freeze", "freeze directory (manifest.json and overlay/)"),
        ("--incumbent-bench", "results/bench-incumbent", "incumbent bench side directory (bench.json)"),
        ("--params", "params.yaml", "params file"),
        ("--repo", ".", "repository root every destination path is relative to"),
        ("--receipt", "results/apply/receipt.json", "receipt to write (or read with --revert)"),
    ):
        parser.add_argument(flag, type=Path, default=Path(default), help=f"{text} [%(default)s]")
    parser.add_argument("--revert", action="store_true", help="restore the pre-apply bytes from the receipt")
    parser.add_argument("--now", help="ISO-8601 time with offset to validate against (tests) [the clock]")
    args = parser.parse_args(argv)

    try:
        now = _now(args.now)
    except ValueError as e:
        print(f"apply: refused: {e}", file=sys.stderr)
        return 2
    paths = ApplyPaths(args.promotion, args.freeze, args.incumbent_bench, args.params, args.repo, args.receipt)
    action = revert if args.revert else apply_promotion
    try:
        outcome = action(paths, now=now, fault=_test_pause(), log=lambda line: print(line, file=sys.stderr))
    except ApplyError as e:
        label = {2: "refused", 3: "rolled back", 4: "rollback incomplete"}.get(e.exit_code, "failed")
        print(f"apply: {label}: {e}", file=sys.stderr)
        return e.exit_code
    print(outcome.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
