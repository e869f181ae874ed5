"""Shared fixtures: a tiny git workspace with a `work` skill, and a playbook for it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from skillevo.simulator import playbook

PLANTED_KEY = "sk-ant-api03-PLANTED-test-key-0123456789abcdef"

SKILL = """---
name: work
description: Carry out a coding task in this repository.
---
# Work
Implement the requested change with the smallest edit that works.
Verify the change by running the check before you finish.
"""

PLAYBOOK = {
    "schema_version": 1,
    "instructions": [
        {"id": "survey", "phrase": "read every module of the package before editing"},
        {"id": "check", "phrase": "verify the change by running the check", "necessary": True},
    ],
    "tasks": [{
        "id": "greet",
        "match": "friendlier greeting",
        "sessions": {"work": [
            {"read": "pkg/greet.py"},
            {"when": "survey", "bash": "cat pkg/*.py"},
            {"edit": {"path": "pkg/greet.py", "old": '"hi"', "new": '"hello"'}},
            {"when": "check", "bash": "grep -c hello pkg/greet.py"},
        ]},
    }],
}

PROMPT = "Use the work skill for: make the friendlier greeting say hello"


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def make_workspace(root: Path, skill_text: str = SKILL) -> Path:
    ws = root / "ws"
    (ws / ".claude/skills/work").mkdir(parents=True)
    (ws / "pkg").mkdir()
    (ws / ".claude/skills/work/SKILL.md").write_text(skill_text)
    (ws / "pkg/greet.py").write_text('def greet():\n    return "hi"\n')
    (ws / "pkg/other.py").write_text("VALUE = 1\n" * 50)
    git(ws, "init", "-q")
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "start")
    return ws


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return make_workspace(tmp_path)


@pytest.fixture(scope="session")
def book() -> playbook.Playbook:
    return playbook.parse(PLAYBOOK, "tests/conftest.py")


def session_processes(*needles: str) -> list[str]:
    """Command lines of live processes that belong to a session (the CLI, the relay end, markers)."""
    needles = needles or ("/opt/claude/claude", "TCP-LISTEN:8787", "skillevo-session-")
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(n in cmd for n in needles):
            found.append(f"{proc.name}: {cmd}")
    return found
