"""Where an apply would write: every destination's committed bytes and mode, or that nothing is there (a file the
overlay adds), and every mirror a byte copy of the canonical family. Read from git's HEAD and the working tree; the
manifest binds what this finds, and apply checks it again."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from skillevo.core import layout
from skillevo.core.config import Params
from skillevo.files import safefs
from skillevo.files.digests import sha256_bytes
from skillevo.files.errors import BadInput, BrokenEnvironment

ABSENT_RULE = "(rule: a new file's destinations are absent at HEAD and in the working tree)"


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-c", "core.fsmonitor=false", "-C", str(repo), *args], capture_output=True)


def committed_modes(repo: Path, paths: list[str]) -> dict[str, str]:
    """Each path's mode as HEAD records it (100644, 100755); the working tree's execute bit must agree."""
    listed = _git(repo, "ls-tree", "-z", "HEAD", "--", *paths)
    if listed.returncode != 0:
        raise BrokenEnvironment(f"git ls-tree failed in {repo}: {listed.stderr.decode(errors='replace').strip()}")
    modes = {}
    for entry in listed.stdout.split(b"\0"):
        if entry:
            meta, _, name = entry.partition(b"\t")
            modes[name.decode()] = meta.split()[0].decode()
    for path in paths:
        live = "100755" if os.lstat(repo / path).st_mode & 0o111 else "100644"
        if modes.get(path) != live:
            raise BadInput(f"{repo / path}: its execute bit differs from HEAD ({modes.get(path)} committed, {live} "
                           "here); commit or restore it first (rule: no drift)")
    return modes


def committed_digests(repo: Path, paths: list[str]) -> dict[str, str]:
    """sha256 of each path's committed bytes at HEAD, which must equal the working tree's."""
    out = {}
    for path in paths:
        shown = _git(repo, "show", f"HEAD:{path}")
        if shown.returncode != 0:
            hint = ("an uncommitted file: commit it or move it aside" if os.path.lexists(repo / path) else
                    "and it does not exist: a mirror without it? sync the mirror and commit")
            raise BadInput(f"{repo / path}: has no committed base at HEAD ({hint}) (rule: apply replaces committed "
                           "files only)")
        live = safefs.read_below(repo, path, max_bytes=layout.MAX_SKILL_FILE_BYTES, what="destination")
        if live != shown.stdout:
            raise BadInput(f"{repo / path}: differs from its committed bytes; commit or restore it first "
                           "(rule: no drift)")
        out[path] = sha256_bytes(shown.stdout)
    return out


def absent_destinations(repo: Path, paths: list[str]) -> list[str]:
    """`paths` (where apply would create the overlay's new files), each with nothing at HEAD and nothing in the
    working tree: an untracked or ignored file, a directory or a symlink there, or a symlink or file in place
    of a directory on the way, would be overwritten or followed by a create, and was never measured."""
    if not paths:
        return paths
    listed = _git(repo, "ls-tree", "-z", "--name-only", "HEAD", "--", *paths)
    if listed.returncode != 0:
        raise BrokenEnvironment(f"git ls-tree failed in {repo}: {listed.stderr.decode(errors='replace').strip()}")
    at_head = {entry.decode() for entry in listed.stdout.split(b"\0") if entry}
    for path in paths:
        if path in at_head:
            raise BadInput(f"{repo / path}: is committed at HEAD, yet the overlay adds it as a new file (it is missing "
                           "from the canonical skill, or a mirror holds a file the canonical skill lacks); commit or "
                           f"restore the skills first {ABSENT_RULE}")
        parts = safefs.plain_parts(path, str(repo / path))
        try:
            fd, found = safefs.open_existing_below(repo, parts[:-1], str(repo))
        except BadInput as e:
            raise BadInput(f"{repo}/{e}; a new file is created only below plain directories {ABSENT_RULE}") from None
        try:
            st = os.lstat(parts[-1], dir_fd=fd) if found == len(parts) - 1 else None
        except FileNotFoundError:
            st = None
        finally:
            os.close(fd)
        if st is None:
            continue
        if stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode):
            kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "a directory"
        elif _git(repo, "check-ignore", "-q", "--", path).returncode == 0:
            kind = "a file git ignores"
        else:
            kind = "a file that is not committed"
        raise BadInput(f"{repo / path}: is {kind}, where the overlay adds a new file; apply never overwrites it: "
                       f"move it aside {ABSENT_RULE}")
    return paths


def check_mirrors(rels: list[str], digests: dict[str, str], modes: dict[str, str], params: Params) -> None:
    for rel in rels:
        canonical = (digests[f"{params.skills.skills}/{rel}"], modes[f"{params.skills.skills}/{rel}"])
        for mirror in params.skills.mirrors:
            if (digests[f"{mirror}/{rel}"], modes[f"{mirror}/{rel}"]) != canonical:
                raise BadInput(f"{mirror}/{rel}: is not a copy of {params.skills.skills}/{rel}, bytes and mode (params "
                               "skills.paths.mirrors are copies apply keeps in step; sync the mirror and commit) "
                               "(rule: mirrors match)")
