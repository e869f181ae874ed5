"""The power preflight: what the configured runs can detect, from the incumbent's own spread or a prior."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import yaml

from skillevo import sampling, stats
from skillevo.config import Policy, section
from skillevo.config import SamplingParams as Sampling
from stages import preflight as stage
from tests.bench_fixtures import make_mini
from tests.gate_rows import INCUMBENT, bench, runs, write_side


def plan(**values) -> Sampling:
    return section(Sampling, "sampling", values, "test")


def noisy_rows(tasks: list[str], n: int, sd: float, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [r for t in tasks for r in runs(t, INCUMBENT, [round(math.exp(rng.gauss(0, sd)), 6) for _ in range(n)])]


def test_the_spread_is_pooled_within_cells_and_ignores_excluded_and_unmeasured_runs():
    rows = runs("a", INCUMBENT, [1.0, math.e]) + runs("b", INCUMBENT, [10.0, 10.0 * math.e])
    rows += runs("a", INCUMBENT, [1000.0, None], kinds=["infra-error", "verify-failed"])
    for i, row in enumerate(rows[4:], start=3):
        row["run"] = i
    log_sd, used = sampling.spread(rows, "cost_usd")
    assert used == 4 and log_sd == pytest.approx(math.sqrt(0.5))  # each cell: logs 0 and 1 apart
    assert sampling.spread(runs("a", INCUMBENT, [1.0]), "cost_usd") is None


def test_the_incumbent_s_spread_gives_the_detectable_improvement_and_warns_below_it():
    rows = noisy_rows(["g1", "g2", "g3", "g4", "e1"], 5, 0.3)
    result = sampling.preflight(rows, ["g1", "g2", "g3", "g4"], plan(runs=5), Policy.from_dict({}))
    assert result.spread_from == "incumbent (20 runs)"  # the evidence task e1 is not the gate's
    expected = stats.detectable_improvement_pct(result.log_sd, 4, 5, 0.04, 0.8)
    assert result.detectable_pct == pytest.approx(expected) and 10 < expected < 60
    assert any("gate.min_improvement_pct 5% is below the improvement 5 runs can detect" in w for w in result.warnings)
    assert result.drop_runs_needed == 14 and not any("resolution drop" in w for w in result.warnings)


def test_identical_runs_fall_back_to_the_prior_and_few_runs_are_called_out():
    rows = runs("g1", INCUMBENT, [1.0, 1.0, 1.0])
    result = sampling.preflight(rows, ["g1"], plan(runs=3, prior_log_sd=0.25), Policy.from_dict({}))
    assert (result.log_sd, result.spread_from) == (0.25, "prior (sampling.prior_log_sd)")
    assert any("3 runs on 1 gate task(s) are 3 runs per arm" in w and "fewer than 14" in w for w in result.warnings)
    one = sampling.preflight(rows, ["g1"], plan(runs=1), Policy.from_dict({}))
    assert one.detectable_pct is None and "leaves no degrees of freedom" in one.warnings[0]


def test_the_stage_prints_and_writes_its_figures(tmp_path: Path, capsys):
    tasks_file = make_mini(tmp_path / "bench")
    write_side(tmp_path / "inc", bench("incumbent", {"cheat": "trivial", "greet": "trivial"}),
               noisy_rows(["cheat", "greet"], 4, 0.2))
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"arms": {"workflow": {"sessions": [{"skill": "work", "prompt": "{prompt}"}]}},
                                      "sampling": {"runs": 4}, "tasks": {"gate": ["cheat", "greet"]}}))
    out = tmp_path / "preflight.json"
    assert stage.main(["--incumbent", str(tmp_path / "inc"), "--tasks", str(tasks_file), "--params", str(params),
                       "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert printed.out.startswith("preflight: 4 runs on 2 gate task(s) detect an improvement of ")
    assert "warning" in printed.err and "raise sampling.runs" in printed.err
    figures = json.loads(out.read_text())
    assert figures["tasks"] == 2 and figures["runs"] == 4 and figures["detectable_improvement_pct"] > 5
