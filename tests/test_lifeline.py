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
