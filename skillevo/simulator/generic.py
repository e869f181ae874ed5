"""The generic simulated agent: plays any task that has a reference solution, with no hand-written playbook.

A team's own tasks have no playbook, so offline the simulator would know nothing to do. For a task with a
`solution` (tasks.yaml), it acts as a plain, literal agent whose every step is a real tool call through the CLI:

1. it orients itself (`git status`, `ls`);
2. it runs the commands the skill text it loaded gives (fenced shell blocks, and inline code that starts with a
   known command; a path under `scripts/` is the skill's own, run from the skill's directory), at most
   MAX_COMMANDS, in the order they appear: so a skill's wording changes what a session does and costs;
3. it reads each file the solution changes, then writes the solved content (deletes with `rm`);
4. it runs the task's visible check (verify).

Its noise is the profile's (skillevo.simulator.noise): prose, extra exploratory calls, a skipped skill, and a
mistake, which here leaves the solution's last change out. It never sees the solution's source: the host hands
it the changed files, as the playbook hands the hand-written agent its edits. Results are simulated, and labelled
so, like every simulator run; what a real model would do with the same skill is for a real backend to measure.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from skillevo.core.tasks import Task as BenchTask
from skillevo.core.tasks import TaskError, solved_changes
from skillevo.simulator.conversation import Conversation
from skillevo.simulator.playbook import Instruction, Playbook, Step, Task

MAX_COMMANDS = 6  # commands taken from a skill's text, per session
MAX_COMMAND_CHARS = 300
UNSKILLED = "(no skill)"
# the first word of an inline code span that the agent takes for a command to run
KNOWN = frozenset("""bash sh python python3 pytest git grep rg ls cat head tail find wc make tox nox ruff mypy flake8
black isort pylint uv npm npx node go cargo diff sed awk sort""".split())
_FENCE = re.compile(r"^```[ \t]*(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
_SHELLS = frozenset({"", "sh", "bash", "shell", "console", "zsh"})
_INLINE = re.compile(r"`([^`\n]+)`")


@dataclass(frozen=True)
class SolvedTask:
    """What the generic agent knows of one task: how to recognise it, the solution's changes, its visible check."""

    id: str
    prompt: str
    verify: str
    writes: tuple[tuple[str, str], ...]  # (path, solved text), in path order
    deletes: tuple[str, ...]
    skills: frozenset[str]  # the family's skills (the CLI also lists its bundled ones; the agent has no use for them)


def solved(task: BenchTask, skills: frozenset[str]) -> SolvedTask:
    """The generic agent's view of a bench task with a solution (text files only: it writes with the Write tool),
    in a family of `skills`."""
    writes, deletes = [], []
    for rel, data in solved_changes(task).items():
        if data is None:
            deletes.append(rel)
            continue
        try:
            writes.append((rel, data.decode("utf-8")))
        except UnicodeDecodeError:
            raise TaskError(f"task {task.id}: its solution changes {rel}, which is not UTF-8 text: the simulated "
                             "agent writes text files only (rule: a simulated solution is text)") from None
    return SolvedTask(task.id, task.prompt, task.verify, tuple(writes), tuple(deletes), skills)


def _found(skill_text: str) -> list[tuple[int, str]]:
    """(offset, command) for each command a literal reader takes from `skill_text`: each line of a fenced shell
    block, and inline code that starts with a known command or a skill's script, outside fences."""
    found: list[tuple[int, str]] = []
    for m in _FENCE.finditer(skill_text):
        if m.group(1).lower() in _SHELLS:
            offset = m.start(2)
            for raw in m.group(2).splitlines(keepends=True):
                line = raw.strip().removeprefix("$ ").strip()
                if line and not line.startswith("#"):
                    found.append((offset, line))
                offset += len(raw)
    fenced = [(m.start(), m.end()) for m in _FENCE.finditer(skill_text)]
    for m in _INLINE.finditer(skill_text):
        text = m.group(1).strip()
        words = text.split()
        if not any(a <= m.start() < b for a, b in fenced) and words and (
                words[0] in KNOWN or words[0].startswith(("scripts/", "./scripts/"))):
            found.append((m.start(), text))
    return sorted(found, key=lambda f: f[0])


def commands(skill_text: str, skill_dir: str | None) -> list[str]:
    """The shell commands a literal reader of `skill_text` runs, in order, without repeats, at most MAX_COMMANDS."""
    out: list[str] = []
    for _, cmd in _found(skill_text):
        cmd = _in_skill_dir(cmd, skill_dir)[:MAX_COMMAND_CHARS]
        if cmd not in out:
            out.append(cmd)
    return out[:MAX_COMMANDS]


def line_commands(skill_text: str, skill_dir: str | None) -> list[tuple[str, list[str]]]:
    """Each line of `skill_text` that gives commands, with the commands the agent takes from it (the same reading
    as `commands`): so a fenced block's command is credited to its own line, as an inline one is to its line."""
    starts, at = [], 0
    for line in skill_text.splitlines(keepends=True):
        starts.append((at, line.rstrip("\n")))
        at += len(line)
    by_line: dict[int, list[str]] = {}
    for offset, cmd in _found(skill_text):
        index = max(i for i, (begin, _) in enumerate(starts) if begin <= offset)
        by_line.setdefault(index, []).append(_in_skill_dir(cmd, skill_dir)[:MAX_COMMAND_CHARS])
    return [(starts[i][1], cmds) for i, cmds in sorted(by_line.items())]


def _in_skill_dir(cmd: str, skill_dir: str | None) -> str:
    """A command whose words name the skill's own `scripts/`, with those paths made absolute."""
    if skill_dir is None:
        return cmd
    words = cmd.split(" ")
    return " ".join(f"{skill_dir}/{w.removeprefix('./')}" if w.startswith(("scripts/", "./scripts/")) else w
                    for w in words)


def steps(task: SolvedTask, skill_text: str, skill_dir: str | None) -> tuple[Step, ...]:
    """One session's steps for a task, given the skill text it loaded ("" for none). The solution's last change is
    the step a mistaken session leaves out."""
    out = [Step("bash", "git status --short && ls")]
    out += [Step("bash", cmd) for cmd in commands(skill_text, skill_dir)]
    out += [Step("read", path) for path, _ in task.writes if path not in task.deletes]
    changes = [Step("write", {"path": path, "content": text}) for path, text in task.writes]
    changes += [Step("bash", f"rm -f -- {shlex.quote(path)}") for path in task.deletes]
    if changes:
        changes[-1] = Step(changes[-1].kind, changes[-1].arg, mistake=False)
    out += changes
    out.append(Step("bash", task.verify))
    return tuple(out)


def match(tasks: tuple[SolvedTask, ...], prompt: str) -> SolvedTask | None:
    """The task whose prompt the session's prompt holds (the longest, when one task's prompt holds another's)."""
    hits = [t for t in tasks if t.prompt.strip() in prompt]
    return max(hits, key=lambda t: len(t.prompt)) if hits else None


def playbook(conv: Conversation, task: SolvedTask) -> Playbook:
    """A one-task playbook for this conversation: a session per skill of the family the CLI listed or the session
    loaded (steps from that skill's text), and an unskilled one; the rest of the simulated agent (noise, skill
    choice, skipped skills) plays it as any playbook."""
    names = (set(conv.listed) | set(conv.skills)) & task.skills
    sessions = {name: steps(task, conv.skills.get(name, ""), conv.skill_dirs.get(name)) for name in names}
    sessions[UNSKILLED] = steps(task, "", None)
    return Playbook({}, (Task(task.id, task.prompt.strip(), sessions, UNSKILLED),))


def command_instructions(family: Mapping[str, bytes], evolvable: Iterable[str], cwd: str = "/work") -> Playbook:
    """What the simulated proposer knows of the generic agent: each line of an evolvable skill that gives commands is
    an instruction (its text the phrase), and the Bash calls those commands become are its steps, so the proposer
    attributes their turns' tokens to the line, as it does for a playbook's instructions. Never played: its one task
    matches no prompt."""
    instructions, steps = {}, []
    for skill in sorted(evolvable):
        text = family.get(f"{skill}/SKILL.md", b"").decode("utf-8", errors="replace")
        skill_dir = f"{cwd}/.claude/skills/{skill}"
        for line, cmds in line_commands(text, skill_dir):
            ins = "line-" + hashlib.sha256(f"{skill}\n{line}".encode()).hexdigest()[:12]
            instructions[ins] = Instruction(ins, line.strip(), necessary=False)
            steps += [Step("bash", cmd, when=ins) for cmd in cmds]
    return Playbook(instructions, (Task("skill-commands", "\0never a prompt\0", {"(commands)": tuple(steps)}),))
