"""A reduced `make gate-study` (a few hundred decisions per cell), run against the gate's own code in CI.

The full study (2,000 decisions per cell) holds every null cell to alpha + 3 standard errors; here the same
targets are widened for the smaller sample. The sequential mode runs on a reduced grid (p in {1, 0.7}) to stay
within a minute.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys

from tests.bench_fixtures import ROOT

DECISIONS = 300
ALPHA = 0.05


def test_the_reduced_study_meets_its_targets(tmp_path):
    out = subprocess.run([sys.executable, "-m", "benchmarks.gate_study", "--mode", "fixed", "--decisions",
                          str(DECISIONS), "--out", str(tmp_path / "study")], cwd=ROOT, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    last = out.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"false_promotion_max=(\S+) power_20pct_runs10_cv035=(\S+) seed_false_promotion_max=(\S+)",
                         last)
    assert match, last
    x, y, z = (float(v) for v in match.groups())
    assert x <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / DECISIONS)
    assert y >= 0.8 - 3 * math.sqrt(0.8 * 0.2 / DECISIONS)
    assert z > 0.1  # the seed's rule, with resolution saturated, promotes a no-better candidate far too often
    assert {p.name for p in (tmp_path / "study").iterdir()} == {"table.md", "rates.csv", "rates.svg"}


SEQUENTIAL_DECISIONS = 200


def test_the_reduced_sequential_study_keeps_alpha_and_spends_fewer_runs(tmp_path):
    out = subprocess.run([sys.executable, "-m", "benchmarks.gate_study", "--mode", "sequential", "--reduced",
                          "--decisions", str(SEQUENTIAL_DECISIONS), "--out", str(tmp_path / "study")], cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    last = out.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"sequential_false_promotion_max=(\S+) sequential_power_20pct_runs10_cv035=(\S+) "
                         r"fixed_power_20pct_runs10_cv035=(\S+) sequential_runs_boundary_runs10_cv035=(\S+)", last)
    assert match, last
    x, y, fixed, runs = (float(v) for v in match.groups())
    se = math.sqrt(ALPHA * (1 - ALPHA) / SEQUENTIAL_DECISIONS)
    assert x <= ALPHA + 3 * se
    assert y >= 0.8 - 3 * math.sqrt(0.8 * 0.2 / SEQUENTIAL_DECISIONS)
    assert y >= fixed - 3 * math.sqrt(2 * fixed * (1 - fixed) / SEQUENTIAL_DECISIONS)  # little power lost
    assert runs < 8  # a no-better candidate mostly stops at an early look (of 10 runs)
    assert {p.name for p in (tmp_path / "study").iterdir()} == {"sequential.md", "sequential.csv"}
