"""The levels a decision is tested at, for a fixed bench or for a candidate side stopped at one of its looks.

A side that ran in looks (skillevo.core.sampling) is judged only at the look it stopped at, at that look's boundary
of a plan that spends the level over every planned look (skillevo.stats.look_levels): a false promotion needs
the test to reject at the stopped look, which is one of the planned looks, and the plan lets the null reject
at any of them at most alpha of the time. So the bench's stopping rule, whatever it is, cannot raise the
error rate (docs/gate.md, sequential runs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skillevo import stats
from skillevo.core.config import Policy


@dataclass(frozen=True)
class Levels:
    cost: float  # the metric's one-sided test (and its interval's one-sided bounds)
    drop: float  # 1 - the confidence of the resolution drop's upper bound


def levels(policy: Policy, sequential: Mapping[str, Any] | None) -> Levels:
    """`sequential` is bench.json's record (looks, stopped_at_look), or None for the fixed design. The test by
    betting (per_resolved with gate.test betting, skillevo.stats.betting) is valid at every look at alpha itself;
    the bootstrap's and the geometric policy's p-values and the resolution drop's bound are not, so they are taken
    at the stopped look's level of a plan that spends alpha over the looks."""
    if sequential is None:
        return Levels(policy.alpha, policy.alpha)
    planned, look = tuple(sequential["looks"]), sequential["stopped_at_look"]
    spent = stats.look_levels(planned, policy.alpha, policy.look_boundary)[look - 1]
    return Levels(policy.alpha if policy.policy == "per_resolved" and policy.test == "betting" else spent, spent)


def binding(policy: Policy, sequential: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What promotion.json binds: the record and the levels it gives under this policy (apply recomputes it)."""
    if sequential is None:
        return None
    found = levels(policy, sequential)
    return {"looks": list(sequential["looks"]), "stopped_at_look": sequential["stopped_at_look"],
            "reason": sequential["reason"], "boundary": policy.look_boundary, "cost_level": round(found.cost, 9),
            "drop_level": round(found.drop, 9)}
