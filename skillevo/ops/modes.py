"""`make modes`: record the skill family's execute bits in skill-modes.json, or check the record.

The bench refuses a family whose execute bits differ from the record (skillevo.core.modes, which also holds
the record's format), because DVC hashes contents, never modes; this is the operator's way to rewrite it
after a deliberate `chmod`.

    skillevo modes [--skills DIR] [--write]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skillevo.core import layout, stage
from skillevo.core.modes import check, render
from skillevo.files import safefs


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillevo.ops.modes", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    stage.family_options(p, mirrors=False)
    p.add_argument("--params", type=Path, default=layout.PARAMS, help="for skills.frontmatter_keys [%(default)s]")
    p.add_argument("--out", type=Path, default=layout.MODES, help="[%(default)s]")
    p.add_argument("--write", action="store_true", help="rewrite the manifest (default: check it)")
    return p


def run(args: argparse.Namespace) -> str:
    executables: set[str] = set()
    params = stage.load_params("modes", args)
    skills = stage.skills_dir(args, params)
    layout.read_family(skills, params.skills.frontmatter_keys, executables)
    if args.write:
        safefs.write_atomic(args.out, render(executables))
        return f"modes: {args.out} records {len(executables)} executable file(s) of {skills}"
    check(args.out, skills, executables)
    return f"modes: {args.out} matches {skills} ({len(executables)} executable file(s))"


def main(argv: list[str] | None = None) -> int:
    return stage.main("modes", parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
