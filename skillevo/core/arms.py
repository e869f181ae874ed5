"""Arms: named sequences of agent sessions, and which of them a candidate overlay must be tested in.

The candidate arm paired with incumbent arm `A` is `candidate_A` (skillevo.core.layout): the same sessions, with
the frozen overlay committed on top of the incumbent skills. Arms are declared in params.yaml `arms:` and
read by skillevo.core.config.

A session's `skill` is a skill of the family (the prompt asks for it by name), or one of two choices that
name none, so that what a skill's `description` does is measured too:
  auto  the prompt gives only the task; the model picks a skill, or none, from the skills' descriptions. Every
        description reaches the model, so an auto session depends on every skill of the family.
  none  a baseline: the same task with no skill of the family installed at all. The bench gives such an arm
        a workspace without the family, which is per arm, so an arm's sessions are all `none` or none of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skillevo.core.comparators import Comparator
from skillevo.core.layout import candidate_arm
from skillevo.files.errors import BadInput

AUTO = "auto"  # the model chooses from the descriptions
NONE = "none"  # no skill installed: the baseline
CHOICES = (AUTO, NONE)
_MENTIONS_SKILLS = re.compile(r"\bskills?\b|^\s*/", re.I)  # "use the work skill", a leading "/work"


@dataclass(frozen=True)
class Session:
    skill: str  # a skill of the family, AUTO or NONE
    prompt: str  # template; {prompt} is the task's prompt
    writes: tuple[str, ...] | None = None  # the only paths it may change (a plan session); None = any


MCP_ROOT = "/opt/skillevo/mcp"  # inside a cell's sandbox: each server's frozen files, read-only, at MCP_ROOT/<name>
DIR_FIELD = "{dir}"  # in a server's command or args: where its frozen files are mounted


@dataclass(frozen=True)
class McpServer:
    """An MCP server an arm's sessions get: a stdio command the CLI starts in a sandbox of its own inside the cell's
    (skillevo.sandbox.bwrap.nested: the workspace, no network, no road to the model relay). Its files come from
    `dir` of the team's repository, frozen when the side is planned (skillevo.bench.mcpservers) and mounted
    read-only, so an agent cannot rewrite the server one session starts for the next; `{dir}` in the command or
    args names them."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    dir: str = ""  # the server's files: absolute, or relative to the folder params.yaml is in
    digest: str | None = None  # of the files frozen (layout.tree_digest), once read: in every cell key of the arm

    @property
    def tools(self) -> str:
        """The prefix of its tools' names, as the CLI calls them (and the permission rule that allows them all)."""
        return f"mcp__{self.name}"

    @property
    def mount(self) -> str:
        return f"{MCP_ROOT}/{self.name}"

    def argv(self) -> list[str]:
        """The server's command line inside the sandbox, `{dir}` replaced by where its files are."""
        return [part.replace(DIR_FIELD, self.mount) for part in (self.command, *self.args)]


@dataclass(frozen=True)
class Arm:
    name: str
    incumbent: str  # the arm itself for incumbents; the paired incumbent for candidates
    sessions: tuple[Session, ...]
    mcp: tuple[McpServer, ...] = ()  # the MCP servers its sessions get (params arms.<name>.mcp)
    comparator: Comparator | None = None  # installs this pinned external set instead of the family

    @property
    def is_comparator(self) -> bool:
        return self.comparator is not None

    @property
    def skills(self) -> tuple[str, ...]:
        """What the sessions ask for, in order, once each: skill names, `auto`, `none`."""
        return tuple(dict.fromkeys(s.skill for s in self.sessions))

    @property
    def is_candidate(self) -> bool:
        return self.name != self.incumbent

    @property
    def is_baseline(self) -> bool:
        """No skill of the family is installed for it (every session is `none`)."""
        return is_baseline(self.skills)

    def depends_on(self, touched_skills: set[str]) -> bool:
        """Whether changing these skills can change what the arm's sessions do (a comparator's never: it has none
        of the family)."""
        if self.is_comparator:
            return False
        return bool(touched_skills & set(self.skills)) or (AUTO in self.skills and bool(touched_skills))

    def describe(self) -> dict[str, Any]:
        found: dict[str, Any] = {"name": self.name, "incumbent_arm": self.incumbent, "skills": list(self.skills)}
        if self.mcp:
            found["mcp"] = sorted(server.name for server in self.mcp)
        if self.comparator is not None:
            found["comparator"] = self.comparator.describe()
        return found


def unnamed(evolvable: Iterable[str], arms: Mapping[str, Arm]) -> list[str]:
    """The evolvable skills no arm's prompt names: only an `auto` session can load one, and a model may pick the same
    skill every time (the offline simulator's does), so such a skill may never be measured, and so never move."""
    named = {skill for arm in arms.values() if not arm.is_comparator for skill in arm.skills}
    return sorted(set(evolvable) - named)


def is_baseline(skills: Sequence[str]) -> bool:
    """An arm that asks for these (Arm.skills, bench.json `arms[].skills`) runs without the family."""
    return bool(skills) and all(s == NONE for s in skills)


def skill_invoked(expected: str | None, loaded: Sequence[str]) -> bool | None:
    """Whether a session loaded what its arm expects, from the skills it loaded (the one place this is decided):
    a named skill: that skill; `auto`: any skill (the model chose one); `none`, or nothing expected (the
    proposer): None, there is nothing to load."""
    if expected is None or expected == NONE:
        return None
    return bool(loaded) if expected == AUTO else expected in loaded


def must_load(expected: str | None) -> bool:
    """A session that does not load its expected skill failed (`skill-not-invoked`) only when the prompt named
    it; under `auto` not loading one is the model's choice, measured by what it then does."""
    return expected is not None and expected not in CHOICES


def check_shapes(arms: Mapping[str, Arm], source: str = "params.yaml") -> None:
    """What holds whatever the family: `none` fills whole arms; an auto or none prompt mentions no skill
    (skillevo.core.config checks it when params load; BadInput naming the params key)."""
    for name, arm in sorted(arms.items()):
        for i, session in enumerate(arm.sessions):
            where = f"{source}: arms.{name}.sessions[{i}]"
            if session.skill == NONE and not arm.is_baseline:
                raise BadInput(f"{where}.skill: {NONE!r} in an arm whose other sessions use skills: the workspace "
                               f"is per arm, so {NONE!r} sessions fill an arm (rule: a baseline arm is all {NONE})")
            if session.skill in CHOICES and _MENTIONS_SKILLS.search(session.prompt):
                raise BadInput(f"{where}.prompt: a {session.skill!r} session's prompt may not mention a skill "
                               "(rule: the model chooses from the descriptions alone)")


def check_skills(arms: Mapping[str, Arm], known: Iterable[str], source: str = "params.yaml",
                 comparators: Mapping[str, Iterable[str]] | None = None) -> None:
    """Every session names a skill of its arm's set (the family's, or a comparator arm's own, given in
    `comparators` by arm name once read; unread, it is not checked yet), `auto` or `none`, and no skill takes
    either of those names; plus check_shapes (BadInput naming the params key)."""
    sets: dict[str, set[str] | None] = {name: set(known) for name in arms}
    for name, arm in arms.items():
        if arm.is_comparator:
            sets[name] = set((comparators or {}).get(name, ())) if name in (comparators or {}) else None
    for name, names in sorted((n, s) for n, s in sets.items() if s is not None):
        reserved = sorted(names & set(CHOICES))
        if reserved:
            raise BadInput(f"{source}: skill {reserved[0]!r} takes a name arms use for a choice ({', '.join(CHOICES)}) "
                           "(rule: reserved skill names)")
        what = "its comparator's set" if arms[name].is_comparator else "the family"
        for i, session in enumerate(arms[name].sessions):
            if session.skill not in names and session.skill not in CHOICES:
                raise BadInput(f"{source}: arms.{name}.sessions[{i}].skill: {session.skill!r} is not a skill of "
                               f"{what} ({', '.join(sorted(names))}), {AUTO} or {NONE} "
                               "(rule: arms use existing skills)")
    check_shapes(arms, source)


def candidate(arm: Arm) -> Arm:
    if arm.is_comparator:
        raise ValueError(f"{arm.name} is a comparator arm: never evolved")
    return Arm(candidate_arm(arm.name), arm.name, arm.sessions, arm.mcp)


def required_candidate_arms(touched_skills: set[str], arms: Mapping[str, Arm]) -> list[Arm]:
    """Exactly the arms the touched skills can change, as candidate arms, in name order: those naming a touched
    skill and every `auto` arm; never a baseline."""
    return [candidate(a) for name, a in sorted(arms.items()) if a.depends_on(touched_skills)]
