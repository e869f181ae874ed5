"""Where the test by betting crosses, and what its stakes cost: `python -m benchmarks.crossing`.

On the gate study's headline world (a 20% saving a run, resolution 0.85, CV 0.35, 4 tasks, benchmarks/gate_model.py),
each simulated bench's 48 rounds are bet on whole, and the round at which the cost test and the resolution guard
first reach 1 / alpha is read off (no looks, no futility: the test alone). Three ways to stake: as the gate does
(learned from the design and the rounds before, skillevo.stats.betting), from the world's true means, rates and
spreads (an oracle no bench has), and the oracle with the cost test's stake limit (betting.COST_KAPPA) at 0.999.
The gap between the first two is what learning costs; between the last two, what the limit costs. Figures:
docs/gate.md (power).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from unittest import mock

from benchmarks.gate_model import CANDIDATE, INCUMBENT, TASKS, Cell, bench_for, sequential_plan
from skillevo.core import config, controls, sampling
from skillevo.stats import betting

CELL = Cell("20% cheaper", "interleaved", 48, p=0.85)


def _oracle(design: betting.Design) -> betting.Design:
    """The world's truth as a design: each task's mean cost, the cell's resolution and spread; the bench's caps."""
    return betting.Design({t: betting.TaskDesign(TASKS[t], CELL.p, (CELL.cv * TASKS[t]) ** 2, d.cap)
                           for t, d in design.tasks.items()}, design.saving)


def crossings(decisions: int, way: str, alpha: float) -> list[tuple[int | None, int | None]]:
    """(cost test, resolution guard) first crossing round per simulated bench, or None."""
    plan = sequential_plan(config.load("params.yaml").sampling, CELL.runs)
    rng = random.Random("crossing")  # every way bets on the same benches
    found = []
    for _ in range(decisions):
        rows, design = bench_for(CELL, plan, rng)
        rows = controls.settle(rows)
        tasks = list(design.tasks)
        blocks = [sampling.by_run([r for r in rows if r["task"] == t and r["arm"] == INCUMBENT],
                                  [r for r in rows if r["task"] == t and r["arm"] == CANDIDATE], "cost_usd")
                  for t in tasks]
        rounds = [list(r) for r in zip(*blocks, strict=True)]
        used = design if way == "learned" else _oracle(design)
        with mock.patch.object(betting, "PRIOR_ROUNDS", 2 if way == "learned" else 10 ** 9), \
                mock.patch.object(betting, "COST_KAPPA", 0.999 if way == "oracle, no limit" else betting.COST_KAPPA):
            cost, drop = betting.wealth(rounds, used), betting.drop_wealth(rounds, 0.2, used)
        found.append((cost.first_crossing(alpha), drop.first_crossing(alpha)))
    return found


def _summary(rounds: list[int | None]) -> str:
    crossed = [r for r in rounds if r is not None]
    if not crossed:
        return "never crossed"
    return (f"crossed {len(crossed) / len(rounds):.3f} by round {CELL.runs}, median round "
            f"{statistics.median(crossed):g}, mean {statistics.mean(crossed):.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.crossing", description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=1000, help="simulated benches [%(default)s]")
    args = parser.parse_args(argv)
    alpha = config.load("params.yaml").gate.alpha
    for way in ("learned", "oracle", "oracle, no limit"):
        found = crossings(args.decisions, way, alpha)
        print(f"{way}: cost test {_summary([c for c, _ in found])}; resolution guard "
              f"{_summary([d for _, d in found])}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
