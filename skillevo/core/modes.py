"""The skill family's execute bits, recorded in a file DVC can see.

DVC hashes file contents, never modes, so a `chmod +x` on a skill's script would leave every bench stage
"up to date" although every workspace would now run it differently. The bench stages therefore depend on
`skill-modes.json`, the list of the family's executable files, and the bench refuses to run when the family
on disk disagrees with it; `make modes` rewrites it.

    python -m skillevo.core.modes --skills skills [--write]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skillevo.core import documents, layout, safefs, stage
from skillevo.core.errors import BadInput

SCHEMA_VERSION = 1


def render(executables: set[str] | frozenset[str]) -> bytes:
    return documents.dump_json({"schema_version": SCHEMA_VERSION, "executable": sorted(executables)})


def recorded(path: Path) -> set[str]:
    doc = documents.load_json(path, what="modes manifest")
    if not (isinstance(doc, dict) and doc.get("schema_version") == SCHEMA_VERSION and set(doc) == {
            "schema_version", "executable"} and isinstance(doc["executable"], list)
            and all(isinstance(p, str) for p in doc["executable"])):
        raise BadInput(f"{path}: must be {{\"schema_version\": 1, \"executable\": [<skill>/<path>, ...]}} "
                       "(rule: modes manifest shape); `make modes` writes it")
    return set(doc["executable"])


def check(path: Path, skills_dir: Path, executables: set[str] | frozenset[str]) -> None:
    """The family's executable files must be exactly the recorded ones."""
    want = recorded(path)
    for rel in sorted(set(executables) ^ want):
        state = "has an execute bit" if rel in executables else "has no execute bit"
        raise BadInput(f"{skills_dir}/{rel}: {state}, unlike {path} says; run `make modes` and commit both "
                       "(rule: modes recorded, since DVC ignores file modes)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillevo.core.modes", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--skills", type=Path, default=Path("skills"), help="the canonical family [%(default)s]")
    p.add_argument("--params", type=Path, default=layout.PARAMS, help="for skills.frontmatter_keys [%(default)s]")
    p.add_argument("--out", type=Path, default=layout.MODES, help="[%(default)s]")
    p.add_argument("--write", action="store_true", help="rewrite the manifest (default: check it)")
    return p


def run(args: argparse.Namespace) -> str:
    executables: set[str] = set()
    layout.read_family(args.skills, stage.load_params("modes", args).skills.frontmatter_keys, executables)
    if args.write:
        safefs.write_atomic(args.out, render(executables))
        return f"modes: {args.out} records {len(executables)} executable file(s) of {args.skills}"
    check(args.out, args.skills, executables)
    return f"modes: {args.out} matches {args.skills} ({len(executables)} executable file(s))"


if __name__ == "__main__":
    sys.exit(stage.main("modes", parser(), run))
