"""Apply: promote a frozen, gated overlay onto the canonical skills and their mirrors as one transaction.

The files apply rewrites are a team's shared skills, so it trusts nothing but the evidence, anchored in dvc.lock
(skillevo.apply.anchor, skillevo.apply.evidence, skillevo.apply.inputs), walks every path one directory at a
time without following a symlink (skillevo.apply.fs), swaps every destination as one rollback-safe transaction
(skillevo.apply.transaction, with skillevo.apply.swaps, skillevo.apply.journal and skillevo.apply.rollback),
and restores from the recovery record a crash leaves (skillevo.apply.recovery) before doing anything else.
Apply leaves an ordinary working-tree diff; it never commits or pushes. This module is the public API.
"""

from skillevo.apply.common import (
    ApplyPaths,
    ApplyRefused,
    Fault,
    Log,
    RollbackIncomplete,
    RolledBack,
)
from skillevo.apply.operations import apply_promotion, revert
from skillevo.apply.outcome import Outcome
from skillevo.apply.recovery import recover

__all__ = [
    "ApplyPaths",
    "ApplyRefused",
    "Fault",
    "Log",
    "Outcome",
    "RollbackIncomplete",
    "RolledBack",
    "apply_promotion",
    "recover",
    "revert",
]
