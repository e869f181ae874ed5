"""Shared fixtures: the demo session's workspace and playbook (skillevo.simulator.demo)."""

from __future__ import annotations

from pathlib import Path

import pytest

from skillevo.simulator import demo, playbook

PLANTED_KEY = "sk-ant-api03-PLANTED-test-key-0123456789abcdef"
PROMPT, SKILL, PLAYBOOK = demo.PROMPT, demo.SKILL, demo.PLAYBOOK
make_workspace = demo.make_workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return make_workspace(tmp_path)


@pytest.fixture(scope="session")
def book() -> playbook.Playbook:
    return demo.book()


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


@pytest.fixture(scope="session")
def demo_incumbent(tmp_path_factory) -> tuple[Path, list[dict]]:
    """The demo's incumbent side with one run per arm: (its directory, its rows). Costs ~15 s, paid once."""
    from skillevo.bench.side import plan, run_side
    from tests.bench_fixtures import ROOT, params

    out = tmp_path_factory.mktemp("demo-incumbent") / "bench-incumbent"
    p = params(runs=1)
    tasks = ROOT / "tasks/tasks.yaml"
    rows = run_side(plan("incumbent", tasks, ROOT / "skills", None, p), tasks, ROOT / "skills", None, p, out, quiet=True)
    return out, rows
