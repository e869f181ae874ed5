"""Stage `identity`: write each stage's harness identity, the file dvc.yaml makes that stage depend on.

    python -m skillevo.stages.identity --out results/identity

One small JSON file per stage: the skillevo version and a digest of exactly the code the stage runs (its script's
import closure and the data files those modules load: skillevo.bench.harness). DVC runs this stage every time
(`always_changed`) and compares each file by content, so an upgrade of skillevo, or an edit in a checkout,
re-runs the stages whose code changed and nothing else, wherever the package is installed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skillevo.bench import harness
from skillevo.core import documents, layout, safefs, stage


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillevo.stages.identity", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=layout.IDENTITY, help="[%(default)s]")
    return p


def run(args: argparse.Namespace) -> str:
    names = harness.stage_names()
    for name in names:
        safefs.write_atomic(args.out / f"{name}.json", documents.dump_json(harness.stage_identity(name)))
    return f"identity: skillevo {harness.package_version()}, {len(names)} stages: {args.out}"


def main(argv: list[str] | None = None) -> int:
    return stage.main("identity", parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
