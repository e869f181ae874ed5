"""No process of a killed bench outlives it: a sandbox dies with the process that started it, however that process
died (kill -9 included) and at whatever moment, even the one where bwrap's own --die-with-parent has not yet
taken hold. Each case runs tests/orphans.py, which kills a real host of a real bwrap sandbox and reports what
outlived it among its own descendants."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bwrap
ROOT = Path(__file__).resolve().parents[1]


def _kill_host(mode: str, tmp_path: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "tests.orphans", mode, str(tmp_path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def test_a_host_killed_while_bwrap_sets_up_leaves_nothing_and_runs_nothing(tmp_path):
    report = _kill_host("setup", tmp_path)
    assert report["started"], report
    assert report["survivors"] == [], report  # without the lifeline: bwrap's init, sh and both sleeps live on
    assert report["ran"] is False  # the launcher saw its host gone before the command started


@pytest.mark.parametrize("mode", ["running", "guardless"])
def test_a_host_killed_while_the_command_runs_leaves_nothing(mode, tmp_path):
    report = _kill_host(mode, tmp_path)
    assert report["started"] and report["ran"], report
    assert report["survivors"] == [], report


def test_the_launcher_adds_nothing_to_what_the_command_prints(tmp_path):
    """Its guard is killed at the end of every run; were it a job of the launcher's shell, bash would now and then
    report the kill on stderr (1 run in 100 alone, 1 in 4 with four at once), and the checks keep stderr: rows
    would differ from run to run."""
    from concurrent.futures import ThreadPoolExecutor

    from skillevo import sandbox

    def one(i: int) -> tuple[int | None, bytes, bytes]:
        ws = tmp_path / f"ws{i}"
        ws.mkdir()
        done = sandbox.run(sandbox.SandboxSpec(workspace=ws, private=tmp_path / f"private{i}", env=sandbox.base_env()),
                           ["/bin/sh", "-c", "echo out; echo err >&2"], timeout_s=30)
        return done.returncode, done.stdout, done.stderr_tail

    with ThreadPoolExecutor(4) as pool:
        outputs = list(pool.map(one, range(160)))
    assert [o for o in outputs if o != (0, b"out\n", b"err\n")] == []
