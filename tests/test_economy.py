"""`make bench-economy`'s own arithmetic, run small: its fixed-runs comparator is drawn from the gate study's model
with the gate's own code, so a change to either that breaks the benchmark shows here, not after an hour of sessions
(it once went unnoticed: the study's simulate gained the sampling plan, the benchmark kept calling it without)."""

from __future__ import annotations

from benchmarks import economy
from skillevo.core import config
from tests.bench_fixtures import ROOT


def test_the_fixed_comparator_is_the_fewest_runs_that_match_the_sequential_power():
    runs, sequential, powers = economy.fixed_runs_for_equal_power(decisions=12)
    default = config.load(ROOT / "params.yaml")
    floor = -(-default.gate.min_total_runs // economy.GATE_TASKS)
    assert economy.RUNS == default.sampling.runs  # ours is the default schedule, not a copy of it
    assert 0 <= sequential <= 1 and min(powers) == floor and runs in powers
    assert all(power < sequential for n, power in powers.items() if n < runs)  # none fewer reached it
    assert powers[runs] >= sequential or runs == max(powers)
