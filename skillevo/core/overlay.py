"""Candidate overlays: the rules an untrusted set of replacement skill files must pass.

An overlay is a directory of `<skill>/<path>.md` files, each a complete replacement for the incumbent
file at `<skills>/<skill>/<path>.md`. Everything about it is untrusted (an agent wrote it), so every rule
fails closed with a message naming the file and the rule. The proposer's export (skillevo.propose) and
freeze (skillevo.freeze) both check through here.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillevo.core import frontmatter, layout, markdown
from skillevo.core.oracle_guard import OracleGuard
from skillevo.files import safefs
from skillevo.files.errors import BadInput

PRIVILEGED_FRONTMATTER = "privileged-frontmatter"  # a propose.allow value
# A proposer that finds nothing in the evidence to change writes only proposal.md, headed so, and no overlay: the
# generation is then a cheap, reported no_proposal (skillevo.propose.declined), never a change that cites no run.
NO_PROPOSAL = "# No proposal"
DECLINED = "declined"  # the candidate_origin of such a generation's freeze manifest and promotion


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


SUPPORTING_FILES = "supporting-files"  # a propose.allow value: new files inside an evolvable skill, non-Markdown edits
SCRIPTS = "scripts"  # a propose.allow value: changes to files with an execute bit, or to the bit itself


@dataclass(frozen=True)
class Checked:
    changed_lines: int
    frontmatter_changes: list[str]  # every header key the overlay adds, removes or changes (skillevo.core.frontmatter)
    script_changes: list[str] = field(default_factory=list)  # every script the overlay adds, edits or (un)marks


def _scope(rel: str, family: Mapping[str, bytes], executables: Collection[str], overlay_executables: Collection[str],
           limits: Limits, skills_dir: str) -> str | None:
    """What kind of change `rel` is, refused unless params propose.allow permits it; returns a script note."""
    was, now = rel in executables, rel in overlay_executables
    if rel not in family:
        if SUPPORTING_FILES not in limits.allow:
            raise _refuse(rel, f"has no incumbent {skills_dir}/{rel} to replace (rule: replacements only; params "
                               f"propose.allow: {SUPPORTING_FILES} lets an overlay add files "
                               "inside an evolvable skill)")
    elif not rel.lower().endswith(".md") and not (was or now) and SUPPORTING_FILES not in limits.allow:
        raise _refuse(rel, f"only <skill>/<path>.md files may be replaced (rule: Markdown under a skill; params "
                           f"propose.allow: {SUPPORTING_FILES} permits other supporting files)")
    if not (was or now):
        return None
    if SCRIPTS not in limits.allow:
        raise _refuse(rel, f"is a script (it has an execute bit {'in the incumbent' if was else 'here'}); scripts "
                           f"may change only when params propose.allow lists {SCRIPTS} (rule: scripts)")
    if rel not in family:
        return f"{rel}: new script"
    if was != now:
        return f"{rel}: execute bit {'added' if now else 'removed'}"
    return f"{rel}: script edited"


class OverlayRefused(BadInput):
    """The overlay breaks a rule; the message names the file and the rule."""


def _refuse(path: str, rule: str) -> OverlayRefused:
    return OverlayRefused(f"overlay file {path}: {rule}")


def read_overlay(root: Path, limits: Limits, executables: set[str] | None = None) -> dict[str, bytes]:
    """Every file of the overlay as {`<skill>/<path>`: bytes}, refusing anything but plain files and dirs; the
    paths with an execute bit are added to `executables`."""
    try:
        for rel in safefs.walk(root, max_entries=limits.max_entries):
            if len(rel.encode()) > limits.max_path_bytes:
                raise _refuse(rel, f"path longer than {limits.max_path_bytes} bytes (rule: path length)")
        files = safefs.read_tree(root, max_file_bytes=limits.max_file_bytes, max_total_bytes=limits.max_total_bytes,
                                 max_files=limits.max_files, what="overlay file", executables=executables)
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
    return sum(max(i2 - i1, j2 - j1)
               for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
               if op != "equal")


def validate(files: Mapping[str, bytes], family: Mapping[str, bytes], evolvable: set[str], guard: OracleGuard,
             limits: Limits, skills_dir: str = "skills", executables: Collection[str] = (),
             overlay_executables: Collection[str] = ()) -> Checked:
    """Check every rule that needs the incumbent family and the oracles. Scope: Markdown replacements always;
    new files, other supporting files and scripts only as params propose.allow says (each counted in the edit
    budget, a changed execute bit as one line). The candidate family (the incumbent with the overlay on top)
    must keep every frontmatter rule, and may not touch a privileged key unless params allow it."""
    changed, scripts = 0, []
    skills = set(layout.skill_names_in(family))
    for rel, data in sorted(files.items()):
        parts = rel.split("/")
        if len(parts) < 2:
            raise _refuse(rel, "files belong in a skill directory, <skill>/<path> (rule: files under a skill)")
        if parts[0] not in evolvable:
            raise _refuse(rel, f"skill {parts[0]!r} is not evolvable (params skills.evolvable: {sorted(evolvable)}) "
                                  "(rule: evolvable skills)")
        if parts[0] not in skills:
            raise _refuse(rel, f"skill {parts[0]!r} does not exist in {skills_dir} (rule: no new skills)")
        note = _scope(rel, family, executables, overlay_executables, limits, skills_dir)
        if note:
            scripts.append(note)
        try:
            text = safefs.decode(data, rel, "overlay file", allow_nul=False)
        except BadInput as e:
            raise OverlayRefused(f"overlay file {e}") from None
        reason = guard.check_file(rel, data)
        if reason:
            raise _refuse(rel, f"{reason} (rule: no hidden-oracle content in a skill)")
        broken = markdown.new_problems(family.get(rel, b"").decode(errors="replace"), text) \
            if rel.endswith(".md") else []
        if broken:
            what, line = broken[0]
            raise _refuse(rel, f"the edit leaves an {what}: {line[:120]!r} (skillevo/core/markdown.py says which "
                               "structure an edit must keep) (rule: Markdown structure kept)")
        changed += changed_lines(family.get(rel, b""), text.encode())
        changed += rel in family and (rel in executables) != (rel in overlay_executables)
    if changed == 0:
        raise _refuse("*", "every file is identical to the incumbent, bytes and mode (rule: a change is required)")
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
    return Checked(changed, frontmatter.changes(before, after), scripts)
