"""One error family for the whole project, so every stage can turn any failure into one line and an exit code.

A message names the file, the key or line, and the rule that was broken; the class says what kind of failure
it is and which exit status a stage returns for it. Code that finds bad input raises a BadInput subclass; code
that finds the machine unfit raises BrokenEnvironment; nothing else needs to know about exit codes.
"""

from __future__ import annotations

import re

_RULE = re.compile(r"\(rule: ([^()]+)\)")


def rule_of(message: str) -> str | None:
    """The rule a message says was broken: its last `(rule: ...)`, as every refusal writes it; None if it names
    none. Tests and tools read this field rather than matching the prose around it."""
    found = _RULE.findall(message)
    return found[-1].strip() if found else None


class SkillevoError(Exception):
    """Base of every error skillevo raises on purpose."""

    exit_code = 1
    label = "failed"

    @property
    def rule(self) -> str | None:
        return rule_of(str(self))


class BadInput(SkillevoError, ValueError):
    """Input (params, tasks, overlays, evidence, rows, promotion files, agent output) breaks a rule; nothing
    was changed."""

    exit_code = 2
    label = "refused"


class RolledBack(SkillevoError):
    """A transaction failed or was interrupted and every original is back."""

    exit_code = 3
    label = "rolled back"


class RollbackIncomplete(SkillevoError):
    """Some original could not be put back; the message names the recovery record."""

    exit_code = 4
    label = "rollback incomplete"


class BrokenEnvironment(SkillevoError):
    """The machine cannot do the work: a tool is missing (bwrap, socat, the pinned CLI), the disk is full, the
    model endpoint does not answer. The message says what to do."""

    exit_code = 69  # EX_UNAVAILABLE (sysexits.h)
    label = "environment"


class Interrupted(SkillevoError):
    """SIGINT/SIGTERM: finished work was kept, the rest was stopped."""

    exit_code = 130
    label = "interrupted"


class InternalError(SkillevoError):
    """An exception no rule anticipated (a bug in skillevo): one line, and the work finished so far was kept."""

    exit_code = 70  # EX_SOFTWARE (sysexits.h)
    label = "internal error"


EXIT_CODES = {cls.label: cls.exit_code for cls in (BadInput, RolledBack, RollbackIncomplete, BrokenEnvironment,
                                                   Interrupted, InternalError)}


def one_line(text: str) -> str:
    """A message as a single line: a refusal must fit one terminal line's worth of grep."""
    return " ".join(str(text).split())
