"""Candidate overlays: the rules an untrusted set of replacement skill files must pass.

An overlay is a directory of `<skill>/<path>.md` files, each a complete replacement for the incumbent
file at `<skills>/<skill>/<path>.md`. Everything about it is untrusted (an agent wrote it), so every rule
fails closed with a message naming the file and the rule. The proposer's export (skillevo.propose) and
freeze (skillevo.freeze) both check through here.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillevo import frontmatter, layout, safefs
from skillevo.errors import BadInput
from skillevo.oracle_guard import OracleGuard

PRIVILEGED_FRONTMATTER = "privileged-frontmatter"  # a propose.allow value


@dataclass(frozen=True)
class Limits:
    max_changed_lines: int  # params propose.max_changed_lines; the other limits are fixed rules
    max_files: int = 16
    max_entries: int = 64
    max_path_bytes: int = 256
    max_file_bytes: int = 64 << 10
    max_total_bytes: int = 256 << 10
    allow: frozenset[str] = frozenset()  # params propose.allow
    frontmatter_keys: frozenset[str] = frozenset()  # params skills.frontmatter_keys

    @classmethod
    def from_params(cls, params: Any) -> Limits:
        """The one place params become overlay rules (propose, freeze and apply all check through them)."""
        return cls(max_changed_lines=params.propose.max_changed_lines, allow=frozenset(params.propose.allow),
                   frontmatter_keys=params.skills.frontmatter_keys)


@dataclass(frozen=True)
class Checked:
    changed_lines: int
    frontmatter_changes: list[str]  # every header key the overlay adds, removes or changes (skillevo.frontmatter)


class OverlayRefused(BadInput):
    """The overlay breaks a rule; the message names the file and the rule."""


def _refuse(path: str, rule: str) -> OverlayRefused:
    return OverlayRefused(f"overlay file {path}: {rule}")


def read_overlay(root: Path, limits: Limits) -> dict[str, bytes]:
    """Every file of the overlay as {`<skill>/<path>`: bytes}, refusing anything but plain files and dirs."""
    try:
        for rel in safefs.walk(root, max_entries=limits.max_entries):
            if len(rel.encode()) > limits.max_path_bytes:
                raise _refuse(rel, f"path longer than {limits.max_path_bytes} bytes (rule: path length)")
        files = safefs.read_tree(root, max_file_bytes=limits.max_file_bytes, max_total_bytes=limits.max_total_bytes,
                                 max_files=limits.max_files, what="overlay file")
    except OverlayRefused:
        raise
    except BadInput as e:
        raise OverlayRefused(f"overlay {e}") from None
    if not files:
        raise _refuse(str(root), "the overlay is empty (rule: not empty)")
    return files


def changed_lines(old: bytes, new: bytes) -> int:
    """Lines that differ: a replaced block counts its longer side, an insertion or deletion its length."""
    a, b = old.decode(errors="replace").splitlines(), new.decode(errors="replace").splitlines()
    return sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
               if op != "equal")


def validate(files: Mapping[str, bytes], family: Mapping[str, bytes], evolvable: set[str], guard: OracleGuard,
             limits: Limits, skills_dir: str = "skills") -> Checked:
    """Check every rule that needs the incumbent family and the oracles: the candidate family (the incumbent
    with the overlay on top) must keep every frontmatter rule, and may not touch a privileged key unless
    params allow it."""
    changed = 0
    for rel, data in sorted(files.items()):
        parts = rel.split("/")
        if len(parts) < 2 or not rel.lower().endswith(".md"):
            raise _refuse(rel, "only <skill>/<path>.md files may be replaced (rule: Markdown under a skill)")
        if parts[0] not in evolvable:
            raise _refuse(rel, f"skill {parts[0]!r} is not evolvable (params skills.evolvable: {sorted(evolvable)})")
        if rel not in family:
            raise _refuse(rel, f"has no incumbent {skills_dir}/{rel} to replace (rule: replacements only)")
        try:
            text = safefs.decode(data, rel, "overlay file", allow_nul=False)
        except BadInput as e:
            raise OverlayRefused(f"overlay file {e}") from None
        reason = guard.check_file(rel, data)
        if reason:
            raise _refuse(rel, f"{reason} (rule: no hidden-oracle content in a skill)")
        changed += changed_lines(family[rel], text.encode())
    if changed == 0:
        raise _refuse("*", "every file is byte-identical to the incumbent (rule: a change is required)")
    if changed > limits.max_changed_lines:
        raise _refuse("*", f"{changed} changed lines, over the edit budget of {limits.max_changed_lines} "
                           "(rule: propose.max_changed_lines)")
    before = frontmatter.check_family(family, skills_dir, layout.SKILL_FILE, limits.frontmatter_keys)
    touched = {layout.skill_of(rel) for rel in files}
    try:
        after = frontmatter.check_family({**family, **files}, "overlay", layout.SKILL_FILE, limits.frontmatter_keys)
        frontmatter.check_privileged(before, {k: v for k, v in after.items() if k in touched}, "overlay",
                                     PRIVILEGED_FRONTMATTER in limits.allow)
    except BadInput as e:
        raise OverlayRefused(str(e)) from None
    return Checked(changed, frontmatter.changes(before, after))
