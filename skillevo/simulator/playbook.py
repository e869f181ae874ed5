"""Playbooks: the simulated agent's knowledge of each task, and how skill text steers it.

A playbook lists the tool calls a competent agent makes for a task, per skill it was asked to use.
Steps may depend on an *instruction* — a phrase the simulator looks for in the skill text the CLI
actually sent — so that editing a skill really changes what the agent does and what it costs.
A step may also say `mistake: true` (taken only when the agent slips, at the noise profile's rate) or
`mistake: false` (taken only when it does not): a task's mistake variant, a plausible change that passes
the visible check but not the hidden oracle (skillevo/simulator/noise.py). A playbook's `unskilled` names the
session whose steps an agent that loaded no skill takes for its tasks, with no skill text to steer them.

An instruction may also carry an `effect`, a behaviour the skill text causes beyond its steps: a retry loop
(the agent gets stuck and repeats its reading and verification), a give-up (it stops at once, unresolved), or a
spread (its cost varies more, around the same mean). Effects fire at their rates only under a noise profile
that draws, from the session's own draws (noise.SessionNoise), optionally only on some tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillevo.files import documents
from skillevo.files.schemas import InvalidDocument, validate


@dataclass(frozen=True)
class Effect:
    """What an instruction's presence does beyond its steps (docs/simulator.md, "Behaviours a skill can cause")."""

    retry_loop: tuple[float, int, int] | None = None  # (rate, lo, hi): P(stuck), then lo..hi repeats, uniform
    give_up: float | None = None  # P(the session stops at once without editing)
    spread: float | None = None  # factor on the session's verbosity sigma and on the sd of its extra calls
    tasks: tuple[str, ...] | None = None  # only these tasks (None: every task)

    def applies_to(self, task: str) -> bool:
        return self.tasks is None or task in self.tasks


@dataclass(frozen=True)
class Instruction:
    id: str
    phrase: str
    necessary: bool
    effect: Effect | None = None

    def present_in(self, skill_text: str) -> bool:
        return self.phrase.lower() in skill_text.lower()


@dataclass(frozen=True)
class Step:
    kind: str  # read | bash | write | edit | mcp | say
    arg: Any
    when: str | None = None
    unless: str | None = None
    mistake: bool | None = None  # None: taken either way


@dataclass(frozen=True)
class Task:
    id: str
    match: str
    sessions: dict[str, tuple[Step, ...]]
    unskilled: str | None = None  # the session an agent without a skill plays (its playbook's `unskilled`)

    @property
    def has_mistake(self) -> bool:
        """Whether the task declares a mistake variant (some step keyed on `mistake`)."""
        return any(s.mistake is not None for steps in self.sessions.values() for s in steps)


@dataclass(frozen=True)
class Playbook:
    instructions: dict[str, Instruction]
    tasks: tuple[Task, ...]

    def task_for(self, prompt: str) -> Task | None:
        """The first task whose match string occurs in the prompt."""
        return next((t for t in self.tasks if t.match in prompt), None)

    def steps(self, task: Task, skill: str, skill_text: str, mistake: bool = False) -> list[Step]:
        """The steps a session that invoked `skill` takes, given the skill text it read and whether it slips."""
        present = {i for i, ins in self.instructions.items() if ins.present_in(skill_text)}
        return [
            s
            for s in task.sessions.get(skill, ())
            if (s.when is None or s.when in present) and (s.unless is None or s.unless not in present)
            and (s.mistake is None or s.mistake == mistake)
        ]

    def effects(self, task: Task, skill_text: str) -> list[tuple[str, Effect]]:
        """(instruction id, effect) of every instruction the skill text carries whose effect applies to `task`."""
        return [(i, ins.effect) for i, ins in self.instructions.items()
                if ins.effect is not None and ins.effect.applies_to(task.id) and ins.present_in(skill_text)]


_KINDS = ("read", "bash", "write", "edit", "mcp", "say")


def _effect(raw: dict[str, Any], ins: str, task_ids: set[str], source: str | Path) -> Effect:
    """An instruction's effect, past its schema: a repeat range in order, tasks the playbook has."""
    where = f"{source}: instruction {ins!r} effect"
    retry = raw.get("retry_loop")
    if retry is not None and retry["repeat"][0] > retry["repeat"][1]:
        raise InvalidDocument(f"{where}: retry_loop repeat {retry['repeat']} runs backwards (rule: [lo, hi], lo <= hi)")
    unknown = sorted(set(raw.get("tasks", ())) - task_ids)
    if unknown:
        raise InvalidDocument(f"{where}: tasks {unknown} are not tasks of this playbook (rule: an effect names "
                              "tasks its playbook defines)")
    return Effect(retry_loop=None if retry is None else (float(retry["rate"]), *retry["repeat"]),
                  give_up=None if "give_up" not in raw else float(raw["give_up"]["rate"]),
                  spread=None if "spread" not in raw else float(raw["spread"]["factor"]),
                  tasks=tuple(raw["tasks"]) if "tasks" in raw else None)


def parse(doc: Any, source: str | Path) -> Playbook:
    validate(doc, "playbook.schema.json", source)
    instructions = {}
    task_ids = {t["id"] for t in doc["tasks"]}
    for ins in doc["instructions"]:
        if ins["id"] in instructions:
            raise InvalidDocument(f"{source}: instruction {ins['id']!r} is defined twice (rule: unique ids)")
        effect = _effect(ins["effect"], ins["id"], task_ids, source) if "effect" in ins else None
        instructions[ins["id"]] = Instruction(ins["id"], ins["phrase"], bool(ins.get("necessary", False)), effect)
    tasks, seen = [], set()
    for t in doc["tasks"]:
        if t["id"] in seen:
            raise InvalidDocument(f"{source}: task {t['id']!r} is defined twice (rule: unique ids)")
        seen.add(t["id"])
        sessions = {}
        for skill, raw_steps in t["sessions"].items():
            steps = []
            for n, raw in enumerate(raw_steps):
                for key in ("when", "unless"):
                    if key in raw and raw[key] not in instructions:
                        raise InvalidDocument(
                            f"{source}: task {t['id']!r} session {skill!r} step {n}: {key}: "
                            f"unknown instruction {raw[key]!r} (rule: steps name declared instructions)"
                        )
                kind = next(k for k in _KINDS if k in raw)
                steps.append(Step(kind, raw[kind], raw.get("when"), raw.get("unless"), raw.get("mistake")))
            sessions[skill] = tuple(steps)
        unskilled = doc.get("unskilled")
        if unskilled is not None and unskilled not in sessions:
            raise InvalidDocument(f"{source}: task {t['id']!r} has no session {unskilled!r}, which `unskilled` names "
                                  "(rule: an agent without a skill plays a session the task has)")
        tasks.append(Task(t["id"], t["match"], sessions, unskilled))
    return Playbook(instructions, tuple(tasks))


def load(path: str | Path) -> Playbook:
    return parse(documents.load_yaml(path, what="playbook"), path)


def load_dir(directory: Path) -> Playbook:
    """Every `*.yaml` playbook in a directory (tasks/playbooks/), in name order."""
    return load_all(sorted(Path(directory).glob("*.yaml")))


def load_all(paths: list[Path]) -> Playbook:
    """Several playbook files as one (each target project may ship its own)."""
    books = [load(p) for p in paths]
    instructions: dict[str, Instruction] = {}
    for b in books:
        for k, v in b.instructions.items():
            if k in instructions and instructions[k] != v:
                raise InvalidDocument(f"instruction {k!r} is defined differently in two playbooks")
            instructions[k] = v
    return Playbook(instructions, tuple(t for b in books for t in b.tasks))
