"""What the planned candidate side finds, by simulating it through the bench's own looks (the preflight's power).

A figure from a formula that leaves out the futility stops, the resolution guard, the minimum estimate and the
looks states more power than the schedule has (it stated 0.87 where `make gate-study` measured 0.68). So the
preflight runs the schedule itself: simulated blocks (lognormal costs, each run capped as the harness caps it, a
run at its cap unresolved at the cap), the candidate `saving` cheaper a run, judged look by look by
`skillevo.core.sampling.interim`, the function the bench stops on, with the bets the design sized.

The world each side is simulated in is not the design itself: five incumbent runs a task that all resolved read
as a resolution of 1, and a test tuned to exactly the world it meets finds more than the bench will (stated 0.81
against a measured 0.69 at resolution 0.85). Nor is it a world drawn at random from what the runs leave
plausible: near 0.8 the power curve bends down, so power averaged over uncertain worlds (an assurance) falls
below the power at the world itself (stated 0.754 and 0.749 where `make gate-study` measured 0.810 and 0.818).
Each side meets the `likely_world`: one resolution for every task at the Jeffreys posterior mean of the pooled
runs (twenty of twenty read 0.976, not 1), the pooled log spread, each task's mean at its estimate; the test keeps
the design's bets. Only the world is simulated; every rule is the bench's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import multiprocessing
import random
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from skillevo import stats
from skillevo.core import sampling
from skillevo.core.config import Policy, SamplingParams
from skillevo.core.results import is_excluded
from skillevo.files.errors import BadInput
from skillevo.stats import betting

DRAWS = 200  # simulated candidate sides per arm: a standard error of at most 0.035 on the stated power
CONTROL, CANDIDATE = "control", "candidate"


@dataclass(frozen=True)
class Evidence:
    """What the design rests on: the incumbent runs per gate task, and their pooled within-task variance of log cost
    (on logs, where a lognormal's spread is estimated without the raw CV's downward bias in the tail)."""

    runs: dict[str, int]
    log_variance: float

    @classmethod
    def of(cls, rows: Iterable[Mapping[str, Any]], design: betting.Design, arm: str, metric: str) -> Evidence:
        logs: dict[str, list[float]] = {task: [] for task in design.tasks}
        for row in rows:
            if row["arm"] == arm and row["task"] in logs and not is_excluded(row) and (row[metric] or 0) > 0:
                logs[row["task"]].append(math.log(float(row[metric])))
        squares = sum(sum((v - sum(values) / len(values)) ** 2 for v in values) for values in logs.values() if values)
        df = sum(max(len(values) - 1, 0) for values in logs.values())
        fallback = math.log1p(max(t.variance / (t.mean * t.mean) for t in design.tasks.values()))
        return cls({task: len(values) for task, values in logs.items()}, squares / df if df else fallback)


def likely_world(design: betting.Design, evidence: Evidence) -> betting.Design:
    """The world the incumbent's runs make likeliest, short of reading five resolved runs as certainty: one
    resolution for every task at the Jeffreys posterior mean of their pooled runs, the pooled log-spread, each
    task's mean at its estimate; the caps stay the design's (the harness enforces them). Pooled, because five runs
    a task say little about each task's own rate (per-task posteriors stated 0.64 where the bench found 0.78);
    where tasks do differ, one shared rate puts resolution variance on every task and mistunes the design's bets,
    so it should err low there (the study's tasks share one rate: argued, not measured)."""
    runs = {task: max(evidence.runs.get(task, 0), 1) for task in design.tasks}
    resolved = sum(t.rate * runs[task] for task, t in design.tasks.items())
    rate = (resolved + 0.5) / (sum(runs.values()) + 1)
    spread = math.expm1(evidence.log_variance)
    return betting.Design({task: betting.TaskDesign(t.mean, rate, t.mean * t.mean * spread, t.cap)
                           for task, t in design.tasks.items()}, design.saving)


def simulated_side(design: betting.Design, saving: float, runs: int, rng: random.Random) -> list[dict[str, Any]]:
    """One candidate side in the design's world: `runs` blocks of every task, the control and the candidate."""
    rows = []
    for task, t in design.tasks.items():
        sigma = math.sqrt(math.log1p(t.variance / (t.mean * t.mean))) if t.mean > 0 else 0.0
        for run in range(1, runs + 1):
            for arm, scale in ((CONTROL, 1.0), (CANDIDATE, 1.0 - saving)):
                cost = t.mean * scale * math.exp(rng.gauss(-sigma * sigma / 2, sigma))
                resolved, kind = rng.random() < t.rate, None
                if cost >= t.cap:
                    cost, resolved, kind = t.cap, False, "cost-cap"
                rows.append({"task": task, "arm": arm, "run": run, "resolved": resolved,
                             "error_kind": kind or (None if resolved else "oracle-failed"), "cost_usd": cost})
    return rows


def schedule_power(design: betting.Design, plan: SamplingParams, saving: float, draws: int = DRAWS,
                   seed: str = "", progress: bool = False, evidence: Evidence | None = None, workers: int = 1
                   ) -> tuple[float, float]:
    """The share of simulated sides the bench stops to promote (at a look, or at the last one when the test
    decided there), and the mean candidate runs per task they spent; each side in the `likely_world` when the
    `evidence` the design rests on is given, else in the design's own. Every side is drawn here, in order, from
    one seeded generator; `workers` processes only judge them, so the figures do not depend on how many."""
    if not plan.sequential.enabled:  # one look at sampling.runs: the bench's single decision
        plan = dataclasses.replace(plan, sequential=dataclasses.replace(plan.sequential, enabled=True,
                                                                       first=plan.runs))
    rng = random.Random(f"skillevo planned power {seed}")
    world = design if evidence is None else likely_world(design, evidence)
    sides = [simulated_side(world, saving, plan.runs, rng) for _ in range(draws)]
    judge = functools.partial(_judged, sides, plan=plan, design=design)
    with contextlib.ExitStack() as stack:
        outcomes: Iterable[tuple[bool, int]] = map(judge, range(draws))
        # forked workers inherit the sides and the judge, so only indices and verdicts cross the pipe (the stage's
        # params are proxies that do not pickle), and no module is imported again; only from a process with one
        # thread, since a thread holding a lock at the fork (tqdm's monitor for one) would hang the worker
        # (a worker that dies fails the stage: BrokenProcessPool, never a hang)
        if workers > 1 and draws > 1 and threading.active_count() == 1:
            stats.look_levels(sampling.looks(plan), plan.sequential.alpha)  # cached once here, not in every worker
            pool = stack.enter_context(ProcessPoolExecutor(min(workers, draws),
                                                           mp_context=multiprocessing.get_context("fork")))
            global _FORKED
            _FORKED = judge
            try:  # map submits every side at once: the workers are forked here, before the pool's own thread
                outcomes = pool.map(_judge_forked, range(draws), chunksize=max(1, draws // (4 * workers)))
            finally:
                _FORKED = None
        judged = list(tqdm(outcomes, total=draws, desc="preflight", unit="side", file=sys.stderr,
                           disable=not progress, mininterval=2))
    return sum(promoted for promoted, _ in judged) / draws, sum(runs for _, runs in judged) / draws


_FORKED: Callable[[int], tuple[bool, int]] | None = None  # the judge a forked worker inherits (set only to fork)


def _judge_forked(side: int) -> tuple[bool, int]:
    if _FORKED is None:
        raise RuntimeError("a preflight worker was started without the sides it judges")
    return _FORKED(side)


def _judged(sides: list[list[dict[str, Any]]], side: int, plan: SamplingParams, design: betting.Design
            ) -> tuple[bool, int]:
    """Whether the bench's looks promote one simulated side, and the runs a task they spent before stopping."""
    rows, planned = sides[side], sampling.looks(plan)
    for look, runs in enumerate(planned, start=1):
        so_far = [row for row in rows if row["run"] <= runs]
        action = sampling.interim([r for r in so_far if r["arm"] == CONTROL],
                                  [r for r in so_far if r["arm"] == CANDIDATE], {CANDIDATE: CONTROL}, look, plan,
                                  {CONTROL: design}).action
        if action != sampling.CONTINUE or look == len(planned):
            return action == sampling.PROMOTE, runs
    raise AssertionError("the last look always stops")


def planned_power(rows: Iterable[Mapping[str, Any]], gate_tasks: Iterable[str], plan: SamplingParams,
                  policy: Policy, draws: int = DRAWS, progress: bool = False, seed: str = "", workers: int = 1
                  ) -> dict[str, Any] | None:
    """The schedule's power for sampling.plan_saving_pct under the test by betting, at the incumbent side's
    measured resolution and spread (its hardest arm, by skillevo.stats.betting.growth), and the mean runs a task
    it spends. None when the gate does not test by betting or no arm can be designed."""
    if policy.policy != "per_resolved" or policy.test != "betting":
        return None
    rows, gate_tasks = list(rows), sorted(set(gate_tasks))
    designs = []
    for arm in sorted({row["arm"] for row in rows}):
        try:
            designs.append((arm, sampling.design(rows, gate_tasks, arm, plan, policy.metric)))
        except BadInput:
            continue
    if not designs:
        return None
    arm, design = min(designs, key=lambda item: betting.growth(item[1]))
    power, runs = schedule_power(design, plan, plan.plan_saving_pct / 100, draws, seed=f"{arm} {seed}",
                                 progress=progress, evidence=Evidence.of(rows, design, arm, policy.metric),
                                 workers=workers)
    return {"saving_pct": plan.plan_saving_pct, "power": round(power, 3), "mean_runs": round(runs, 1),
            "draws": draws, "arm": arm}

