"""The power preflight: what the configured runs can detect, and the runs each thing a promotion needs takes, from
the incumbent's own means, resolution and spread or a prior, before any candidate money is spent."""

from __future__ import annotations

import json
import math
import pickle
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from skillevo import stats
from skillevo.core import planned, sampling
from skillevo.core.config import Policy, section
from skillevo.core.config import SamplingParams as Sampling
from skillevo.stages import preflight as stage
from tests.bench_fixtures import make_mini
from tests.gate_rows import INCUMBENT, bench, runs, write_side


def plan(gate: dict | None = None, **values) -> Sampling:
    return section(Sampling, "sampling", values, "test", gate=gate)


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
    assert result.planned is None  # the stage adds the schedule's power (skillevo.core.planned)



BETTING = Policy.from_dict({"test": "betting", "min_total_runs": 8})


def _resolving(rows: list[dict], every: int) -> list[dict]:
    """`rows` with every `every`-th run unresolved (an oracle failure)."""
    for i, row in enumerate(rows):
        if i % every == every - 1:
            row.update(error_kind="oracle-failed", resolved=False)
    return rows


def _looks(runs: int, plan_saving_pct: float = 20, **sequential) -> Sampling:
    return plan(runs=runs, plan_saving_pct=plan_saving_pct, gate={"min_total_runs": 8},
                sequential={"enabled": True, "first": 4, "batch": 2, "futility_p_value": 1.0,
                            "futility_confidence": 0, **sequential})


def test_the_planned_power_is_the_schedule_run_through_the_benchs_own_looks():
    tasks = ["g1", "g2", "g3", "g4"]
    rows = _resolving(noisy_rows(tasks, 5, 0.35), 10)
    assert planned.planned_power(rows, tasks, _looks(16), Policy.from_dict({"test": "bootstrap"}), draws=4) is None
    free = planned.planned_power(rows, tasks, _looks(16, plan_saving_pct=30), BETTING, draws=30)
    assert free["saving_pct"] == 30 and free["draws"] == 30 and free["arm"] == INCUMBENT
    assert 0.2 < free["power"] < 0.9 and 4 <= free["mean_runs"] <= 16
    # the same simulated sides (one seed), with futility stops the schedule has: they can only take power away
    futile = planned.planned_power(rows, tasks, _looks(16, plan_saving_pct=30, futility_p_value=0.1), BETTING,
                                   draws=30)
    assert futile["power"] < free["power"] and futile["mean_runs"] < free["mean_runs"]
    fewer = planned.planned_power(rows, tasks, _looks(8, plan_saving_pct=30), BETTING, draws=30)
    assert fewer["power"] < free["power"]


def test_the_planned_power_is_stated_for_the_hardest_arm():
    easy = noisy_rows(["g1", "g2"], 5, 0.35)
    hard = _resolving(noisy_rows(["g1", "g2"], 5, 0.35, seed=1), 2)
    for row in hard:
        row["arm"] = "auto"
    found = planned.planned_power(easy + hard, ["g1", "g2"], _looks(8), BETTING, draws=10)
    assert found["arm"] == "auto"  # resolving half its runs, it needs the most


def test_five_runs_are_not_read_as_certainty_and_the_stated_power_says_so():
    tasks = ["g1", "g2", "g3", "g4"]
    rows = noisy_rows(tasks, 5, 0.35)  # every run resolves: a rate of 1, estimated from five runs
    design = sampling.design(rows, tasks, INCUMBENT, _looks(16), "cost_usd")
    few = planned.Evidence.of(rows, design, INCUMBENT, "cost_usd")
    assert few.runs == dict.fromkeys(tasks, 5) and 0.05 < few.log_variance < 0.3
    world = planned.likely_world(design, few)
    # twenty resolved runs of twenty (pooled over the tasks) read as 20.5 / 21, not 1; one rate for every task; the
    # spread is the pooled log-spread's; the means and the caps are the design's
    assert {world.tasks[t].rate for t in tasks} == {20.5 / 21}
    assert all(math.isclose(world.tasks[t].variance / world.tasks[t].mean ** 2, math.expm1(few.log_variance))
               for t in tasks)
    assert all((world.tasks[t].mean, world.tasks[t].cap) == (design.tasks[t].mean, design.tasks[t].cap)
               for t in tasks)
    # a task that resolved three runs of five pulls every task's rate down, to the pooled 18 of 20
    halved = sampling.design(_resolving(noisy_rows(tasks[:1], 5, 0.35), 2) + rows[5:], tasks, INCUMBENT,
                             _looks(16), "cost_usd")
    assert planned.likely_world(halved, few).tasks["g4"].rate == pytest.approx(18.5 / 21)
    many = planned.Evidence(dict.fromkeys(tasks, 100_000), few.log_variance)
    assert planned.likely_world(design, many).tasks["g1"].rate > 0.999
    # the stated power is the likely world's, not the design's: the same simulated draws (one seed) in the two
    # worlds end otherwise (how it compares with the power a bench finds is the gate study's preflight part)
    plan_ = _looks(16, plan_saving_pct=30)
    assumed = planned.schedule_power(design, plan_, 0.3, draws=40, seed="s")
    likely = planned.schedule_power(design, plan_, 0.3, draws=40, seed="s", evidence=few)
    assert likely != assumed and 0 < likely[0] < 1
    # the stage judges the sides on every core it may use, in forked processes when it runs one thread (as this
    # test's own process may not: a fresh one); the figures are the same for any number of them
    forked = subprocess.run(
        [sys.executable, "-c", "import pickle, sys, threading; from skillevo.core import planned; "
         "args = pickle.loads(sys.stdin.buffer.read()); assert threading.active_count() == 1; "
         "print(repr(planned.schedule_power(*args[:3], draws=40, seed='s', evidence=args[-1], workers=3)))"],
        input=pickle.dumps((design, plan_, 0.3, few)), capture_output=True, check=True)
    assert forked.stdout.decode().strip() == repr(likely)


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
                                      "gate": {"min_total_runs": 40, "test": "bootstrap"}}))
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
    assert figures["planned"] is None  # the bootstrap test: no schedule to simulate
    # under the test by betting the stage states the schedule's power, for the arm it read
    document = yaml.safe_load(params.read_text())
    document["gate"].update(test="betting", min_total_runs=8)
    document["sampling"].update(runs=8, sequential={"enabled": True, "first": 4, "batch": 2})
    params.write_text(yaml.safe_dump(document))
    assert stage.main(["--incumbent", str(tmp_path / "inc"), "--tasks", str(tasks_file), "--params", str(params),
                       "--out", str(out)]) == 0
    assert "the schedule finds a 20% saving with power" in capsys.readouterr().out
    found = json.loads(out.read_text())["planned"]
    assert found["draws"] == planned.DRAWS and found["arm"] == INCUMBENT and 0 <= found["power"] <= 1
    assert 4 <= found["mean_runs"] <= 8
    # run as DVC runs it, a process of one thread, the stage judges its sides in forked workers (its params are
    # proxies that must not cross a pipe) and states the same figures
    forked = tmp_path / "forked.json"
    subprocess.run([sys.executable, "-m", "skillevo.stages.preflight", "--incumbent", str(tmp_path / "inc"), "--tasks",
                    str(tasks_file), "--params", str(params), "--out", str(forked)], check=True, capture_output=True,
                   timeout=300)
    assert json.loads(forked.read_text())["planned"] == found
