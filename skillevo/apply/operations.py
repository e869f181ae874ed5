"""The two things a user asks of apply: apply a promotion, or revert the last apply. Each is one transaction.

Both take the state-directory lock, finish whatever a crash left behind, check their inputs, refuse unless
every destination holds exactly the bytes they expect (a file to create: nothing at all), and only then hand
the swaps to the transaction.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import datetime
from typing import Any

from skillevo.apply.common import (
    RECEIPT_SCHEMA,
    SCHEMA_VERSION,
    ApplyPaths,
    ApplyRefused,
    Fault,
    Log,
    iso,
    no_fault,
    quiet,
    refusals,
    require_aware,
    utc_stamp,
)
from skillevo.apply.fs import Tree
from skillevo.apply.guard import locked
from skillevo.apply.inputs import load_inputs, load_receipt, stored_originals
from skillevo.apply.journal import Commit, marker_tx, sha_or_none
from skillevo.apply.outcome import Outcome, diff_stat
from skillevo.apply.recovery import recover
from skillevo.apply.swaps import exec_mode, made_dirs, open_all
from skillevo.apply.transaction import transact
from skillevo.core import config
from skillevo.core.config import Params

GONE = "does not exist (deleted or moved since the apply); revert changes only files that hold what apply wrote"


def apply_promotion(paths: ApplyPaths, *, now: datetime, params: Callable[[], Params] | None = None,
                    fault: Fault | None = None, log: Log = quiet) -> Outcome:
    """Check every binding, then replace every destination with the frozen overlay's bytes and create the ones
    freeze recorded absent, or nothing.

    `params` loads params (after any recovery, like every other input); default: config.load(paths.params).
    """
    require_aware(now)
    with refusals(), locked(paths.state_dir):
        recover(paths, log=log)
        inputs = load_inputs(paths, now, params or (lambda: config.load(paths.params)))
        tx = secrets.token_hex(8)
        with Tree(paths.repo) as tree:
            absent = {rel for rel, digest in inputs.destinations.items() if digest is None}
            swaps = open_all(tree, inputs.new, tx, lambda rel, mode: exec_mode(mode, rel in inputs.executables),
                             absent=absent)
            if marker_tx(paths.receipt, "promotion_sha256") == inputs.promotion_sha256 and all(
                    s.holds_new() for s in swaps):
                raise ApplyRefused(f"already applied: {paths.receipt} records promotion "
                                   f"{inputs.promotion_sha256[:12]} and every destination holds the overlay's bytes")
            for s in swaps:
                if s.create:
                    if s.present is not None:
                        raise ApplyRefused(
                            f"{s.path}: exists, but freeze recorded it absent (the overlay adds it as a new file); "
                            "apply never overwrites it: move it aside, or re-run the pipeline")
                    continue
                actual, frozen = sha_or_none(s.expect), inputs.destinations[s.path]
                if actual != frozen:
                    raise ApplyRefused(
                        f"{s.path}: edited after freeze (sha256 {str(actual)[:12]} is not the {str(frozen)[:12]} "
                        "recorded at freeze); apply will not overwrite it: commit or discard the edit and re-run the "
                        "pipeline")
            files: list[dict[str, Any]] = [
                {"path": s.path, "before_sha256": sha_or_none(s.expect), "after_sha256": sha_or_none(s.new),
                 "before_mode": s.mode, "after_mode": s.new_mode} for s in swaps]
            receipt = {
                "schema_version": SCHEMA_VERSION,
                "promotion": str(paths.promotion),
                "promotion_sha256": inputs.promotion_sha256,
                "overlay_digest": inputs.overlay_digest,
                "applied_at": iso(now),
                "repo": str(paths.repo.resolve()),
                "originals": str(paths.originals.resolve()),
                "files": files,
                "created_dirs": [d.path for d in made_dirs(swaps)],
            }
            method = transact(tree, swaps, kind="apply", tx=tx, paths=paths,
                              commit=Commit(paths.receipt, "transaction", "swap", receipt, RECEIPT_SCHEMA),
                              now=now, fault=fault or no_fault, log=log)
    return Outcome("applied", files, method, paths.receipt, diff_stat(paths.repo, [f["path"] for f in files]),
                   inputs.described)


def revert(paths: ApplyPaths, *, now: datetime, fault: Fault | None = None, log: Log = quiet) -> Outcome:
    """Put back the pre-apply bytes the receipt names and delete the files (and empty directories) apply
    created, as the same transaction, unless a file changed since."""
    require_aware(now)
    with refusals(), locked(paths.state_dir):
        recover(paths, log=log)
        receipt = load_receipt(paths)
        after = {f["path"]: f["after_sha256"] for f in receipt["files"]}
        before_mode = {f["path"]: f["before_mode"] for f in receipt["files"]}
        before: dict[str, bytes | None] = {**stored_originals(paths, receipt)}
        before.update(dict.fromkeys(f["path"] for f in receipt["files"] if f["before_sha256"] is None))
        tx = secrets.token_hex(8)
        with Tree(paths.repo) as tree:
            swaps = open_all(tree, before, tx, lambda rel, mode: before_mode[rel], missing=GONE)
            for s in swaps:
                if sha_or_none(s.expect) != after[s.path]:
                    raise ApplyRefused(
                        f"{s.path}: changed since the apply (sha256 {str(sha_or_none(s.expect))[:12]} is not the "
                        f"applied {after[s.path][:12]}); revert will not "
                        f"{'delete' if s.new is None else 'overwrite'} it")
            marker = paths.state_dir / f"reverted-{utc_stamp()}.json"
            body = {**receipt, "reverted_at": iso(now), "receipt": str(paths.receipt)}
            commit = Commit(marker, "revert_transaction", "revert_swap", body, None, paths.receipt,
                            receipt["transaction"], list(receipt.get("created_dirs", [])))
            method = transact(tree, swaps, kind="revert", tx=tx, paths=paths, commit=commit, now=now,
                              fault=fault or no_fault, log=log)
    files = [{"path": s.path, "before_sha256": after[s.path], "after_sha256": sha_or_none(s.new),
              "before_mode": s.mode, "after_mode": s.new_mode} for s in sorted(swaps, key=lambda s: s.path)]
    return Outcome("reverted", files, method, marker, diff_stat(paths.repo, sorted(before)))
