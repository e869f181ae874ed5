"""Comparator arms: an incumbent-side arm that installs a pinned external skill set instead of the family, so the
bench report measures the family against it as it does against the no-skill baseline.

The set is a directory of a git repository at a commit (params arms.<arm>.comparator: source, commit, path), read
blob by blob from git's object database (`git ls-tree` for the sizes, all checked before any blob is read, then
`git cat-file`): no filter, hook or attribute of the third party's repository ever runs, and a huge blob costs
nothing to refuse. Plain files only; its digest in every cell key of the arm. A comparator is never evolved (no
candidate arm pairs it), never in the proposer's evidence and never applied.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillevo.core import frontmatter, layout
from skillevo.files import safefs
from skillevo.files.errors import BadInput, BrokenEnvironment

MAX_BYTES = 4 << 20  # the whole set, as for an overlay
MAX_FILES = 1000
PLAIN_MODES = {"100644": False, "100755": True}  # git's modes of a plain file: executable or not


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
    what = f"{where}: comparator {comparator.source} at {comparator.commit}, path {comparator.path}"
    if comparator.path != ".":
        try:
            safefs.plain_parts(comparator.path, what)
        except BadInput as e:
            raise BadInput(f"{e}; it names a directory of the repository, relative to its root, or '.' "
                           "(rule: a comparator path is a plain relative directory)") from None
    tree = comparator.commit if comparator.path == "." else f"{comparator.commit}:{comparator.path}"
    listed = _git(repo, ["ls-tree", "-r", "-l", "-z", tree], what).split(b"\0")
    entries: list[tuple[str, str, int, bool]] = []  # (path, blob id, size, executable)
    total = 0
    for line in filter(None, listed):
        head, _, name = line.partition(b"\t")
        mode, kind, oid, size = head.decode().split()
        rel = name.decode(errors="replace")
        if kind != "blob" or mode not in PLAIN_MODES:
            raise BadInput(f"{what}: {rel} is not a plain file (rule: a skill set is plain files)")
        total += int(size)
        if total > MAX_BYTES or len(entries) >= MAX_FILES:
            raise BadInput(f"{what}: over {MAX_BYTES} bytes or {MAX_FILES} files (rule: size)")
        entries.append((rel, oid, int(size), PLAIN_MODES[mode]))
    blobs = _blobs(repo, [oid for _, oid, _, _ in entries], what)
    files = {rel: blobs[oid] for rel, oid, _, _ in entries}
    executables = {rel for rel, _, _, executable in entries if executable}
    if not layout.skill_names_in(files):
        raise BadInput(f"{what}: no <skill>/{layout.SKILL_FILE} (rule: a comparator is a skill set)")
    frontmatter.check_family(files, f"{comparator.source}@{comparator.commit[:12]}", layout.SKILL_FILE,
                             frontmatter_keys)
    return SkillSet(files, frozenset(executables), layout.tree_digest(files, executables))


def _git(repo: Path, args: list[str], what: str, stdin: bytes = b"") -> bytes:
    """git's plumbing on the third party's object database, with nothing of its configuration that could run a
    command (ls-tree and cat-file apply no filter or attribute; the options below close the rest)."""
    argv = ["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.attributesFile=",
            "-C", str(repo), *args]
    try:
        out = subprocess.run(argv, input=stdin, capture_output=True, timeout=120, check=False)
    except FileNotFoundError:
        raise BrokenEnvironment("git is not installed (comparator arms read their skill set with it)") from None
    if out.returncode != 0:
        raise BadInput(f"{what}: {out.stderr.decode(errors='replace').strip()[-300:]} "
                       "(rule: a comparator is a commit's tree)")
    return out.stdout


def _blobs(repo: Path, oids: list[str], what: str) -> dict[str, bytes]:
    """Each blob's bytes, read in one `git cat-file --batch` (sizes were checked from the tree before)."""
    out = _git(repo, ["cat-file", "--batch"], what, "".join(f"{oid}\n" for oid in oids).encode())
    blobs, at = {}, 0
    for oid in oids:
        end = out.index(b"\n", at)
        found, kind, size = out[at:end].decode().split()
        if found != oid or kind != "blob":
            raise BadInput(f"{what}: object {oid} is not a blob (rule: a skill set is plain files)")
        blobs[oid] = out[end + 1:end + 1 + int(size)]
        at = end + 1 + int(size) + 1
    return blobs
