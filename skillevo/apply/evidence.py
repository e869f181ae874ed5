"""The promotion checked against its evidence: the tasks as they are now, and the gate's own code run again.

promotion.json embeds aggregates, timestamps and task bindings, all of which a forger can rewrite consistently
with each other. So apply does not trust what it embeds: the task bindings must be what tasks/ binds now, and
the whole promotion must be exactly what the gate's build_promotion makes of both bench sides as read (whose
rows load_side has already checked against their sha256-bound transcripts). Rescaled aggregates, recomputed
decisions, moved timestamps or a side swapped in from elsewhere then no longer match.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from skillevo.apply.common import RERUN, ApplyRefused
from skillevo.core import tasks
from skillevo.core.config import Policy
from skillevo.core.results import Side
from skillevo.files import documents
from skillevo.gate.promotion import build_promotion, first_difference


def check_task_bindings(promotion: Mapping[str, Any], where: Path, tasks_file: Path,
                        target_roots: Iterable[str | Path]) -> None:
    """Every task the promotion was decided on must bind exactly the same bytes in tasks/ now."""
    now = {task.id: task.binding for task in tasks.load(tasks_file, target_roots=target_roots)}
    for i, bound in enumerate(promotion["task_bindings"]):
        task_id = bound["id"]
        if task_id not in now:
            raise ApplyRefused(f"{where}: task_bindings[{i}]: task {task_id!r} was benchmarked but is no longer in "
                               f"{tasks_file}: the evidence measured a task that no longer exists; {RERUN}")
        difference = first_difference(bound, now[task_id], f"task_bindings[{i}]")
        if difference:
            raise ApplyRefused(f"{where}: {difference}: task {task_id!r} is not bound as it was benchmarked: "
                               f"{tasks_file} (or its oracle or target files) changed after the bench; {RERUN}")


def check_rebuilt(promotion: Mapping[str, Any], where: Path, incumbent: Side, candidate: Side,
                  manifest: Mapping[str, Any], policy: Policy) -> None:
    """The stored promotion must be byte for byte what the gate's code makes of the evidence now."""
    generated = datetime.fromisoformat(promotion["generated_at"])
    rebuilt = build_promotion(incumbent, candidate, manifest, policy, now=generated)
    rebuilt = documents.parse_json(documents.dump_json(rebuilt), "rebuilt promotion")  # as the gate writes it
    difference = first_difference(promotion, rebuilt, "$")
    if difference:
        raise ApplyRefused(
            f"{where}: {difference}: the stored promotion does not follow from the evidence as it is now (the gate's "
            f"code, run again on {incumbent.directory} and {candidate.directory}, decides otherwise); {RERUN}")
