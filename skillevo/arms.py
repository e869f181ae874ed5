"""Arms: named sequences of agent sessions, and which of them a candidate overlay must be tested in.

The candidate arm paired with incumbent arm `A` is `candidate_A` (skillevo.layout): the same sessions, with
the frozen overlay committed on top of the incumbent skills. Arms are declared in params.yaml `arms:` and
read by skillevo.config.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from skillevo.errors import BadInput
from skillevo.layout import candidate_arm


@dataclass(frozen=True)
class Session:
    skill: str
    prompt: str  # template; {prompt} is the task's prompt
    writes: tuple[str, ...] | None = None  # the only paths it may change (a plan session); None = any


@dataclass(frozen=True)
class Arm:
    name: str
    incumbent: str  # the arm itself for incumbents; the paired incumbent for candidates
    sessions: tuple[Session, ...]

    @property
    def skills(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.skill for s in self.sessions))

    @property
    def is_candidate(self) -> bool:
        return self.name != self.incumbent

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "incumbent_arm": self.incumbent, "skills": list(self.skills)}


def check_skills(arms: Mapping[str, Arm], known: Iterable[str], source: str = "params.yaml") -> None:
    """Every session names a skill of the family (BadInput naming the params key otherwise)."""
    known = set(known)
    for name, arm in sorted(arms.items()):
        for i, session in enumerate(arm.sessions):
            if session.skill not in known:
                raise BadInput(f"{source}: arms.{name}.sessions[{i}].skill: {session.skill!r} is not a skill of the "
                               f"family ({', '.join(sorted(known))}) (rule: arms use existing skills)")


def candidate(arm: Arm) -> Arm:
    return Arm(candidate_arm(arm.name), arm.name, arm.sessions)


def required_candidate_arms(touched_skills: set[str], arms: Mapping[str, Arm]) -> list[Arm]:
    """Exactly the arms that use a touched skill, as candidate arms, in name order."""
    return [candidate(a) for name, a in sorted(arms.items()) if touched_skills & set(a.skills)]
