"""The task `skillevo init` writes for a team to replace: how it is known, and what is said while it is there.

It is a to-do, not a problem: `skillevo check` lists it as `check: to do:` and the bench refuses to measure it;
`skillevo task add` replaces it with the first real task.
"""

from __future__ import annotations

from pathlib import Path

from skillevo.core.tasks import Task
from skillevo.files.errors import BadInput

PLACEHOLDER_CLASS = "example"  # the class of the task init writes to be replaced (skillevo.readiness: a to-do)


class Placeholder(BadInput):
    """The tasks file still holds the task `skillevo init` wrote: nothing is wrong, something is left to write (exit
    2 all the same: a bench cannot measure it)."""

    label = "to do"


def placeholders(loaded: list[Task], tasks_file: str | Path) -> list[str]:
    """What is left to do: one line per placeholder task still in the file."""
    return [f"{tasks_file}: task {t.id} is the placeholder `skillevo init` wrote: replace it with a task of your own "
            "(a commit of your repository with the bug as `ref`, the prompt, `verify`, hidden oracle tests in "
            "tasks/oracles/, a `solution` commit or patch for the offline simulator; docs/formats.md, tasks)"
            for t in loaded if t.cls == PLACEHOLDER_CLASS]


def check_placeholders(loaded: list[Task], tasks_file: str | Path) -> None:
    if found := placeholders(loaded, tasks_file):
        raise Placeholder("; ".join(found))
