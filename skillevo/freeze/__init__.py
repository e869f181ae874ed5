"""Freeze: validate the candidate overlay, copy it read-only, and bind it and every apply destination by digest.

The manifest is what the candidate bench, the gate and apply trust: the overlay digest, the candidate arms it
requires, and the committed sha256 of every file an apply would replace (the canonical skill file and its
copy in every mirror), or, for a file the overlay adds, that nothing is there at HEAD or in the working tree
(null): apply creates it only where nothing is. A mirror is a byte copy of the canonical family: one that has
drifted was never measured, so freeze refuses it rather than let apply overwrite it. An overlay that makes,
once normalised, the change the gate already found futile against this incumbent (skillevo.core.memory) is refused:
measuring it again would pay for a verdict we have.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skillevo.core import arms, layout, memory, overlay
from skillevo.core import tasks as tasks_mod
from skillevo.core.config import Params
from skillevo.core.oracle_guard import OracleGuard
from skillevo.files import documents, safefs
from skillevo.files.digests import sha256_bytes
from skillevo.files.errors import BadInput, BrokenEnvironment
from skillevo.files.schemas import validate
from skillevo.freeze.destinations import (
    absent_destinations,
    check_mirrors,
    committed_digests,
    committed_modes,
)

MANIFEST = "manifest.json"
OVERLAY = "overlay"


def proposer_model(session: Path) -> str:
    record = validate(documents.load_json(session, what="proposer session record"), "session-record", session)
    return record["model"]


def _not_rejected(overlay_dir: Path, files: dict[str, bytes], executables: set[str], family: dict[str, bytes],
                  family_executables: set[str], rejected: Path) -> None:
    loaded = memory.load(rejected)
    if loaded is None:
        return
    match = memory.futile_match(family, family_executables, files, executables, loaded[0])
    if match is None:
        return
    changed = [rel for rel in sorted(files) if memory.normalised_diff(family, family_executables, {rel: files[rel]},
                                                                       executables)]
    futile = ", ".join(f"{d['candidate_arm']}: {d['decision']}" for d in match["decisions"])
    raise overlay.OverlayRefused(
        f"overlay file {', '.join(str(overlay_dir / rel) for rel in changed or sorted(files))}: makes the change of "
        f"generation {match['generation']}'s candidate once normalised (docs/formats.md, Rejected candidates), which "
        f"the gate rejected for futility against this same incumbent ({futile}; {rejected}) (rule: no futile "
        "re-proposal)")


def freeze(overlay_dir: Path, *, params: Params, tasks_file: Path, repo: Path, out: Path,
           session: Path | None, rejected: Path | None = None, predicted: float | None = None) -> dict[str, Any]:
    """Validate `overlay_dir`, write `<out>/overlay` (0444/0555) and `<out>/manifest.json`; return the manifest.

    `session` is the proposer's session record (for its model); None for a hand-written candidate. `rejected` is
    the generations' memory (previous/memory/rejected.json); a missing file means none yet. `predicted` is the
    proposal's predicted improvement (skillevo.core.prediction), bound here for the gate to score.
    """
    limits = overlay.Limits.from_params(params)
    executables: set[str] = set()
    files = overlay.read_overlay(overlay_dir, limits, executables)
    family_executables: set[str] = set()
    family = layout.read_family(repo / params.skills.skills, params.skills.frontmatter_keys, family_executables)
    tasks = tasks_mod.load(tasks_file, target_roots=params.tasks.target_roots)
    evolvable = set(params.skills.evolvable)
    checked = overlay.validate(files, family, evolvable, OracleGuard.for_tasks(tasks), limits, params.skills.skills,
                               family_executables, executables)
    if rejected is not None:
        _not_rejected(overlay_dir, files, executables, family, family_executables, rejected)
    arms.check_skills(params.arms, layout.skill_names_in(family), params.source)
    required = arms.required_candidate_arms({layout.skill_of(rel) for rel in files}, params.arms)
    if not required:
        raise BadInput(f"{overlay_dir}: no arm uses the skills this overlay touches (rule: required arms)")
    model = proposer_model(session) if session is not None else None
    def canonical_first(rels: set[str]) -> list[str]:  # a refusal names the canonical file when both are wrong
        return [path for root in params.skills.roots for path in layout.destinations(rels, (root,))]

    replaced, new = set(files) & set(family), set(files) - set(family)
    # a new file goes into a skill every mirror carries as a copy: its SKILL.md is checked like a replaced file
    carried = replaced | {f"{layout.skill_of(rel)}/{layout.SKILL_FILE}" for rel in new}
    committed = committed_digests(repo, canonical_first(carried))
    check_mirrors(sorted(carried), committed, committed_modes(repo, list(committed)), params)
    digests: dict[str, str | None] = {path: committed[path] for path in canonical_first(replaced)}
    digests.update(dict.fromkeys(absent_destinations(repo, canonical_first(new))))
    manifest = {
        "schema_version": 1,
        "overlay_digest": layout.tree_digest(files, executables),
        "files": [{"path": rel, "sha256": sha256_bytes(data), "size": len(data), "executable": rel in executables}
                  for rel, data in sorted(files.items())],
        "required_candidate_arms": [a.name for a in required],
        "destinations": dict(sorted(digests.items())),
        "candidate_origin": "proposer" if session is not None else "hand-written",
        "proposer_model": model,
        "evolvable_skills": sorted(evolvable),
        "changed_lines": checked.changed_lines,
        "frontmatter_changes": checked.frontmatter_changes,
        "script_changes": checked.script_changes,
        **({"prediction_pct": predicted} if predicted is not None else {}),
    }
    _write(out, manifest, files, executables, limits)
    return manifest


def freeze_declined(reason: str, *, params: Params, out: Path, session: Path) -> dict[str, Any]:
    """A no_proposal generation's freeze: an empty frozen overlay and a manifest that says why, so the candidate
    bench measures nothing and the gate records the generation as no_proposal (never a promotion)."""
    manifest = {
        "schema_version": 1, "overlay_digest": layout.tree_digest({}, set()), "files": [],
        "required_candidate_arms": [], "destinations": {}, "candidate_origin": overlay.DECLINED,
        "proposer_model": proposer_model(session), "evolvable_skills": sorted(params.skills.evolvable),
        "changed_lines": 0, "frontmatter_changes": [], "script_changes": [], "no_proposal": reason,
    }
    _write(out, manifest, {}, set(), overlay.Limits.from_params(params))
    return manifest


def _write(out: Path, manifest: dict[str, Any], files: dict[str, bytes], executables: set[str],
           limits: overlay.Limits) -> None:
    validate(manifest, "freeze-manifest", out / MANIFEST)
    if (out.exists() and not out.is_symlink() and out.is_dir()
            and set(p.name for p in out.iterdir()) - {MANIFEST, OVERLAY}):
        raise BadInput(f"{out}: holds more than a previous freeze ({MANIFEST}, {OVERLAY}/); refusing to replace it")
    safefs.remove_tree(out)
    safefs.write_tree(out / OVERLAY, files, file_mode=0o444, dir_mode=0o555, executables=executables)
    frozen_executables: set[str] = set()
    frozen = safefs.read_tree(out / OVERLAY, max_file_bytes=limits.max_file_bytes,
                              max_total_bytes=limits.max_total_bytes, executables=frozen_executables)
    if frozen != files or frozen_executables != executables:
        raise BrokenEnvironment(f"{out / OVERLAY}: the frozen copy differs from the validated overlay")
    safefs.write_atomic(out / MANIFEST, documents.dump_json(manifest))


__all__ = ["MANIFEST", "OVERLAY", "absent_destinations", "committed_digests", "committed_modes", "freeze",
           "freeze_declined", "proposer_model"]
