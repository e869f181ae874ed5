"""The evidence bundle: what the proposer may read about the previous generation.

From the previous generation's bench outputs (both sides; the incumbent side may instead be this
generation's, as dvc.yaml passes it), its gate decision and its proposal, and every candidate rejected before
against this incumbent (the generations' memory, skillevo.core.memory), or from a seed results
directory, or from nothing (cold start), build a small directory the proposer session gets read-only:

    manifest.json        every file with its sha256; inputs, limits, counts, and everything left out
    rows.json            compacted results rows in priority order, each naming its files below
    transcripts/row<i>-<j>.jsonl   the row's session transcripts (the last max_transcripts_per_row)
    patches/row<i>.diff  the row's patch
    learnings.json       the last max_learnings one-line learnings about evolvable skills
    gate-summary.json    one line per prior gate decision
    prior-proposal.md    the previous generation's proposal
    rejected.json        every rejected candidate of this incumbent, newest first: generation, diff, verdict per arm

inputs.py reads, bundle.py selects and guards (its docstring has the rules), compact.py cuts; this module
writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skillevo.core import tasks as tasks_mod
from skillevo.core.config import Params
from skillevo.core.memory import REJECTED_FILE
from skillevo.core.oracle_guard import OracleGuard
from skillevo.core.redact import env_secrets
from skillevo.evidence.bundle import (
    MANIFEST,
    Bundle,
    build_bundle,
    gate_summary,
    order_rows,
)
from skillevo.evidence.inputs import (
    EvidenceError,
    Inputs,
    SourceRow,
    load_learnings,
    load_previous,
    load_seed,
)
from skillevo.files import safefs

BUNDLE_ENTRIES = frozenset({MANIFEST, "rows.json", "learnings.json", "gate-summary.json", "prior-proposal.md",
                            REJECTED_FILE, "transcripts", "patches"})

__all__ = ["Bundle", "EvidenceError", "Inputs", "SourceRow", "build_bundle", "gate_summary", "load_learnings",
           "load_previous", "load_seed", "make_bundle", "order_rows", "write_bundle"]


def write_bundle(bundle: Bundle, out: str | Path) -> Path:
    """Write the bundle fresh at `out` (files 0644, directories 0755), all or nothing.

    An existing `out` is replaced only if it is empty or holds nothing but a previous bundle (a
    manifest.json and bundle files); anything else is refused, so a mistyped --out never deletes work.
    """
    out = Path(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise EvidenceError(f"{out}: --out must be a directory (not a symlink or file)")
    if out.exists():
        names = {p.name for p in out.iterdir()}
        if names and (MANIFEST not in names or names - BUNDLE_ENTRIES):
            raise EvidenceError(f"{out}: not empty and not a previous evidence bundle "
                                f"(found: {', '.join(sorted(names)[:8])}); refusing to replace it")
        safefs.remove_tree(out)
    safefs.write_tree(out, {**bundle.files, MANIFEST: bundle.manifest_bytes}, dirs=("transcripts", "patches"))
    return out


def make_bundle(*, params: Params, previous: str | Path | None, seed: str | Path | None = None,
                incumbent: str | Path | None = None, learnings: str | Path | None = None,
                tasks: str | Path = "tasks/tasks.yaml", environ: Mapping[str, str] | None = None) -> Bundle:
    """Everything the stage does short of writing: read tasks (for the oracle guard), inputs and learnings."""
    skills = tuple(sorted(params.skills.evolvable))
    loaded = tasks_mod.load(tasks, target_roots=params.tasks.target_roots)
    guard = OracleGuard.for_tasks(loaded)
    split = tasks_mod.split(loaded, params.tasks.gate, params.tasks.evidence, params.tasks.shared, params.source)
    if seed is not None:
        if incumbent is not None:
            raise EvidenceError("--seed is used instead of --previous and --incumbent; give one or the other")
        inputs = load_seed(seed)  # `previous` is ignored: a seed replaces the previous generation
    else:
        inputs = load_previous(previous, incumbent)
    _hold_back(inputs, split)
    _drop_baselines(inputs, params)
    items: list[dict[str, Any]] = []
    digest: str | None = None
    if learnings is not None:
        items, digest = load_learnings(learnings, skills, params.evidence.max_learnings)
    return build_bundle(inputs, guard=guard, limits=params.evidence, skills=skills, learnings=items,
                        learnings_digest=digest, secrets=env_secrets(environ))


def _drop_baselines(inputs: Inputs, params: Params) -> None:
    """Rows of a baseline arm (skills `none`: no skill installed) say nothing about the skills' text, and as
    unresolved runs they would come first and crowd the bounded bundle; a comparator arm's ran another skill set,
    which the proposer must not copy from: the proposer sees neither."""
    left_out = {name: "baseline" for name, arm in params.arms.items() if arm.is_baseline}
    left_out |= {name: "comparator" for name, arm in params.arms.items() if arm.is_comparator}
    kept = [row for row in inputs.rows if row.row["incumbent_arm"] not in left_out]
    for kind, reason in (("baseline", "no skill was installed, so they teach nothing about the skills"),
                         ("comparator", "they ran a pinned external skill set, never the family's")):
        names = sorted(n for n, k in left_out.items() if k == kind)
        dropped = sum(1 for row in inputs.rows if row.row["incumbent_arm"] in names)
        if dropped:
            inputs.dropped.append({"what": f"{dropped} rows of {kind} arms ({', '.join(names)})",
                                   "reason": f"left out: {reason}"})
    inputs.rows = kept


def _hold_back(inputs: Inputs, split: tasks_mod.Split) -> None:
    """Rows of the tasks the gate judges on never reach the proposer (unless tasks.shared lets a task be both):
    a skill tuned to the tasks it is judged on overfits them."""
    hidden = set(split.gate) - set(split.evidence)
    kept = [row for row in inputs.rows if row.row["task"] not in hidden]
    if len(kept) < len(inputs.rows):
        inputs.dropped.append({"what": f"{len(inputs.rows) - len(kept)} rows of the gate's tasks",
                               "reason": "held back: the gate decides on these tasks (tasks.gate in params)"})
    inputs.rows = kept
