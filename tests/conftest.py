"""Shared fixtures: the demo session's workspace and playbook (skillevo.simulator.demo)."""

from __future__ import annotations

import os
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


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(stat.parent.name))
    return kids


def process_tree(roots: set[int]) -> set[int]:
    """The processes `roots` started, theirs, and so on (the roots included)."""
    kids, seen, todo = _children(), set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo += kids.get(pid, [])
    return seen


def carrying(marker: str) -> set[int]:
    """Processes whose command line carries `marker`: a string only this test made (a tmp path, a uuid)."""
    return {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and marker in cmdline(int(p.name))}


SESSION_NEEDLES = ("/opt/claude/claude", "TCP-LISTEN:8787", "skillevo-session-")


def session_processes(*markers: str) -> list[str]:
    """Session processes this test run started that are still alive, as "<pid>: <command line>".

    Without markers: processes descending from this pytest process that look like a session (the CLI, the
    relay's loopback end, a session's private directory); never another checkout's demo running beside the
    tests. With markers (strings only this test made), any process carrying one, wherever it was reparented.
    """
    pids = set().union(*(carrying(m) for m in markers)) if markers else {
        pid for pid in process_tree({os.getpid()}) - {os.getpid()}
        if any(n in cmdline(pid) for n in SESSION_NEEDLES)}
    return [f"{pid}: {cmdline(pid)}" for pid in sorted(pids) if cmdline(pid)]


@pytest.fixture(scope="session")
def demo_incumbent(tmp_path_factory) -> tuple[Path, list[dict]]:
    """The demo's incumbent side with one run per arm, without noise (every run exact): (its directory, its rows).
    Costs ~15 s, paid once."""
    from skillevo.bench import plan, run_side
    from tests.bench_fixtures import ROOT, params

    out = tmp_path_factory.mktemp("demo-incumbent") / "bench-incumbent"
    p = params(runs=1, simulator={"noise": "none"})
    tasks = ROOT / "tasks/tasks.yaml"
    rows = run_side(plan("incumbent", tasks, ROOT / "skills", None, p), p, out, quiet=True)
    return out, rows


# The longest files first: `make test-full` hands whole files to its workers in collection order, so the
# generations start at once and the short files fill in around them, instead of one worker finishing them alone.
LONGEST_FIRST = ("test_pipeline.py", "test_pipeline_evolve.py", "test_pipeline_noise.py", "test_family.py",
                 "test_user_repo.py", "test_adoption.py", "test_pipeline_gateway.py", "test_auto_arm.py",
                 "test_bench_demo.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order
