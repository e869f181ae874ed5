"""The gate study's model of a bench: simulated result rows in time, decided by the gate's own code.

Four tasks (base cost 0.5, 1, 2 and 4 USD a run), per-run cost lognormal with coefficient of variation CV around
the task's base, resolution Bernoulli(p). A scenario changes the candidate (its cost per run per task, its spread,
a retry loop in a share of its runs, give-ups, lost resolution) and the world the bench is measured in (drift
between measuring moments, an effect per task and moment, prompt-cache warm or cold windows of consecutive
cells, runs lost to harness faults). Every scenario's truth is stated in the user's estimand, the candidate's
dollars per resolved task over the task set relative to the incumbent's (`truth`): a null is one whose truth is
not below 1, so promoting it is false.

Two bench designs:
- `interleaved` (what skillevo runs, docs/gate.md): the candidate's gate runs and contemporaneous control runs of
  the incumbent in one measuring moment, in blocks of (task, run), the two arms in random order within a block;
- `separate` (the design before it): the incumbent side measured at one moment, task after task, and the
  candidate side at another.
Every cell of a bench gets exp(drift of its moment + the (task, moment) effect + its window's warm effect).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, fields, replace

from skillevo.core import controls, planned, sampling
from skillevo.core.config import BenchParams, Policy, SamplingParams
from skillevo.core.results import MEDIAN_FIELDS, aggregate
from skillevo.gate import decide_arm
from skillevo.stats import betting

INCUMBENT, CANDIDATE = "workflow", "candidate_workflow"
TASKS = {"t1": 0.5, "t2": 1.0, "t3": 2.0, "t4": 4.0}  # base cost per run, USD
RUNS = (5, 10, 20)
DESIGNS = ("interleaved", "separate", "unrandomised")
BASE_P, BASE_CV = 0.9, 0.35
WINDOW = 4  # consecutive cells that share a prompt cache state
RERUN_PCT = next(f.default for f in fields(BenchParams) if f.name == "fault_reruns_pct")  # the bench's default
GIVE_UP_COST = 0.1  # a run that gives up at once still pays its first turns: this share of its task's base


@dataclass(frozen=True)
class Scenario:
    name: str
    ratio: float = 1.0  # the candidate's cost per run relative to the incumbent's (its median, with the spread)
    task_ratio: tuple[float, ...] | None = None  # per task instead of ratio
    spread: float = 1.0  # the candidate's sd of log cost relative to the incumbent's, mean dollars kept
    drop: float = 0.0  # resolution (points / 100) the candidate loses
    retry: tuple[float, float, float] | None = None  # (share of the candidate's runs, lowest, highest) loop factor
    give_up: float = 0.0  # share of the candidate's runs that stop at once, unresolved
    fail_cost: float = 1.0  # a failed candidate run's cost relative to a normal one
    drift: float = 0.0  # sd of log cost shifted per measuring moment
    task_moment: float = 0.0  # sd of log cost shifted per (task, moment)
    warm: float = 0.0  # log cost a warm window saves (half the windows are warm)
    excluded: float = 0.0  # share of every arm's runs lost to harness faults
    blind: bool = False  # those faults strike before the model answers (the bench measures their block again)
    long_faults: float = 0.0  # P(a run is lost to a fault) per unit of its cost relative to its task's base
    exclude_costliest: bool = False  # the candidate's costliest run per task turns into an excluded row
    warm_follow: float = 0.0  # log cost a cell saves when the cell before it ran the same task (a warm cache)
    what: str = ""  # one line for the table


SCENARIOS = (
    Scenario("boundary", what="the candidate is the incumbent"),
    Scenario("dearer", ratio=1.1, what="10% dearer per run"),
    Scenario("spread", spread=2.0, what="same mean dollars, twice the log spread"),
    Scenario("retry loop", ratio=0.8, retry=(0.08, 4.0, 6.0), what="median 20% lower, 8% of runs in a 4-6x loop"),
    Scenario("cheap task only", task_ratio=(0.6, 1.1, 1.1, 1.1),
             what="40% cheaper on the cheapest task, 10% dearer on the other three"),
    Scenario("less resolution", ratio=0.9, drop=0.1, what="10 points less resolution, 10% cheaper per run"),
    Scenario("gives up", give_up=0.05, what="gives up at once on 5% of runs"),
    Scenario("regression", ratio=0.8, drop=0.2, what="20% cheaper per run, 20 points less resolution"),
    Scenario("missing data", drop=0.2, fail_cost=0.4, excluded=0.05,
             what="20 points less resolution, failed runs at 40% cost, 5% of runs lost to faults"),
    Scenario("side drift 0.05", drift=0.05, what="the candidate is the incumbent; log-sd 0.05 between moments"),
    Scenario("side drift 0.1", drift=0.1, what="the candidate is the incumbent; log-sd 0.1 between moments"),
    Scenario("task x moment 0.1", task_moment=0.1,
             what="the candidate is the incumbent; log-sd 0.1 per (task, moment)"),
    Scenario("warm or cold 0.15", warm=0.15, what="the candidate is the incumbent; windows of 4 cells warm or cold"),
    Scenario("hides its worst run", exclude_costliest=True,
             what="the candidate is the incumbent but its costliest run per task is excluded"),
    Scenario("faults hit long runs", ratio=0.8, retry=(0.08, 4.0, 6.0), long_faults=0.05,
             what="the retry loop, with a harness fault 5% per base cost of a run (loops die most)"),
    Scenario("resolves more, as dear", ratio=1 / BASE_P, drop=BASE_P - 1,
             what="resolves every task (15 points more) at 1/0.85 the cost per run: as dear per resolved task"),
    Scenario("resolves more, 10% dearer", ratio=1.1 / BASE_P, drop=BASE_P - 1,
             what="resolves every task (15 points more), 10% dearer per resolved task"),
    Scenario("loop tail", ratio=1 / 1.5, retry=(0.1, 4.0, 8.0),
             what="the same mean dollars, a third cheaper a run but 10% of runs loop at 4-8x"),
    Scenario("warm after the same task 0.3", warm_follow=0.3,
             what="the candidate is the incumbent; a cell after one of its own task is 26% cheaper (a warm cache)"),
    Scenario("20% cheaper, 10% faults", ratio=0.8, excluded=0.1, blind=True,
             what="20% cheaper per run; 10% of every arm's runs lost to faults before the model answered"),
    Scenario("20% cheaper, 10% late faults", ratio=0.8, excluded=0.1,
             what="20% cheaper per run; 10% of every arm's runs lost to faults after the run spent its cost"),
    Scenario("blind faults", excluded=0.1, blind=True,
             what="the candidate is the incumbent; 10% of every arm's runs lost before the model answered"),
    Scenario("10% cheaper", ratio=0.9, what="10% cheaper per run"),
    Scenario("20% cheaper", ratio=0.8, what="20% cheaper per run"),
)
BY_NAME = {s.name: s for s in SCENARIOS}


@dataclass(frozen=True)
class Cell:
    scenario: str
    design: str
    runs: int
    p: float = BASE_P
    cv: float = BASE_CV
    tasks: int = len(TASKS)  # the first this many of TASKS

    @property
    def task_set(self) -> dict[str, float]:
        return dict(list(TASKS.items())[:self.tasks])


def truth(scenario: Scenario, p: float = BASE_P, cv: float = BASE_CV, draws: int = 400_000) -> float:
    """The candidate's dollars per resolved task relative to the incumbent's, by a large seeded simulation of its
    runs (faults, drift and windows do not change what a run costs the team on average)."""
    rng = random.Random(f"truth {scenario.name} {p} {cv}")
    spent = resolved = 0.0
    per_task = draws // len(TASKS)
    for index, base in enumerate(TASKS.values()):
        for _ in range(per_task):
            cost, ok = _candidate_run(scenario, index, base, p, _sigma(cv), rng)
            spent += cost
            resolved += ok
    incumbent = sum(TASKS.values()) / (len(TASKS) * p)
    return (spent / resolved) / incumbent


def is_null(scenario: Scenario, p: float = BASE_P, cv: float = BASE_CV) -> bool:
    return truth(scenario, p, cv, draws=100_000) >= 0.995


def _sigma(cv: float) -> float:
    return math.sqrt(math.log(1 + cv * cv))


def _lognormal(rng: random.Random, sigma: float) -> float:
    return math.exp(rng.gauss(-sigma * sigma / 2, sigma))


def _candidate_run(s: Scenario, index: int, base: float, p: float, sigma: float, rng: random.Random
                   ) -> tuple[float, bool]:
    ratio = s.task_ratio[index] if s.task_ratio else s.ratio
    cost = base * ratio * _lognormal(rng, sigma * s.spread)
    ok = rng.random() < max(0.0, p - s.drop)
    if s.retry and rng.random() < s.retry[0]:
        cost *= rng.uniform(s.retry[1], s.retry[2])
    if s.give_up and rng.random() < s.give_up:
        cost, ok = base * GIVE_UP_COST, False
    if not ok:
        cost *= s.fail_cost
    return cost, ok


@dataclass
class _World:
    """The measuring moments of one simulated bench and what they shift, drawn once per bench."""

    scenario: Scenario
    rng: random.Random
    drift: dict[str, float] = field(default_factory=dict)
    task: dict[tuple[str, str], float] = field(default_factory=dict)
    window: dict[tuple[str, int], float] = field(default_factory=dict)

    def shift(self, moment: str, task: str, slot: int) -> float:
        s, rng = self.scenario, self.rng
        if moment not in self.drift:
            self.drift[moment] = rng.gauss(0, s.drift) if s.drift else 0.0
        if (task, moment) not in self.task:
            self.task[(task, moment)] = rng.gauss(0, s.task_moment) if s.task_moment else 0.0
        key = (moment, slot // WINDOW)
        if key not in self.window:
            self.window[key] = -s.warm if s.warm and rng.random() < 0.5 else 0.0
        return self.drift[moment] + self.task[(task, moment)] + self.window[key]


def schedule(design: str, runs: int, rng: random.Random, tasks: list[str] | None = None
             ) -> list[tuple[str, str, int, str, int]]:
    """Every cell of one bench as (task, arm, run, moment, slot), in the order the cells are measured;
    `unrandomised` is the interleaved design with the control always first in its block (a reference only)."""
    tasks = list(tasks or TASKS)
    if design == "separate":
        incumbent = [(t, INCUMBENT, r) for t in tasks for r in range(1, runs + 1)]
        candidate = [(t, CANDIDATE, r) for t in tasks for r in range(1, runs + 1)]
        return ([(t, a, r, "incumbent", i) for i, (t, a, r) in enumerate(incumbent)]
                + [(t, a, r, "candidate", i) for i, (t, a, r) in enumerate(candidate)])
    order = []
    for r in range(1, runs + 1):
        blocks = tasks[:]
        rng.shuffle(blocks)
        for t in blocks:
            arms = [INCUMBENT, CANDIDATE]
            if design != "unrandomised":
                rng.shuffle(arms)
            order += [(t, a, r) for a in arms]
    return [(t, a, r, "candidate", i) for i, (t, a, r) in enumerate(order)]


def incumbent_rows(cell: Cell, plan: SamplingParams, rng: random.Random) -> list[dict]:
    """The incumbent side, measured at its own moment before the candidate's bench: what the design is sized by."""
    sigma, world = _sigma(cell.cv), _World(BY_NAME[cell.scenario], rng)
    rows = []
    for slot, (task, run) in enumerate((t, r) for t in cell.task_set for r in range(1, plan.incumbent_runs + 1)):
        cost = TASKS[task] * _lognormal(rng, sigma) * math.exp(world.shift("incumbent side", task, slot))
        ok = rng.random() < cell.p
        rows.append(_row(task, INCUMBENT, run, ok, None if ok else "oracle-failed", cost))
    return rows


def bench_for(cell: Cell, plan: SamplingParams, rng: random.Random) -> tuple[list[dict], betting.Design]:
    """One simulated generation: the incumbent side, the design the gate draws from it, and the candidate side's
    rows under that design's cost caps (a run at its cap stops there, unresolved: the harness's rule)."""
    design = sampling.design(incumbent_rows(cell, plan, rng), cell.task_set, INCUMBENT, plan, "cost_usd")
    return rows_for(cell, rng, {t: d.cap for t, d in design.tasks.items()},
                    sampling.looks(plan) if plan.sequential.enabled else None), design


def rows_for(cell: Cell, rng: random.Random, caps: dict[str, float] | None = None,
             looks: tuple[int, ...] | None = None) -> list[dict]:
    """One simulated bench: both arms, every task, `cell.runs` runs each, measured in `cell.design`'s order. An
    interleaved bench measures again, inside each of its `looks`, the blocks a fault spoiled before the model
    answered, as the bench does (skillevo.core.controls, params bench.fault_reruns_pct)."""
    s = BY_NAME[cell.scenario]
    sigma, world = _sigma(cell.cv), _World(s, rng)
    index = {t: i for i, t in enumerate(TASKS)}
    rows: list[dict] = []
    previous: list[str | None] = [None]

    def measure(task: str, arm: str, run: int, moment: str, slot: int, replaces: int | None = None) -> None:
        base = TASKS[task]
        if arm == CANDIDATE:
            cost, ok = _candidate_run(s, index[task], base, cell.p, sigma, rng)
        else:
            cost, ok = base * _lognormal(rng, sigma), rng.random() < cell.p
        cost *= math.exp(world.shift(moment, task, slot) - (s.warm_follow if previous[0] == task else 0.0))
        previous[0] = task
        kind = None if ok else "oracle-failed"
        if caps is not None and cost >= caps[task]:
            cost, ok, kind = caps[task], False, "cost-cap"
        lost = rng.random() < s.excluded or (s.long_faults and rng.random() < s.long_faults * cost / base)
        row = _row(task, arm, run, ok, kind, cost)
        if lost:
            row.update(error_kind="infra-error", resolved=False)
            if s.blind and not s.long_faults:
                row.update(dict.fromkeys(MEDIAN_FIELDS, 0.0), cost_usd=None)
        rows.append({**row, "replaces": replaces})

    order = schedule(cell.design, cell.runs, rng, list(cell.task_set))
    done, slot, used, blocks = 0, len(order), 0, 0
    latest = dict.fromkeys(cell.task_set, cell.runs)
    for runs in (looks or (cell.runs,)):
        for item in order:
            if done < item[2] <= runs:
                measure(*item)
        look = {(t, r) for t in cell.task_set for r in range(done + 1, runs + 1)}
        blocks += len(look)
        while cell.design != "separate":
            todo = [b for b in controls.spoiled(rows) if b in look][:max(controls.rerun_budget(
                RERUN_PCT, blocks) - used, 0)]
            if not todo:
                break
            used += len(todo)
            for task, replaced in todo:
                latest[task] += 1
                look.add((task, latest[task]))
                arms = [INCUMBENT, CANDIDATE]
                rng.shuffle(arms)
                for arm in arms:
                    measure(task, arm, latest[task], "candidate", slot, replaced)
                    slot += 1
        done = runs
    if s.exclude_costliest:
        for task in cell.task_set:
            mine = [row for row in rows if row["task"] == task and row["arm"] == CANDIDATE]
            worst = max(mine, key=lambda row: row["cost_usd"] or 0.0)
            worst.update(error_kind="infra-error", resolved=False)
    return rows


def _row(task: str, arm: str, run: int, resolved: bool, kind: str | None, cost: float) -> dict:
    row = dict.fromkeys(MEDIAN_FIELDS, 1.0)
    row.update(task=task, arm=arm, run=run, resolved=resolved, error_kind=kind, skill_invoked=True,
               cost_usd=round(cost, 6))
    return row


def decide(rows: list[dict], policy: Policy, sequential: dict | None = None, tasks=TASKS,
           design: betting.Design | None = None) -> str:
    """The gate's decision on a bench's rows, re-run blocks in the place of the ones they replace (as the gate
    reads a candidate side: skillevo.core.controls.settle)."""
    cells = aggregate(controls.settle(rows), dict.fromkeys(sorted({row["task"] for row in rows}), "study"),
                      [INCUMBENT, CANDIDATE])
    return decide_arm(cells, policy, benchmark_model="skillevo-study", incumbent_arm=INCUMBENT,
                      candidate_arm=CANDIDATE, sequential=sequential,
                      design=design if policy.policy == "per_resolved" else None)["decision"]


def simulate(job: tuple[Cell, int, tuple[dict, ...], SamplingParams]) -> tuple[Cell, tuple[float, ...]]:
    """The promotion rate of each policy (per_resolved first) on the same simulated benches (paired)."""
    cell, decisions, policies, plan = job
    rng = random.Random(f"{cell}")
    chosen = [Policy.from_dict(p) for p in policies]
    promoted = [0] * len(chosen)
    for _ in range(decisions):
        rows, design = bench_for(cell, plan, rng)
        for i, policy in enumerate(chosen):
            promoted[i] += decide(rows, policy, design=design) == "promote"
    return cell, tuple(n / decisions for n in promoted)


# sequential candidate runs ------------------------------------------------------------------------------
def sequential_plan(plan: SamplingParams, runs: int) -> SamplingParams:
    """params.yaml's sampling plan with the looks on, at `runs` the most per (task, arm)."""
    return replace(plan, runs=runs, sequential=replace(plan.sequential, enabled=True))


def stopped(rows: list[dict], plan: SamplingParams, design: betting.Design | None = None
            ) -> tuple[list[dict], dict]:
    """A sequential interleaved bench: both arms' rows up to the look interim stopped at, and bench.json's record."""
    planned = sampling.looks(plan)
    settled = controls.settle(rows)
    for look, runs in enumerate(planned, start=1):
        seen = [row for row in settled if row["run"] <= runs]
        incumbent = [row for row in seen if row["arm"] == INCUMBENT]
        candidate = [row for row in seen if row["arm"] == CANDIDATE]
        action = sampling.interim(incumbent, candidate, {CANDIDATE: INCUMBENT}, look, plan,
                                  None if design is None else {INCUMBENT: design}).action
        if action != sampling.CONTINUE or look == len(planned):
            return seen, sampling.record(plan, look, action)
    raise AssertionError("unreachable: the last look always stops")


@dataclass(frozen=True)
class SequentialRates:
    fixed: float  # the same benches decided whole (every run)
    spending: float  # stopped by interim, judged at the stopped look's spending boundary
    runs: float  # mean candidate runs per (task, arm) spent
    futility: float  # share of benches stopped early as futile
    early_promote: float  # share stopped early to promote


def simulate_sequential(job: tuple[Cell, int, dict, SamplingParams]) -> tuple[Cell, SequentialRates]:
    """Promotion rates of the fixed and the sequential design on the same simulated interleaved benches."""
    cell, decisions, default, plan = job
    rng = random.Random(f"sequential {cell}")
    plan = sequential_plan(plan, cell.runs)
    policy = Policy.from_dict(default)
    totals = [0, 0, 0, 0, 0]
    for _ in range(decisions):
        rows, design = bench_for(cell, plan, rng)
        seen, record = stopped(rows, plan, design)
        early = record["stopped_at_look"] < len(record["looks"])
        for i, value in enumerate((decide(rows, policy, design=design) == "promote",
                                   decide(seen, policy, record, design=design) == "promote",
                                   record["looks"][record["stopped_at_look"] - 1],
                                   early and record["reason"] == "futility",
                                   early and record["reason"] == "promote")):
            totals[i] += value
    return cell, SequentialRates(*(total / decisions for total in totals))


def schedule_rate(job: tuple[int, int, dict, bool, Cell, SamplingParams]) -> tuple[tuple[int, bool], float]:
    """`make evolve` on null candidates: the share of schedules of `generations` that end in a false promotion,
    with or without evolve's confirmation by a fresh replicate."""
    generations, schedules, default, confirm, cell, plan = job
    policy = Policy.from_dict(default)
    rng = random.Random(f"schedule {generations} {confirm} {cell}")
    false = 0
    for _ in range(schedules):
        for _ in range(generations):
            rows, design = bench_for(cell, plan, rng)
            if decide(rows, policy, design=design) == "promote":
                again, design = bench_for(cell, plan, rng)
                if not confirm or decide(again, policy, design=design) == "promote":
                    false += 1
                    break
    return (generations, confirm), false / schedules


def preflight_power(job: tuple[Cell, int, int, dict, SamplingParams]) -> tuple[Cell, tuple[float, float]]:
    """What the preflight states for a cell's world (skillevo.core.planned.planned_power, the stage's own call),
    averaged over `incumbents` simulated incumbent sides it reads: its power and mean runs a task, to set beside
    the power the study measures for the same cell."""
    cell, incumbents, draws, default, plan = job
    rng = random.Random(f"preflight {cell}")
    policy = Policy.from_dict(default)
    stated = [planned.planned_power(incumbent_rows(cell, plan, rng), cell.task_set, plan, policy, draws, seed=str(i))
              for i in range(incumbents)]
    return cell, (sum(s["power"] for s in stated) / incumbents, sum(s["mean_runs"] for s in stated) / incumbents)
