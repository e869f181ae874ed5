"""Freeze: validate the candidate overlay, copy it read-only, and bind it and every apply destination by digest.

The manifest is what the candidate bench, the gate and apply trust: the overlay digest, the candidate arms it
requires, and the committed sha256 of every file an apply would replace (the canonical skill file and its
copy in every mirror). A mirror is a byte copy of the canonical family: one that has drifted was never
measured, so freeze refuses it rather than let apply overwrite it. An overlay that makes, once normalised, the
change the gate already found futile against this incumbent (skillevo.memory) is refused: measuring it again
would pay for a verdict we have.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from skillevo import arms, documents, layout, memory, overlay, safefs
from skillevo import tasks as tasks_mod
from skillevo.config import Params
from skillevo.digests import sha256_bytes
from skillevo.errors import BadInput, BrokenEnvironment
from skillevo.oracle_guard import OracleGuard
from skillevo.schemas import validate

MANIFEST = "manifest.json"
OVERLAY = "overlay"


def committed_modes(repo: Path, paths: list[str]) -> dict[str, str]:
    """Each path's mode as HEAD records it (100644, 100755); the working tree's execute bit must agree."""
    listed = subprocess.run(["git", "-c", "core.fsmonitor=false", "-C", str(repo), "ls-tree", "-z", "HEAD", "--", *paths],
                            capture_output=True)
    if listed.returncode != 0:
        raise BrokenEnvironment(f"git ls-tree failed in {repo}: {listed.stderr.decode(errors='replace').strip()}")
    modes = {}
    for entry in listed.stdout.split(b"\0"):
        if entry:
            meta, _, path = entry.partition(b"\t")
            modes[path.decode()] = meta.split()[0].decode()
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
        shown = subprocess.run(["git", "-c", "core.fsmonitor=false", "-C", str(repo), "show", f"HEAD:{path}"],
                               capture_output=True)
        if shown.returncode != 0:
            raise BadInput(f"{repo / path}: has no committed base at HEAD (rule: apply replaces committed files only)")
        live = safefs.read_below(repo, path, max_bytes=layout.MAX_SKILL_FILE_BYTES, what="destination")
        if live != shown.stdout:
            raise BadInput(f"{repo / path}: differs from its committed bytes; commit or restore it first "
                           "(rule: no drift)")
        out[path] = sha256_bytes(shown.stdout)
    return out


def _check_mirrors(files: dict[str, bytes], digests: dict[str, str], modes: dict[str, str], params: Params) -> None:
    for rel in sorted(files):
        canonical = (digests[f"{params.skills.skills}/{rel}"], modes[f"{params.skills.skills}/{rel}"])
        for mirror in params.skills.mirrors:
            if (digests[f"{mirror}/{rel}"], modes[f"{mirror}/{rel}"]) != canonical:
                raise BadInput(f"{mirror}/{rel}: is not a copy of {params.skills.skills}/{rel}, bytes and mode (params "
                               "skills.paths.mirrors are copies apply keeps in step; sync the mirror and commit) "
                               "(rule: mirrors match)")


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
           session: Path | None, rejected: Path | None = None) -> dict[str, Any]:
    """Validate `overlay_dir`, write `<out>/overlay` (0444/0555) and `<out>/manifest.json`; return the manifest.

    `session` is the proposer's session record (for its model); None for a hand-written candidate. `rejected` is
    the generations' memory (previous/memory/rejected.json); a missing file means none yet.
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
    for rel in sorted(set(files) - set(family)):
        raise BadInput(f"{overlay_dir / rel}: a new file; apply can only replace committed files, so freeze cannot "
                       "bind it yet (rule: replacements only at freeze)")
    destinations = layout.destinations(set(files), params.skills.roots)
    digests = committed_digests(repo, destinations)
    _check_mirrors(files, digests, committed_modes(repo, destinations), params)
    manifest = {
        "schema_version": 1,
        "overlay_digest": layout.tree_digest(files, executables),
        "files": [{"path": rel, "sha256": sha256_bytes(data), "size": len(data), "executable": rel in executables}
                  for rel, data in sorted(files.items())],
        "required_candidate_arms": [a.name for a in required],
        "destinations": digests,
        "candidate_origin": "proposer" if session is not None else "hand-written",
        "proposer_model": model,
        "evolvable_skills": sorted(evolvable),
        "changed_lines": checked.changed_lines,
        "frontmatter_changes": checked.frontmatter_changes,
        "script_changes": checked.script_changes,
    }
    validate(manifest, "freeze-manifest", out / MANIFEST)
    if out.exists() and not out.is_symlink() and out.is_dir() and set(p.name for p in out.iterdir()) - {MANIFEST, OVERLAY}:
        raise BadInput(f"{out}: holds more than a previous freeze ({MANIFEST}, {OVERLAY}/); refusing to replace it")
    safefs.remove_tree(out)
    safefs.write_tree(out / OVERLAY, files, file_mode=0o444, dir_mode=0o555, executables=executables)
    frozen_executables: set[str] = set()
    frozen = safefs.read_tree(out / OVERLAY, max_file_bytes=limits.max_file_bytes, max_total_bytes=limits.max_total_bytes,
                              executables=frozen_executables)
    if frozen != files or frozen_executables != executables:
        raise BrokenEnvironment(f"{out / OVERLAY}: the frozen copy differs from the validated overlay")
    safefs.write_atomic(out / MANIFEST, documents.dump_json(manifest))
    return manifest
