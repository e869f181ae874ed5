"""The skill family's execute bits, recorded in a file DVC can see.

DVC hashes file contents, never modes, so a `chmod +x` on a skill's script would leave every bench stage
"up to date" although every workspace would now run it differently. The bench stages therefore depend on
`skill-modes.json`, the list of the family's executable files, and the bench refuses to run when the family
on disk disagrees with it. This module is the manifest's format and that check; `make modes` rewrites the
manifest (skillevo.ops.modes).
"""

from __future__ import annotations

from pathlib import Path

from skillevo.files import documents
from skillevo.files.errors import BadInput

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
