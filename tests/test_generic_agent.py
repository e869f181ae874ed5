"""The generic simulated agent plays a task from its solution, doing what the skill text it loaded says to run;
the simulated proposer attributes the cost of those commands to the lines that give them."""

from __future__ import annotations

from skillevo.simulator import agent, generic
from skillevo.simulator.conversation import Conversation
from skillevo.simulator.noise import NONE, SessionNoise

SKILL = """---
name: fixer
description: Fix a bug in the greeting module, test first.
---

# Fixer

- Find it with `grep -n greet pkg/greet.py`, then keep the change small.
- Run `scripts/check.sh` before you finish; `pip` alone is not a command to run.

```bash
$ python3 -m pytest -q
# a comment is not a command
```

```python
print("not shell")
```
"""
TASK = generic.SolvedTask(id="greet", prompt="make the greeting say hello", verify="python3 -m pytest -q tests",
                          writes=(("pkg/greet.py", 'def greet():\n    return "hello"\n'),), deletes=("pkg/old.py",),
                          skills=frozenset({"fixer"}))
BASE = "/work/.claude/skills/fixer"


def _conv(turns: int, skills: dict[str, str] | None = None) -> Conversation:
    listed = {"fixer": "Fix a bug in the greeting module, test first.", "update-config": "The CLI's own."}
    return Conversation(prompt="Use the fixer skill for: make the greeting say hello", cwd="/work", turns=turns,
                        skills=skills or {}, listed=listed, skill_dirs={"fixer": BASE} if skills else {})


def test_the_commands_a_literal_reader_takes_from_a_skill():
    assert generic.commands(SKILL, BASE) == ["grep -n greet pkg/greet.py", f"{BASE}/scripts/check.sh",
                                             "python3 -m pytest -q"]
    assert generic.commands("- run `cat a` and `cat a` twice\n" * 9, None) == ["cat a"]
    many = "".join(f"- `ls d{i}`\n" for i in range(20))
    assert len(generic.commands(many, None)) == generic.MAX_COMMANDS


def test_a_session_runs_the_skill_s_commands_applies_the_solution_and_runs_verify():
    book = generic.playbook(_conv(1, {"fixer": SKILL}), TASK)
    assert set(book.tasks[0].sessions) == {"fixer", generic.UNSKILLED}  # never the CLI's bundled skills
    calls = []
    for turn in range(1, 20):
        reply = agent.normal(_conv(turn, {"fixer": SKILL}), book, SessionNoise(NONE, ()))
        if reply.tool is None:
            break
        calls.append(reply.tool)
    names = [(tool, args.get("command") or args.get("file_path")) for tool, args in calls]
    assert names == [("Bash", "git status --short && ls"), ("Bash", "grep -n greet pkg/greet.py"),
                     ("Bash", f"{BASE}/scripts/check.sh"), ("Bash", "python3 -m pytest -q"),
                     ("Read", "/work/pkg/greet.py"), ("Write", "/work/pkg/greet.py"),
                     ("Bash", "rm -f -- pkg/old.py"), ("Bash", "python3 -m pytest -q tests")]
    assert calls[5][1]["content"] == TASK.writes[0][1]


def test_a_mistaken_session_leaves_the_solution_s_last_change_out():
    book = generic.playbook(_conv(1, {"fixer": SKILL}), TASK)
    right = book.steps(book.tasks[0], "fixer", SKILL, mistake=False)
    wrong = book.steps(book.tasks[0], "fixer", SKILL, mistake=True)
    assert [s for s in right if s not in wrong] == [right[-2]] and right[-2].arg == "rm -f -- pkg/old.py"


def test_the_skill_text_changes_what_a_session_does():
    shorter = SKILL.replace("- Run `scripts/check.sh` before you finish; `pip` alone is not a command to run.\n", "")
    book = generic.playbook(_conv(1, {"fixer": shorter}), TASK)
    steps = book.steps(book.tasks[0], "fixer", shorter)
    assert f"{BASE}/scripts/check.sh" not in [s.arg for s in steps]
    assert generic.match((TASK,), "Use the fixer skill for: make the greeting say hello\nRun it.") == TASK
    assert generic.match((TASK,), "something else") is None


def test_the_proposer_knows_which_line_gave_which_command():
    book = generic.command_instructions({"fixer/SKILL.md": SKILL.encode(), "other/SKILL.md": b"- `ls`\n"}, ["fixer"])
    phrases = sorted(i.phrase for i in book.instructions.values())
    assert phrases == ["$ python3 -m pytest -q",  # a fenced block's command is credited to its own line (issue 32)
                       "- Find it with `grep -n greet pkg/greet.py`, then keep the change small.",
                       "- Run `scripts/check.sh` before you finish; `pip` alone is not a command to run."]
    steps = book.tasks[0].sessions["(commands)"]
    assert {s.arg for s in steps} == {"grep -n greet pkg/greet.py", f"{BASE}/scripts/check.sh", "python3 -m pytest -q"}
    assert {s.arg for s in steps} == set(generic.commands(SKILL, BASE))  # what the agent runs, all of it credited
    assert all(s.when in book.instructions for s in steps)
    assert book.task_for("make the greeting say hello") is None  # the proposer's knowledge, never played
