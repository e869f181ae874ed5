"""The gate study's model of a bench: simulated result rows, decided by the gate's own code.

Per-run cost is lognormal with coefficient of variation CV around the task's base cost (times the candidate's
true ratio); resolution is Bernoulli(p); a scenario can take resolution from the candidate, make its failed
runs cheap, and lose a share of every arm's runs to harness faults. In the sequential mode the candidate's
runs are revealed look by look to the real skillevo.sampling.interim, and the gate judges the side it stopped.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from skillevo import sampling
from skillevo.config import Policy, SamplingParams
from skillevo.gate import decide_arm
from skillevo.results import MEDIAN_FIELDS, aggregate

INCUMBENT, CANDIDATE = "workflow", "candidate_workflow"
TASKS = {"t1": 0.5, "t2": 1.0, "t3": 2.0, "t4": 4.0}  # base cost per run, USD
P_VALUES, CVS, RUNS = (1.0, 0.9, 0.7), (0.2, 0.35, 0.5), (3, 5, 10)
# The sequential grid (it costs about as much again as the fixed one) leaves out 3 runs, where the first look
# at 3 runs is the only one and so the fixed design itself, and CV 0.35 but for the two headline cells: the two
# noise levels either side bracket it, and no null cell of the full grid was worst at CV 0.35.
SEQUENTIAL_RUNS, SEQUENTIAL_CVS = (5, 10), (0.2, 0.5)


@dataclass(frozen=True)
class Scenario:
    name: str
    ratio: float  # the candidate's true cost ratio on a run like the incumbent's
    drop: float = 0.0  # resolution the candidate loses
    fail_cost: float = 1.0  # cost of a candidate's failed run relative to a normal one
    excluded: float = 0.0  # share of every arm's runs lost to harness faults
    null: bool = False  # promoting it is a false promotion


SCENARIOS = (
    Scenario("boundary", 1.0, null=True),
    Scenario("dearer", 1.1, null=True),
    Scenario("10% cheaper", 0.9),
    Scenario("20% cheaper", 0.8),
    Scenario("regression", 0.8, drop=0.2, null=True),
    Scenario("missing data", 1.0, drop=0.2, fail_cost=0.4, excluded=0.05, null=True),
)
BY_NAME = {s.name: s for s in SCENARIOS}


@dataclass(frozen=True)
class Cell:
    scenario: str
    p: float
    cv: float
    runs: int


def rows_for(cell: Cell, rng: random.Random) -> list[dict]:
    """One simulated bench: both arms, every task, `cell.runs` runs each."""
    scenario = BY_NAME[cell.scenario]
    sigma = math.sqrt(math.log(1 + cell.cv ** 2))
    rows = []
    for task, base in TASKS.items():
        for arm in (INCUMBENT, CANDIDATE):
            candidate = arm == CANDIDATE
            p = max(0.0, cell.p - scenario.drop) if candidate else cell.p
            for run in range(1, cell.runs + 1):
                cost = base * math.exp(rng.gauss(-sigma * sigma / 2, sigma)) * (scenario.ratio if candidate else 1.0)
                resolved = rng.random() < p
                kind = None if resolved else "oracle-failed"
                if candidate and not resolved:
                    cost *= scenario.fail_cost
                if rng.random() < scenario.excluded:
                    kind, resolved = "infra-error", False
                rows.append(_row(task, arm, run, resolved, kind, cost))
    return rows


def _row(task: str, arm: str, run: int, resolved: bool, kind: str | None, cost: float) -> dict:
    row = dict.fromkeys(MEDIAN_FIELDS, 1.0)
    row.update(task=task, arm=arm, run=run, resolved=resolved, error_kind=kind, skill_invoked=True,
               cost_usd=round(cost, 6))
    return row


def decide(rows: list[dict], policy: Policy, sequential: dict | None = None, tasks=TASKS) -> str:
    cells = aggregate(rows, dict.fromkeys(tasks, "study"), [INCUMBENT, CANDIDATE])
    return decide_arm(cells, policy, benchmark_model="skillevo-study", incumbent_arm=INCUMBENT,
                      candidate_arm=CANDIDATE, sequential=sequential)["decision"]


def sequential_headline() -> tuple[Cell, Cell]:
    """The no-better candidate and the 20% saving at p = 1, CV 0.35, 10 runs: the figures the targets are on."""
    return Cell("boundary", 1.0, 0.35, 10), Cell("20% cheaper", 1.0, 0.35, 10)


def sequential_plan(plan: SamplingParams, runs: int) -> SamplingParams:
    """params.yaml's sampling plan with the looks on, at `runs` the most per (task, arm)."""
    return replace(plan, runs=runs, sequential=replace(plan.sequential, enabled=True))


def stopped(rows: list[dict], plan: SamplingParams) -> tuple[list[dict], dict]:
    """A sequential candidate side: the rows up to the look interim stopped at, and bench.json's record."""
    incumbent = [row for row in rows if row["arm"] == INCUMBENT]
    candidate = [row for row in rows if row["arm"] == CANDIDATE]
    planned = sampling.looks(plan)
    for look, runs in enumerate(planned, start=1):
        seen = [row for row in candidate if row["run"] <= runs]
        action = sampling.interim(incumbent, seen, {CANDIDATE: INCUMBENT}, look, plan).action
        if action != sampling.CONTINUE or look == len(planned):
            return incumbent + seen, sampling.record(plan, look, action)
    raise AssertionError("unreachable: the last look always stops")


@dataclass(frozen=True)
class SequentialRates:
    fixed: float  # the same benches decided whole (every run), as today
    spending: float  # stopped by interim, judged at the stopped look's spending boundary
    bonferroni: float  # the same stopped sides, judged at each look's spent alpha
    runs: float  # mean candidate runs per (task, arm) spent
    futility: float  # share of benches stopped early as futile
    early_promote: float  # share stopped early to promote


def simulate_sequential(job: tuple[Cell, int, dict, SamplingParams]) -> tuple[Cell, SequentialRates]:
    """Promotion rates of the fixed and the sequential design on the same simulated benches (paired)."""
    cell, decisions, default, plan = job
    rng = random.Random(f"sequential {cell}")
    plan = sequential_plan(plan, cell.runs)
    policy = Policy.from_dict(default)
    bonferroni = Policy.from_dict({**default, "look_boundary": "bonferroni"})
    totals = [0, 0, 0, 0, 0, 0]
    for _ in range(decisions):
        rows = rows_for(cell, rng)
        seen, record = stopped(rows, plan)
        early = record["stopped_at_look"] < len(record["looks"])
        for i, value in enumerate((decide(rows, policy) == "promote", decide(seen, policy, record) == "promote",
                                   decide(seen, bonferroni, record) == "promote",
                                   record["looks"][record["stopped_at_look"] - 1],
                                   early and record["reason"] == "futility",
                                   early and record["reason"] == "promote")):
            totals[i] += value
    return cell, SequentialRates(*(total / decisions for total in totals))


def simulate(job: tuple[Cell, int, dict, dict]) -> tuple[Cell, float, float]:
    """The promotion rate of both policies on the same simulated benches (paired)."""
    cell, decisions, default, seed = job
    rng = random.Random(f"{cell}")
    policies = Policy.from_dict(default), Policy.from_dict(seed)
    promoted = [0, 0]
    for _ in range(decisions):
        rows = rows_for(cell, rng)
        for i, policy in enumerate(policies):
            promoted[i] += decide(rows, policy) == "promote"
    return cell, promoted[0] / decisions, promoted[1] / decisions


def schedule(generations: int, schedules: int, policy: Policy, confirm: bool, cell: Cell) -> float:
    """`make evolve` on null candidates: the share of schedules that end in a (final) false promotion."""
    rng = random.Random(f"schedule {generations} {confirm} {cell}")
    false = 0
    for _ in range(schedules):
        for _ in range(generations):
            if decide(rows_for(cell, rng), policy) == "promote":
                if not confirm or decide(rows_for(cell, rng), policy) == "promote":
                    false += 1
                    break
    return false / schedules
