"""What an apply or a revert works from, each input checked against the evidence as the pipeline holds it now.

The files apply rewrites are a team's shared skills, so it trusts nothing but the evidence, anchored in
dvc.lock: every output it reads must hold what DVC recorded (skillevo.apply.anchor); both bench sides are read
back through the one reader, rows checked against their transcripts; the promotion is re-validated against the
freeze manifest, the incumbent bench.json and params, its task bindings against tasks/ now, and it must be
exactly what the gate's code makes of the evidence (skillevo.apply.evidence); the frozen overlay must still
match its manifest, and the destinations must be exactly the ones params' skill directories imply. A revert
trusts only a receipt that matches its schema and intact stored originals.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from skillevo.apply import anchor, evidence, fs
from skillevo.apply.common import RECEIPT_SCHEMA, RERUN, ApplyPaths, ApplyRefused
from skillevo.core import frontmatter, layout, models, overlay
from skillevo.core.config import Params
from skillevo.core.results import load_side
from skillevo.files import documents, safefs
from skillevo.files.digests import sha256_bytes
from skillevo.files.errors import BadInput
from skillevo.files.schemas import InvalidDocument, validate
from skillevo.gate.promotion import (
    PromotionRefused,
    load_freeze,
    pipeline_bindings,
    validate_for_apply,
)


@dataclass(frozen=True)
class Inputs:
    promotion_sha256: str
    overlay_digest: str
    destinations: dict[str, str | None]  # repo-relative path -> sha256 at freeze; None: absent then, apply creates it
    new: dict[str, bytes]  # repo-relative path -> the frozen overlay bytes it receives
    described: list[str]
    executables: frozenset[str] = frozenset()  # the destinations that receive an execute bit


def _require(path: Path, what: str) -> None:
    if not os.path.lexists(path):
        raise ApplyRefused(f"{path}: missing ({what}); apply never re-runs earlier stages: {RERUN} "
                           "(rule: inputs exist)")


def load_inputs(paths: ApplyPaths, now: datetime, load_params: Callable[[], Params]) -> Inputs:
    """Everything apply needs, each checked against the evidence as the pipeline holds it now."""
    manifest_path = paths.freeze / "manifest.json"
    bench_path = paths.incumbent_bench / "bench.json"
    _require(paths.promotion, "the gate's promotion.json")
    _require(manifest_path, "the freeze manifest")
    _require(bench_path, "the incumbent bench provenance")
    _require(paths.candidate_bench / "bench.json", "the candidate bench provenance")
    anchor.check(paths.pipeline or paths.repo,
                 [paths.promotion, paths.freeze, paths.incumbent_bench, paths.candidate_bench])

    promotion_bytes = safefs.read_file(paths.promotion, max_bytes=documents.MAX_JSON_BYTES, what="promotion")
    promotion = documents.parse_json(promotion_bytes, str(paths.promotion))
    manifest = load_freeze(manifest_path)
    incumbent = load_side(paths.incumbent_bench, "incumbent")
    candidate = load_side(paths.candidate_bench, "candidate")
    bench = incumbent.bench
    params = load_params()

    if isinstance(promotion, dict) and promotion.get("overlay_digest", manifest["overlay_digest"]) != manifest[
            "overlay_digest"]:
        raise ApplyRefused(
            f"{manifest_path}: overlay_digest {manifest['overlay_digest'][:12]} is not the overlay "
            f"{paths.promotion} was decided on ({str(promotion['overlay_digest'])[:12]}): the promotion is stale; "
            f"{RERUN} (rule: promotion matches freeze)"
        )
    model_now = models.binding(params.model)
    if (model_now, params.model.effort) != (bench["model"], bench["effort"]):
        raise ApplyRefused(
            f"{bench_path}: was benchmarked with model {bench['model']['name']!r} (effort {bench['effort']!r}) but "
            f"{params.source} now says {model_now['name']!r} (effort {params.model.effort!r}): the bench is stale; "
            f"{RERUN} (rule: bench matches params)"
        )
    try:
        validate_for_apply(promotion, pipeline_bindings(manifest, candidate.bench, params.gate), now)
    except PromotionRefused as e:
        raise ApplyRefused(f"{paths.promotion}: {e}") from None
    evidence.check_task_bindings(promotion, paths.promotion, paths.tasks, params.tasks.target_roots)
    evidence.check_rebuilt(promotion, paths.promotion, incumbent, candidate, manifest, params.gate)

    limits = overlay.Limits.from_params(params)
    executables: set[str] = set()
    files = verified_overlay(paths.freeze / "overlay", manifest, limits, executables)
    check_headers(params, paths, manifest, files)
    destinations = dict(manifest["destinations"])
    new = destination_bytes(params, manifest_path, destinations, files)
    new_executables = frozenset(layout.destinations(executables, params.skills.roots))
    return Inputs(
        sha256_bytes(promotion_bytes), manifest["overlay_digest"], destinations, new,
        [f"apply: using {paths.promotion} (generated {promotion['generated_at']}, promotion "
         f"{sha256_bytes(promotion_bytes)[:12]}), frozen overlay {manifest['overlay_digest'][:12]} in {paths.freeze}, "
         f"{paths.incumbent_bench} and {paths.candidate_bench}, each as dvc.lock records it, and {paths.tasks}; "
         "the promotion follows from that evidence; no stage was re-run"],
        new_executables,
    )


def check_headers(params: Params, paths: ApplyPaths, manifest: Mapping[str, Any], files: Mapping[str, bytes]) -> None:
    """The frontmatter rules again, on what apply would write: every replaced SKILL.md keeps the specification, and
    no privileged key differs from the incumbent's unless params allow it. A destination that changed since
    freeze is left to the drift check, which refuses it with its own message."""
    keys, before, after = params.skills.frontmatter_keys, {}, {}
    for rel in sorted(r for r in files if r.count("/") == 1 and r.endswith("/" + layout.SKILL_FILE)):
        skill, dest = layout.skill_of(rel), f"{params.skills.skills}/{rel}"
        try:
            after[skill] = frontmatter.check(skill, files[rel], str(paths.freeze / "overlay" / rel), keys)
        except BadInput as e:
            raise ApplyRefused(str(e)) from None
        try:
            live = safefs.read_below(paths.repo, dest, max_bytes=layout.MAX_SKILL_FILE_BYTES, what="skill file")
        except (BadInput, OSError):
            continue  # missing or unreadable: the destination checks refuse it
        if sha256_bytes(live) == manifest["destinations"].get(dest):
            before[skill] = frontmatter.check(skill, live, dest, keys)
    try:
        frontmatter.check_privileged(before, {k: v for k, v in after.items() if k in before}, str(paths.freeze /
                                     "overlay"), overlay.PRIVILEGED_FRONTMATTER in params.propose.allow)
    except BadInput as e:
        raise ApplyRefused(str(e)) from None


def verified_overlay(overlay_dir: Path, manifest: Mapping[str, Any], limits: overlay.Limits,
                     executables: set[str] | None = None) -> dict[str, bytes]:
    """The frozen overlay's files, each matching the manifest (bytes and execute bit), the set matching its
    digest; the executable paths are added to `executables`."""
    executables = set() if executables is None else executables
    files = safefs.read_tree(overlay_dir, max_file_bytes=limits.max_file_bytes, max_total_bytes=limits.max_total_bytes,
                             max_files=limits.max_files, what="frozen overlay file", executables=executables)
    listed = {f["path"]: f for f in manifest["files"]}
    stale = "the frozen overlay no longer matches its manifest; " + RERUN
    for rel in sorted(set(files) | set(listed)):
        if rel not in listed:
            raise ApplyRefused(f"{overlay_dir / rel}: not listed in manifest.json; {stale}")
        if rel not in files:
            raise ApplyRefused(f"{overlay_dir / rel}: listed in manifest.json but missing; {stale}")
        if sha256_bytes(files[rel]) != listed[rel]["sha256"] or len(files[rel]) != listed[rel]["size"]:
            raise ApplyRefused(f"{overlay_dir / rel}: sha256 {sha256_bytes(files[rel])[:12]} is not the manifest's "
                               f"{listed[rel]['sha256'][:12]}; {stale}")
        if (rel in executables) != listed[rel]["executable"]:
            raise ApplyRefused(f"{overlay_dir / rel}: its execute bit is not the manifest's; {stale}")
    digest = layout.tree_digest(files, executables)
    if digest != manifest["overlay_digest"]:
        raise ApplyRefused(f"{overlay_dir}: digest {digest[:12]} is not the manifest's overlay_digest "
                           f"{manifest['overlay_digest'][:12]}; {stale}")
    return files


def destination_bytes(params: Params, manifest_path: Path, destinations: Mapping[str, str],
                      files: Mapping[str, bytes]) -> dict[str, bytes]:
    """Each destination's new bytes; the manifest's set must be exactly what params' skill directories imply."""
    implied = {dest: data for rel, data in files.items() for dest in layout.destinations([rel], params.skills.roots)}
    where = f"{params.source} skills.paths (skills, mirrors)"
    for rel in sorted(implied):
        if rel not in destinations:
            raise ApplyRefused(f"{manifest_path}: destinations lack {rel}, which {where} implies (a missing mirror): "
                               f"the freeze is stale; {RERUN}")
    for rel in sorted(destinations):
        if rel not in implied:
            raise ApplyRefused(f"{manifest_path}: destination {rel} is not implied by {where} and the overlay files")
    return implied


def load_receipt(paths: ApplyPaths) -> dict[str, Any]:
    """The receipt of the apply to revert, as apply wrote it."""
    if not paths.receipt.exists():
        raise ApplyRefused(f"no receipt at {paths.receipt}: there is no apply to revert (apply writes one when "
                           "it succeeds; a reverted apply's receipt is renamed reverted-*.json)")
    receipt = documents.load_json(paths.receipt, what="apply receipt")
    try:
        return validate(receipt, RECEIPT_SCHEMA, paths.receipt)
    except InvalidDocument as e:
        raise ApplyRefused(f"{e} (not a receipt apply wrote)") from None


def stored_originals(paths: ApplyPaths, receipt: Mapping[str, Any]) -> dict[str, bytes]:
    """The pre-apply bytes of every file the receipt names as replaced, from the originals store, each intact (a
    file apply created has none)."""
    before = {}
    for f in receipt["files"]:
        if f["before_sha256"] is None:
            continue
        copy = paths.originals / f["before_sha256"]
        try:
            data: bytes | None = fs.read(None, copy, str(copy), "stored original")
        except (OSError, BadInput):
            data = None
        if data is None or sha256_bytes(data) != f["before_sha256"]:
            raise ApplyRefused(f"{copy}: the pre-apply bytes of {f['path']} are missing or damaged; restore it "
                               f"from git instead (git checkout -- {f['path']})")
        before[f["path"]] = data
    return before
