"""Comparator arms: an incumbent-side arm that installs a pinned external skill set instead of the family, so the
bench report measures the family against it as it does against the no-skill baseline.

The set is a directory of a git repository at a commit (params arms.<arm>.comparator: source, commit, path), read
with `git archive` (the one way a git tree leaves its repository here, as for task targets): plain files only, its
digest in every cell key of the arm. A comparator is never evolved (no candidate arm pairs it), never in the
proposer's evidence and never applied.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from skillevo.core import frontmatter, layout
from skillevo.core.errors import BadInput, BrokenEnvironment

MAX_BYTES = 4 << 20  # the whole set, as for an overlay


@dataclass(frozen=True)
class Comparator:
    source: str  # a git repository: absolute, or relative to the folder params.yaml is in
    commit: str  # 40 hex digits
    path: str  # the directory in it that holds the set (<skill>/SKILL.md ...); "." for its root
    digest: str | None = None  # of the files read (layout.tree_digest), once read

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "commit": self.commit, "path": self.path, "digest": self.digest}


@dataclass(frozen=True)
class SkillSet:
    files: dict[str, bytes]  # `<skill>/<path>` -> bytes, as layout.read_family gives a family
    executables: frozenset[str]
    digest: str


def read(comparator: Comparator, base: Path, frontmatter_keys: frozenset[str] = frozenset(),
         where: str = "params.yaml") -> SkillSet:
    """The comparator's files at its commit (BadInput naming the arm's params and the rule)."""
    repo = Path(comparator.source) if Path(comparator.source).is_absolute() else base / comparator.source
    prefix = PurePosixPath(comparator.path)
    spec = [] if str(prefix) == "." else ["--", str(prefix)]
    try:
        out = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", comparator.commit, *spec],
                             capture_output=True, timeout=120, check=False)
    except FileNotFoundError:
        raise BrokenEnvironment("git is not installed (comparator arms read their skill set with it)") from None
    if out.returncode != 0:
        raise BadInput(f"{where}: comparator {repo} at {comparator.commit}, path {comparator.path}: "
                       f"{out.stderr.decode(errors='replace').strip()[-300:]} (rule: a comparator is a commit's tree)")
    files: dict[str, bytes] = {}
    executables: set[str] = set()
    total = 0
    with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
        for member in tar:
            if member.isdir() or member.name == "pax_global_header":
                continue
            rel = PurePosixPath(member.name)
            rel = rel if str(prefix) == "." else rel.relative_to(prefix)
            if not member.isfile():
                raise BadInput(f"{where}: comparator {comparator.source}: {member.name} is not a plain file "
                               "(rule: a skill set is plain files)")
            total += member.size
            if total > MAX_BYTES:
                raise BadInput(f"{where}: comparator {comparator.source}: over {MAX_BYTES} bytes (rule: size)")
            data = tar.extractfile(member).read()  # type: ignore[union-attr]
            files[str(rel)] = data
            if member.mode & 0o111:
                executables.add(str(rel))
    if not layout.skill_names_in(files):
        raise BadInput(f"{where}: comparator {comparator.source} at {comparator.commit}, path {comparator.path}: "
                       f"no <skill>/{layout.SKILL_FILE} (rule: a comparator is a skill set)")
    frontmatter.check_family(files, f"{comparator.source}@{comparator.commit[:12]}", layout.SKILL_FILE,
                             frontmatter_keys)
    return SkillSet(files, frozenset(executables), layout.tree_digest(files, executables))
