"""The hidden-oracle guard: refuse text that carries hidden-oracle bytes, wherever it is about to go.

The proposer must never see the hidden tests (the evidence bundle is checked), and no skill may carry them
(a frozen overlay is checked): either way a skill could teach to the test. One guard serves both, so the two
checks cannot drift apart.

Refused: a canary line (any line with CANARY_MARK), any hex token of 16+ characters from a canary line even
on its own, and any oracle line (surrounding whitespace stripped) longer than ORACLE_LINE_MIN characters
anywhere in the text, also inside a longer line: a copied line keeps its bytes behind a Markdown bullet, a
quote, a diff marker, a Read tool's line number or a pytest `E   ` prefix. Shorter lines are too common
(`import pytest`) to mean anything. JSON is also checked string by string, so a line inside an escaped
JSON string is found too. Lines the agent sees anyway (the task's prompt, commands, pinned target tree)
are exempt: they are not hidden. Canaries never are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from skillevo.core import tasks as tasks_mod

CANARY_MARK = "skillevo-oracle-canary"
ORACLE_LINE_MIN = 20
_HEX_TOKEN = re.compile(r"[0-9a-fA-F]{16,}")


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


class OracleGuard:
    def __init__(self, oracle_files: Iterable[bytes], visible: Iterable[bytes] = ()):
        self.lines: set[str] = set()
        self.canaries: set[str] = set()
        for data in oracle_files:
            for line in data.decode("utf-8", errors="replace").splitlines():
                text = line.strip()
                if CANARY_MARK in text:
                    self.canaries.add(text)
                    self.canaries.update(_HEX_TOKEN.findall(text))
                if len(text) > ORACLE_LINE_MIN:
                    self.lines.add(text)
        for data in visible:
            if not self.lines:
                break
            self.lines.difference_update(line.strip() for line in data.decode("utf-8", errors="replace").splitlines())
        self._ordered = sorted(self.lines)

    @classmethod
    def for_tasks(cls, tasks: Iterable[tasks_mod.Task], *, exempt_visible: bool = True) -> OracleGuard:
        """The guard for every oracle file of `tasks`; with exempt_visible, lines the agent sees are exempt.

        Oracle authors keep evidence rich by making their own lines distinctive (the demo oracles tag their
        imports with a comment).
        """
        tasks = list(tasks)
        oracle = [data for task in tasks for _, data in task.oracle_files]
        if not exempt_visible:
            return cls(oracle)
        return cls(oracle, (data for task in tasks for data in tasks_mod.visible_texts(task)))

    def check_text(self, text: str) -> str | None:
        """None if the text is clean, else why it is not (never quoting the oracle)."""
        if CANARY_MARK in text or any(c in text for c in self.canaries):
            return "carries a hidden oracle's canary"
        if any(line in text for line in self._ordered):
            return "carries a line of a hidden oracle file"
        return None

    def check_value(self, value: Any) -> str | None:
        for text in _strings(value):
            reason = self.check_text(text)
            if reason:
                return reason
        return None

    def check_file(self, path: str, data: bytes) -> str | None:
        text = data.decode("utf-8", errors="replace")
        reason = self.check_text(text)
        if reason:
            return reason
        if path.endswith(".jsonl"):
            docs = text.splitlines()
        elif path.endswith(".json"):
            docs = [text]
        else:
            return None
        for doc in docs:
            try:
                value = json.loads(doc)
            except ValueError:
                continue  # its raw lines were checked above
            reason = self.check_value(value)
            if reason:
                return reason
        return None
