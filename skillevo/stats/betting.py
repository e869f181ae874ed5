"""The per_resolved decision as a test by betting: valid at every number of runs, for every cost distribution under
the per-run cost cap, and under any stopping rule (docs/gate.md, the test).

The estimand is the candidate's dollars per resolved task over the gate's tasks relative to its control's,
theta = (M_c / P_c) / (M_i / P_i), M an arm's sum over tasks of its mean (capped) cost per run, P its sum of
resolution rates. With lambda = M_i / P_i (the control's dollars per resolved task), theta < 1 exactly when
sum_t delta_t > 0, delta_t = E[x_control] - E[x_candidate] on task t and x = cost - lambda * resolved: bounded,
since a run costs at most its task's cap (a run that reaches the cap stops and counts unresolved at the cap).

A round is one run of every gate task in each arm, blocks of (task, run) side by side. A gambler starts with 1
and, in each block, multiplies its wealth by (1 + beta (x_control - s_t)) (1 - beta (x_candidate - s_t)), s_t a
centre per task. beta, lambda and s_t are fixed from the rounds before and the design (the incumbent side,
measured before any candidate run), the same beta for every block of a round, and COST_KAPPA keeps each factor
positive whatever a run costs. The expectation of a block's factor is 1 + beta delta_t + beta^2 (m_c - s)(s - m_i)
<= exp(beta delta_t) wherever s lies (the last term is at most (beta delta_t / 2)^2 when s is between the means,
and negative when it is not), so the product over a round's independent blocks has expectation at most
exp(beta sum_t delta_t) <= 1 if the candidate is not cheaper: the wealth is a nonnegative supermartingale, and by
Ville's inequality it ever reaches 1 / alpha with probability at most alpha, at any round, however the rounds were
stopped. lambda is a plug-in from earlier rounds of both arms: at the boundary both arms' ratios equal lambda, so
it is unbiased to first order; what remains (second order, when resolution differs between the arms) is measured
by `make gate-study`. beta is Kelly's fraction for the saving the plan is sized for (sampling.plan_saving_pct) at
each task's spread and resolution, and s_t the midpoint of the two arms' expected x: both start at the design's
(a few incumbent runs, five by default, which read a rate of 0.85 as 1 nearly half the time) and learn from the
rounds already measured, the design weighing PRIOR_ROUNDS rounds. Fixed before the round they bet on, they keep the
bound; sized from data, they keep the power the design's noise took (0.68 to 0.83 under the default schedule,
docs/gate.md). The test is most powerful at the planned saving, and valid everywhere.

A run lost to a harness fault is counted at its worst for the candidate: a candidate run at its cap unresolved, a
control run free and resolved. That keeps the bound, whatever made the run go missing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The largest part of a factor's range staked, so no factor reaches zero. The two tests' worst blocks differ in how
# often they happen: the cost test's is a candidate run at its cap, which the cap's quantile (sampling.cost_cap)
# makes rare, so it stakes nearly all its range (a block at its worst keeps a hundredth of the wealth); the
# resolution guard's is a candidate unresolved beside a resolved control, a block in eight at resolution 0.85, so
# it keeps a tenth. Any limit below 1 keeps the bound; these are where the power is (docs/gate.md, power).
COST_KAPPA = 0.99
DROP_KAPPA = 0.9
PRIOR_ROUNDS = 2  # the design's weight, in rounds, beside those already measured, in each stake, centre and spread

Run = tuple[float | None, bool]  # (cost, resolved); cost None: the run was lost to a harness fault


@dataclass(frozen=True)
class TaskDesign:
    """One gate task as the incumbent side measured it, before any candidate run."""

    mean: float  # mean capped cost per run
    rate: float  # resolution rate
    variance: float  # variance of the cost per run
    cap: float  # the per-run cost cap the harness enforces

    def to_dict(self) -> dict[str, float]:
        return {"mean": round(self.mean, 9), "rate": round(self.rate, 9), "variance": round(self.variance, 12),
                "cap": round(self.cap, 6)}


@dataclass(frozen=True)
class Design:
    """What the bets are sized from: each gate task's design (in the tasks' order) and the saving planned for."""

    tasks: Mapping[str, TaskDesign]
    saving: float  # the planned saving per run, a fraction (sampling.plan_saving_pct / 100)

    @property
    def cost_per_resolved(self) -> float:
        """lambda's prior: the incumbent's dollars per resolved task (one round's weight)."""
        rate = sum(t.rate for t in self.tasks.values())
        return sum(t.mean for t in self.tasks.values()) / rate if rate > 0 else max(
            t.cap for t in self.tasks.values())

    def to_dict(self) -> dict[str, Any]:
        return {"tasks": {name: t.to_dict() for name, t in self.tasks.items()}, "saving": round(self.saving, 6)}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Design:
        return cls({name: TaskDesign(float(t["mean"]), float(t["rate"]), float(t["variance"]), float(t["cap"]))
                    for name, t in values["tasks"].items()}, float(values["saving"]))


@dataclass(frozen=True)
class Wealth:
    log_wealth: tuple[float, ...]  # after each round
    stakes: tuple[float, ...]  # beta of each round, per dollar

    @property
    def peak(self) -> float:
        """The largest log-wealth reached: the test rejects once it reaches log(1 / alpha)."""
        return max((0.0, *self.log_wealth))

    def e_value(self) -> float:
        return math.exp(min(self.peak, 700.0))

    def rejects(self, alpha: float) -> bool:
        return self.peak >= math.log(1 / alpha) - 1e-12

    def first_crossing(self, alpha: float) -> int | None:
        """The first round (1-based) whose wealth reached 1 / alpha."""
        target = math.log(1 / alpha) - 1e-12
        return next((r for r, w in enumerate(self.log_wealth, 1) if w >= target), None)


def own_design(cells: Mapping[str, tuple[Sequence[tuple[float, bool]], Sequence[tuple[float, bool]]]],
               saving: float = 0.2) -> Design:
    """A design sized from the controls' own runs (task -> (control runs, candidate runs)) and capped just above
    every run seen: for callers without an incumbent side (tests, the study's reference), never the pipeline's,
    whose bets must be fixed before the data."""
    tasks = {}
    for task, (control, candidate) in cells.items():
        values = [v for v, _ in control]
        mean = sum(values) / len(values) if values else 0.0
        tasks[task] = TaskDesign(mean, sum(1 for _, r in control if r) / len(control) if control else 0.0,
                                 sum((v - mean) ** 2 for v in values) / max(len(values) - 1, 1),
                                 math.nextafter(max((v for v, _ in (*control, *candidate)), default=1.0), math.inf))
    return Design(tasks, saving)


def capped(run: Run, cap: float) -> tuple[float, bool]:
    """A run at or over its cap counts at the cap, unresolved (the harness stops it there)."""
    cost, resolved = run
    if cost is None:
        raise ValueError("a lost run has no cost to cap")
    return (cap, False) if cost >= cap else (cost, resolved)


Block = tuple[float, bool, float, bool]  # a block's capped (control cost, resolved, candidate cost, resolved)


def wealth(rounds: Sequence[Sequence[tuple[Run, Run]]], design: Design) -> Wealth:
    """The gambler's log-wealth after each round. `rounds[r][t]` is (control run, candidate run) of the design's
    task t in round r + 1."""
    tasks = list(design.tasks.values())
    past: list[list[Block]] = []
    logs, stakes, log_w = [], [], 0.0
    for blocks in rounds:
        if len(blocks) != len(tasks):
            raise ValueError(f"a round has {len(blocks)} blocks for {len(tasks)} tasks")
        lam = _lambda(past, design)
        beta, centres = stake(design, lam, past)
        this = [worst(control, candidate, t.cap) for (control, candidate), t in zip(blocks, tasks, strict=True)]
        for (c_cost, c_res, k_cost, k_res), s in zip(this, centres, strict=True):
            log_w += math.log1p(beta * (c_cost - lam * c_res - s)) + math.log1p(-beta * (k_cost - lam * k_res - s))
        past.append(this)
        logs.append(log_w)
        stakes.append(beta)
    return Wealth(tuple(logs), tuple(stakes))


def worst(control: Run, candidate: Run, cap: float) -> Block:
    """A block's capped runs; a lost run at its worst for the candidate."""
    c_cost, c_res = (0.0, True) if control[0] is None else capped(control, cap)
    k_cost, k_res = (cap, False) if candidate[0] is None else capped(candidate, cap)
    return c_cost, c_res, k_cost, k_res


def _lambda(past: Sequence[Sequence[Block]], design: Design) -> float:
    """Dollars per resolved task from both arms' earlier rounds, the design's counting as one round."""
    weight = len(design.tasks)
    cost, resolved = design.cost_per_resolved * weight, float(weight)
    for blocks in past:
        for c_cost, c_res, k_cost, k_res in blocks:
            cost += (c_cost + k_cost) / 2
            resolved += (c_res + k_res) / 2
    return cost / resolved


def stake(design: Design, lam: float, past: Sequence[Sequence[Block]] = ()) -> tuple[float, list[float]]:
    """Kelly's fraction per dollar for the planned saving at each task's spread and resolution, and each task's
    centre (the midpoint of its two arms' expected x), held to COST_KAPPA of the narrowest range so no factor can
    reach zero. Centres and spreads start at the design's (a few incumbent runs) and learn from the rounds already
    measured, the design weighing PRIOR_ROUNDS rounds: fixed before the round they bet on, so the bound holds."""
    tasks = list(design.tasks.values())
    centres, gain, spread = [], 0.0, 0.0
    for i, t in enumerate(tasks):
        prior = t.mean - lam * t.rate
        prior_var = t.variance + lam * lam * t.rate * (1 - t.rate)
        arms, cost = [], PRIOR_ROUNDS * t.mean
        for side in (0, 2):
            xs = [b[i][side] - lam * b[i][side + 1] for b in past]
            mean = (PRIOR_ROUNDS * prior + sum(xs)) / (PRIOR_ROUNDS + len(xs))
            var = (PRIOR_ROUNDS * (prior_var + (prior - mean) ** 2) + sum((x - mean) ** 2 for x in xs)) / (
                PRIOR_ROUNDS + len(xs))
            arms.append((mean, var))
        cost += sum(b[i][0] for b in past)
        centres.append((arms[0][0] + arms[1][0]) / 2)
        gain += design.saving * cost / (PRIOR_ROUNDS + len(past))
        spread += arms[0][1] + arms[1][1]
    limit = min(min(1 / (lam + s), 1 / (t.cap - s)) for t, s in zip(tasks, centres, strict=True))
    if gain <= 0 or spread <= 0:
        return COST_KAPPA * limit, centres
    return min(gain / spread, COST_KAPPA * limit), centres


def _planned(design: Design, lam: float) -> tuple[float, float]:
    """A round's expected gain at the planned saving and the variance of its bet per unit stake."""
    tasks = design.tasks.values()
    return (sum(design.saving * t.mean for t in tasks),
            sum(2 * (t.variance + lam * lam * t.rate * (1 - t.rate)) for t in tasks))


def growth(design: Design) -> float:
    """The log-wealth a round adds in expectation at the planned saving, at the design's own lambda (the bet's
    drift less half its variance): the lower, the more runs the test needs."""
    lam = design.cost_per_resolved
    beta, _ = stake(design, lam)
    gain, spread = _planned(design, lam)
    return beta * gain - beta * beta * spread / 2

def drop_wealth(rounds: Sequence[Sequence[tuple[Run, Run]]], margin: float, design: Design) -> Wealth:
    """The gambler's log-wealth against "the candidate resolves `margin` (a fraction) or more less than its
    control": per block z = resolved_candidate - resolved_control + margin, which has mean at most 0 then, and is at
    least margin - 1. The stake is Kelly's for equal resolution at each arm's rate per task, learned from the rounds
before as `stake` learns (a design rate of 1 from five runs staked so much that the guard, not the cost test, held
most promotions back), held to DROP_KAPPA of the range;
    runs are capped as `wealth` caps them, and a lost run counts at its worst (candidate unresolved, control
    resolved). Valid at every round, like `wealth`, so the resolution guard needs no spending over looks."""
    if margin >= 1:
        return Wealth(tuple(math.inf for _ in rounds), tuple(0.0 for _ in rounds))  # nothing can fall that far
    tasks = list(design.tasks.values())
    logs, stakes, log_w = [], [], 0.0
    past: list[list[tuple[bool, bool]]] = []
    for blocks in rounds:
        beta = 0.0 if margin <= 0 else min(margin / (_drop_spread(tasks, past) + margin * margin),
                                           DROP_KAPPA / (1 - margin))
        this = []
        for (control, candidate), t in zip(blocks, tasks, strict=True):
            _, c_res, _, k_res = worst(control, candidate, t.cap)
            log_w += math.log1p(beta * (k_res - c_res + margin))
            this.append((c_res, k_res))
        past.append(this)
        logs.append(log_w)
        stakes.append(beta)
    return Wealth(tuple(logs), tuple(stakes))


def _drop_spread(tasks: Sequence[TaskDesign], past: Sequence[Sequence[tuple[bool, bool]]]) -> float:
    """The variance of a block's resolution difference, averaged over tasks: each arm's rate per task from the
    design (weighing PRIOR_ROUNDS rounds) and the rounds already measured."""
    total = 0.0
    for i, t in enumerate(tasks):
        for side in (0, 1):
            rate = (PRIOR_ROUNDS * t.rate + sum(b[i][side] for b in past)) / (PRIOR_ROUNDS + len(past))
            total += rate * (1 - rate)
    return total / len(tasks)
