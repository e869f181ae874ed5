"""The power preflight: what the configured runs can detect, and the runs each thing a promotion needs takes, from
the incumbent's own means, resolution and spread or a prior, before any candidate money is spent."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import yaml

from skillevo import stats
from skillevo.core import sampling
from skillevo.core.config import Policy, section
from skillevo.core.config import SamplingParams as Sampling
from skillevo.stages import preflight as stage
from tests.bench_fixtures import make_mini
from tests.gate_rows import INCUMBENT, bench, runs, write_side


def plan(**values) -> Sampling:
    return section(Sampling, "sampling", values, "test")


def noisy_rows(tasks: list[str], n: int, cv: float, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    sigma = math.sqrt(math.log(1 + cv * cv))
    return [r for i, t in enumerate(tasks)
            for r in runs(t, INCUMBENT, [round((1 + i) * math.exp(rng.gauss(0, sigma)), 6) for _ in range(n)])]


def test_the_spread_is_a_cv_pooled_within_cells_and_ignores_excluded_and_unmeasured_runs():
    rows = runs("a", INCUMBENT, [1.0, 3.0]) + runs("b", INCUMBENT, [10.0, 30.0])
    rows += runs("a", INCUMBENT, [1000.0, None], kinds=["infra-error", "verify-failed"])
    for i, row in enumerate(rows[4:], start=3):
        row["run"] = i
    cv, used = sampling.spread(rows, "cost_usd")
    assert used == 4 and cv == pytest.approx(math.sqrt(0.5))  # each cell: 0.5x and 1.5x its mean
    assert sampling.spread(runs("a", INCUMBENT, [1.0]), "cost_usd") is None


def test_the_per_resolved_power_model_matches_the_test_s_own_variance():
    # two tasks of mean 1 and 3, every run resolved, CV 0.3: only the cost terms count, weighted by dollars
    variance = stats.per_resolved_variance([(1.0, 1.0, 0.3), (3.0, 1.0, 0.3)])
    assert variance == pytest.approx((0.3 / 4) ** 2 + (0.9 / 4) ** 2)
    z = stats.detectable_per_resolved_pct(variance, 10, 0.04, 0.8)
    assert z == pytest.approx(100 * (1 - math.exp(-(1.7507 + 0.8416) * math.sqrt(2 * variance / 10))), rel=1e-3)
    n = stats.runs_for_saving(variance, z, 0.04, 0.8)
    assert n in (10, 11)  # the runs that detect z are the runs that were asked for
    assert stats.per_resolved_variance([(1.0, 0.0, 0.3)]) is None


FORTY = Policy.from_dict({"min_total_runs": 40})  # the figures these cases were built at


def test_the_incumbent_s_figures_give_the_runs_needed_and_warn_below_them():
    rows = noisy_rows(["g1", "g2", "g3", "g4", "e1"], 5, 0.35)
    result = sampling.preflight(rows, ["g1", "g2", "g3", "g4"], plan(runs=5), FORTY)
    assert result.spread_from == "incumbent (20 runs)"  # the evidence task e1 is not the gate's
    assert result.runs_needed["min_total_runs"] == 10 and result.runs_needed["resolution_bound"] == 4
    assert result.runs_needed["saving_20pct"] < result.runs_needed["min_improvement"]
    assert 10 < result.detectable_pct < 60
    assert any("below gate.min_total_runs 40: no candidate can be promoted; run at least 10 per task" in w
               for w in result.warnings)
    assert any("gate.min_improvement_pct 5% is below the saving 5 runs can detect" in w for w in result.warnings)
    enough = sampling.preflight(rows, ["g1", "g2", "g3", "g4"], plan(runs=10), FORTY)
    assert not any("below gate.min_total_runs" in w for w in enough.warnings)
    assert enough.detectable_pct < result.detectable_pct
    assert 0 <= result.planned["power"] < enough.planned["power"] <= 1  # the test by betting, by simulation
    assert result.planned["saving_pct"] == 20 and 1 <= enough.planned["mean_runs"] <= 10


def test_identical_runs_fall_back_to_the_prior_and_few_runs_are_called_out():
    rows = runs("g1", INCUMBENT, [1.0, 1.0, 1.0])
    result = sampling.preflight(rows, ["g1"], plan(runs=3, prior_cv=0.25), Policy.from_dict({}))
    assert (result.cv, result.spread_from) == (0.25, "prior (sampling.prior_cv)")
    assert any("cannot rule out a resolution drop of 20 points" in w and "run at least 14 per task" in w
               for w in result.warnings)
    assert sampling.preflight(rows, ["g1"], plan(runs=1), Policy.from_dict({})).detectable_pct is None


def test_the_stage_prints_and_writes_its_figures(tmp_path: Path, capsys):
    tasks_file = make_mini(tmp_path / "bench")
    write_side(tmp_path / "inc", bench("incumbent", {"cheat": "trivial", "greet": "trivial"}),
               noisy_rows(["cheat", "greet"], 4, 0.2))
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"arms": {"workflow": {"sessions": [{"skill": "work", "prompt": "{prompt}"}]}},
                                      "sampling": {"runs": 4}, "tasks": {"gate": ["cheat", "greet"]},
                                      "gate": {"min_total_runs": 40}}))
    out = tmp_path / "preflight.json"
    assert stage.main(["--incumbent", str(tmp_path / "inc"), "--tasks", str(tasks_file), "--params", str(params),
                       "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert printed.out.startswith("preflight: 4 runs per (task, arm) on 2 gate task(s) detect a saving per resolved")
    assert "runs needed per (task, arm): 20 for gate.min_total_runs" in printed.out
    assert "warning" in printed.err and "run at least 20 per task" in printed.err
    figures = json.loads(out.read_text())
    assert figures["tasks"] == 2 and figures["runs"] == 4 and figures["detectable_improvement_pct"] > 5
    assert figures["runs_needed"]["min_total_runs"] == 20
