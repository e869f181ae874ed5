"""Arms: named sequences of agent sessions, and which of them a candidate overlay must be tested in.

The candidate arm paired with incumbent arm `A` is `candidate_A`: the same sessions, with the frozen
overlay committed on top of the incumbent skills.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CANDIDATE_PREFIX = "candidate_"


class ArmError(ValueError):
    """params.yaml `arms` is malformed; the message names the arm and the rule."""


@dataclass(frozen=True)
class Session:
    skill: str
    prompt: str  # template; {prompt} is the task's prompt


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


def parse(raw: Any, known_skills: set[str]) -> dict[str, Arm]:
    """The incumbent arms declared in params.yaml."""
    if not isinstance(raw, dict) or not raw:
        raise ArmError("params.yaml: arms: must map arm names to {sessions: [...]}")
    arms = {}
    for name, spec in raw.items():
        if not isinstance(name, str) or name.startswith(CANDIDATE_PREFIX) or not name.replace("_", "").isalnum():
            raise ArmError(f"params.yaml: arms.{name}: names are [A-Za-z0-9_] and may not start with {CANDIDATE_PREFIX!r}")
        sessions = (spec or {}).get("sessions") if isinstance(spec, dict) else None
        if not isinstance(sessions, list) or not sessions:
            raise ArmError(f"params.yaml: arms.{name}.sessions: must be a non-empty list")
        parsed = []
        for i, s in enumerate(sessions):
            if not isinstance(s, dict) or set(s) != {"skill", "prompt"}:
                raise ArmError(f"params.yaml: arms.{name}.sessions[{i}]: needs exactly `skill` and `prompt`")
            if s["skill"] not in known_skills:
                raise ArmError(f"params.yaml: arms.{name}.sessions[{i}].skill: {s['skill']!r} is not a skill under skills/")
            if "{prompt}" not in s["prompt"]:
                raise ArmError(f"params.yaml: arms.{name}.sessions[{i}].prompt: must contain {{prompt}}")
            parsed.append(Session(s["skill"], s["prompt"]))
        arms[name] = Arm(name, name, tuple(parsed))
    return arms


def candidate(arm: Arm) -> Arm:
    return Arm(CANDIDATE_PREFIX + arm.name, arm.name, arm.sessions)


def required_candidate_arms(touched_skills: set[str], arms: dict[str, Arm]) -> list[Arm]:
    """Exactly the arms that use a touched skill, as candidate arms, in name order."""
    return [candidate(a) for name, a in sorted(arms.items()) if touched_skills & set(a.skills)]
