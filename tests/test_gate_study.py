"""A reduced `make gate-study` (150 decisions per cell), run against the gate's own code in CI: every promotion
path's nulls, the tails at 3 tasks x 14 runs and resolution 0.8, order effects (with an unrandomised order as the
reference), faults, the default schedule's power for a 20% saving and the preflight's stated power beside it.

The full study (2,000 decisions per cell) holds every null cell to alpha + 3 standard errors; here the same target
is widened for the smaller sample, over the nulls that break convenient assumptions (a wider spread at the same
mean, a retry loop, savings on a cheap task paid for on dear ones, lost resolution, give-ups, drift, cache
windows, a hidden worst run), at 10 and 20 runs, in the design skillevo runs.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest

from tests.bench_fixtures import ROOT

DECISIONS = 150
ALPHA = 0.05


@pytest.mark.timeout(1500)  # about a minute on a quiet 2-core machine; a loaded one takes several
def test_the_reduced_study_keeps_every_null_within_its_target(tmp_path):
    out = subprocess.run([sys.executable, "-m", "benchmarks.gate_study", "--reduced", "--decisions", str(DECISIONS),
                          "--out", str(tmp_path / "study")], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    last = out.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"false_promotion_max=(\S+) power_20pct_real=(\S+) mean_runs_20pct_real=(\S+)", last)
    assert match, last
    x, y, n = float(match[1]), float(match[2]), float(match[3])
    assert x <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / DECISIONS), out.stdout
    assert y > 0.6 and n < 40, out.stdout  # the default schedule finds a 20% saving, well before its last look
    table = (tmp_path / "study" / "table.md").read_text()
    assert "| spread (null): same mean dollars, twice the log spread | " in table
    assert "| loop tail (null): the same mean dollars" in table and "| 3 x 14 | 0.8 |" in table
    assert "| resolves more, 10% dearer (null)" in table and "unrandomised" in table
    assert "## Sequential candidate runs (interleaved)" in table
    # the preflight states the power the schedule has, not more (its SE and the study's: about 0.04 each)
    over = re.search(r"the preflight's stated power less the study's, at 1 configuration\(s\): at most \*\*(\S+)\*\*",
                     table)
    assert over and float(over[1]) <= 0.15, table
    assert {p.name for p in (tmp_path / "study").iterdir()} == {"table.md", "rates.csv", "rates.svg"}
