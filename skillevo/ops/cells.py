"""`make push` / `make pull` / cell store upkeep: list, collect, push and pull the cell store's entries.

The store itself is the bench's (skillevo.bench.cellstore); these are the operator's commands over it. gc drops
entries that can never be served again (damaged, expired, and with --other-harness those measured by another
harness than this checkout's); push and pull share entries through the project's DVC remote
(docs/cell-store.md).

    python -m skillevo.ops.cells ls|gc|push|pull [--store DIR]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from skillevo.bench import cellstore, harness
from skillevo.core import layout, stage
from skillevo.files import digests


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillevo.ops.cells", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["ls", "gc", "push", "pull"])
    p.add_argument("--store", type=Path, default=layout.CELL_STORE, help="[%(default)s]")
    p.add_argument("--params", type=Path, default=layout.PARAMS, help="gate.max_age_days for gc [%(default)s]")
    p.add_argument("--remote", default=None, help="DVC remote name [the default remote]")
    p.add_argument("--repo", type=Path, default=Path("."), help="[%(default)s]")
    p.add_argument("--other-harness", action="store_true",
                   help="gc: also remove entries measured by another harness than this checkout's")
    return p


def _run(args: argparse.Namespace) -> str:
    store = cellstore.Store(args.store, digests.team_key())
    if args.command == "ls":
        return f"{args.store}: {sum(1 for _ in store.keys())} stored cells"
    if args.command == "gc":
        params = stage.load_params("cellstore", argparse.Namespace(params=args.params))
        counts = store.gc(params.gate.max_age_days, harness_digest=harness.digest() if args.other_harness else None)
        return "cells gc: " + ", ".join(f"{n} {what.replace('_', ' ')}" for what, n in counts.items())
    fs, base = cellstore.remote(args.repo, args.remote, args.command)
    unkeyed = "" if store.secret is not None else f" (no {cellstore.KEY_ENV}: entries are shared only under a team key)"
    if args.command == "push":
        sent, held = cellstore.push(store, fs, base)
        return (f"cells push: {sent} entries uploaded to {base}" + (f", {held} held back" if held else "") + unkeyed)
    fetched, dropped = cellstore.pull(store, fs, base)
    return (f"cells pull: {fetched} entries fetched from {base}" + (f", {dropped} dropped" if dropped else "")
            + unkeyed)


def main(argv: Iterable[str] | None = None) -> int:
    return stage.main("cells", _parser(), _run, None if argv is None else list(argv))


if __name__ == "__main__":
    sys.exit(main())
