"""The sampling plan (params `sampling:`) and what it can detect, stated before any candidate money is spent.

The bench reads only `sampling.*` (so editing a gate threshold never re-runs a paid bench); the power
preflight reads the incumbent side, the gate's alpha and margins, and says what improvement the configured
runs can find at the configured power.

With `sampling.sequential.enabled` the candidate side runs in looks (`looks`): after each, the bench asks
`interim` whether to stop, and writes `record` into the candidate side's bench.json. The gate judges the
stopped side at that look's level of an alpha-spending plan (skillevo/gate/looks.py), whatever stopped it, so
these rules decide only what is spent, never whether a false promotion stays within gate.alpha.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from skillevo import stats
from skillevo.core.config import Policy, SamplingParams
from skillevo.core.results import is_excluded
from skillevo.files.errors import BadInput
from skillevo.stats import betting

PROMOTE, FUTILITY, CONTINUE = "stop-promote", "stop-futility", "continue"
REASONS = {PROMOTE: "promote", FUTILITY: "futility", CONTINUE: "max"}  # interim's action -> bench.json reason


@dataclass(frozen=True)
class Interim:
    """What the bench does after a look: stop-promote, stop-futility or continue, for the whole candidate side."""

    action: str
    reasons: tuple[str, ...]


def looks(plan: SamplingParams) -> tuple[int, ...]:
    """Candidate runs per (task, arm) at each planned look: `first`, then `batch` more each time, ending at
    `runs`. One look, `runs`, when sequential sampling is off (or `first` already reaches `runs`)."""
    seq = plan.sequential
    if not seq.enabled or seq.first >= plan.runs:
        return (plan.runs,)
    return (*range(seq.first, plan.runs, seq.batch), plan.runs)


def interim(control_rows: Iterable[Mapping[str, Any]], candidate_rows: Iterable[Mapping[str, Any]],
            pairs: Mapping[str, str], look: int, plan: SamplingParams,
            designs: Mapping[str, betting.Design] | None = None) -> Interim:
    """Whether the candidate side stops after `look` (1-based, of `looks(plan)`), from every row so far.

    The bench calls it after each look with its controls' rows so far (the incumbent arms measured beside the
    candidate, docs/gate.md; tasks without candidate rows are ignored), its candidate arms' rows up to this look,
    and `pairs` (candidate arm -> incumbent arm, skillevo.core.arms), then runs `batch` more runs per cell of both on
    continue, or stops and writes `record(plan, look, action)` as bench.json's `sequential`. At the last look
    the side stops whatever the action (continue is recorded as "max").

    Per arm, the gate's test of gate.metric per resolved task, by betting under the arm's design (`designs`, from
    the incumbent side; skillevo.stats.betting), which holds gate.alpha (as plan.sequential.alpha) at every
    look, and the bootstrap estimate (skillevo.stats.per_resolved) on valid runs (skillevo.core.results.is_excluded):
    - efficacy: the wealth reached 1 / alpha, the estimate reaches `min_improvement_pct`, the bet against a
      resolution drop of `max_resolution_drop_pct` or more reached 1 / alpha too (valid at every look, like the
      cost test), and each arm has `min_total_runs` valid runs (what the gate will ask, so an early stop is not
      wasted);
    - futility (before the last look): the p-value is above `futility_p_value`, or the estimate's one-sided
      upper bound at `futility_confidence` is below `futility_below_pct` (the candidate cannot plausibly save
      what the remaining runs are for), or a valid run has the metric unmeasured (the gate never promotes on
      such a run, and the run stays).
    Apply needs every arm, so one futile arm stops the side as futile; it stops to promote only when every arm
    is efficacious. An arm with a task that has no valid run yet on either side can be neither: continue.
    Reads sampling params only: the gate stays the judge (docs/gate.md, sequential runs).
    """
    seq, planned = plan.sequential, looks(plan)
    if not seq.enabled:
        raise BadInput("interim: sampling.sequential.enabled is false, so the candidate side has no looks "
                       "(rule: sequential sampling)")
    if not 1 <= look <= len(planned):
        raise BadInput(f"interim: look {look} is not one of the {len(planned)} planned looks {list(planned)} "
                       "(rule: planned looks)")
    candidate_rows, incumbent_rows = list(candidate_rows), list(control_rows)
    runs, last = planned[look - 1], look == len(planned)
    past = [row for row in candidate_rows if row["run"] > runs]
    if past:
        raise BadInput(f"interim: candidate row {past[0]['task']}/{past[0]['arm']}/run{past[0]['run']} is past "
                       f"look {look}'s {runs} runs (rule: a look sees only its own runs)")
    level = stats.look_levels(planned, seq.alpha)[look - 1]
    tasks = sorted({row["task"] for row in candidate_rows})
    verdicts = {arm: _look_arm(incumbent_rows, candidate_rows, tasks, incumbent, arm, level, last, plan,
                               None if designs is None else designs[incumbent])
                for arm, incumbent in sorted(pairs.items())}
    reasons = tuple(f"{arm}: {why}" for arm, (_, why) in verdicts.items())
    states = [state for state, _ in verdicts.values()]
    if FUTILITY in states:
        return Interim(FUTILITY, reasons)
    if states and all(state == PROMOTE for state in states):
        return Interim(PROMOTE, reasons)
    return Interim(CONTINUE, reasons)


def record(plan: SamplingParams, look: int, action: str) -> dict[str, Any]:
    """bench.json's `sequential` object for a candidate side that stopped after `look` with `action`; the
    side's `runs` stays `sampling.runs`, the last planned look (skillevo.core.results.sequential_record checks it)."""
    planned = looks(plan)
    if not 1 <= look <= len(planned) or action not in REASONS or (action == CONTINUE and look < len(planned)):
        raise BadInput(f"record: a side stops at one of its looks {list(planned)} with a stop action, or at the "
                       f"last with any (got look {look}, {action!r}) (rule: planned looks)")
    return {"looks": list(planned), "stopped_at_look": look, "reason": REASONS[action]}


def _look_arm(incumbent_rows: list[Mapping[str, Any]], candidate_rows: list[Mapping[str, Any]], tasks: list[str],
              incumbent: str, candidate: str, level: float, last: bool, plan: SamplingParams,
              design: betting.Design | None) -> tuple[str, str]:
    seq = plan.sequential
    strata, counts, blocks = [], [], []
    for task in tasks:
        cells = [[row for row in rows if row["task"] == task and row["arm"] == arm and not is_excluded(row)]
                 for rows, arm in ((incumbent_rows, incumbent), (candidate_rows, candidate))]
        if not all(cells):
            return CONTINUE, f"{task}: no valid run yet in {incumbent if not cells[0] else candidate}"
        runs = [[(row[seq.metric], row["resolved"]) for row in cell] for cell in cells]
        if any(v is None for cell in runs for v, _ in cell):
            return (CONTINUE if last else FUTILITY), (f"{task}: {seq.metric} is unmeasured in a valid run, and the "
                                                       "gate never promotes on it")
        strata.append((runs[0], runs[1]))
        incumbent_counts, candidate_counts = ((sum(1 for row in cell if row["resolved"]), len(cell)) for cell in cells)
        counts.append((incumbent_counts, candidate_counts))
        blocks.append(by_run([row for row in incumbent_rows if row["task"] == task and row["arm"] == incumbent],
                              [row for row in candidate_rows if row["task"] == task and row["arm"] == candidate],
                              seq.metric))
    bounded = not last and seq.futility_confidence > 0  # the futility bound, from the estimate's own resampling
    estimates = stats.per_resolved_at(strata, (seq.alpha, 1 - seq.futility_confidence) if bounded else (seq.alpha,))
    if estimates is None:
        return CONTINUE, f"{seq.metric} per resolved task is not defined yet (an arm resolved or spent nothing)"
    estimate, bound = estimates[0], estimates[-1]
    quality = stats.quality(counts, level)
    total = min(sum(inc[1] for inc, _ in counts), sum(cand[1] for _, cand in counts))
    shown = estimate.to_dict(seq.alpha)  # printed as the gate prints it (stats.improvement_text)
    design = design or betting.own_design(dict(zip(tasks, strata, strict=True)))
    rounds = [list(r) for r in zip(*blocks, strict=True)]
    wealth = betting.wealth(rounds, design)
    drop = betting.drop_wealth(rounds, seq.max_resolution_drop_pct / 100, design)
    found = (f"{seq.metric} per resolved task {stats.improvement_text(shown)} cheaper, e={wealth.e_value():.4g} "
             f"of {1 / seq.alpha:.4g} needed; against a resolution drop of {seq.max_resolution_drop_pct:g} points "
             f"e={drop.e_value():.4g} (bound {quality.drop_upper_pct:.1f} points)")
    if (wealth.rejects(seq.alpha) and estimate.improvement_pct >= seq.min_improvement_pct
            and drop.rejects(seq.alpha) and total >= seq.min_total_runs):
        return PROMOTE, f"efficacious ({found})"
    if not last and estimate.p_value > seq.futility_p_value:
        return FUTILITY, f"futile ({found}; above futility_p_value {seq.futility_p_value:g})"
    if bounded and bound.interval_pct[1] < seq.futility_below_pct:
        return FUTILITY, (f"futile ({found}; at {100 * seq.futility_confidence:g}% confidence the saving is at "
                          f"most {bound.interval_pct[1]:.1f}%, below futility_below_pct {seq.futility_below_pct:g})")
    return CONTINUE, f"undecided ({found})"


def design(rows: Iterable[Mapping[str, Any]], gate_tasks: Iterable[str], arm: str, plan: SamplingParams,
           metric: str) -> betting.Design:
    """What the candidate side's test is sized from and capped at, for one control arm, from the incumbent side
    alone (before any candidate run): per gate task its mean, resolution and variance, and the per-run cap the
    harness enforces (docs/gate.md, the cap). The bench, the preflight and the gate all call this, so the gate can
    refuse a candidate side that ran under another design."""
    gate_tasks = sorted(set(gate_tasks))
    mine = [row for row in rows if row["arm"] == arm and row["task"] in gate_tasks and not is_excluded(row)
            and row[metric] is not None]
    observed = spread(mine, metric)
    cv = observed[0] if observed and observed[0] > 0 else plan.prior_cv
    sigma = math.sqrt(math.log1p(cv * cv))
    from scipy import stats as sps  # noqa: PLC0415 - slow to import; the bench's first look needs it anyway
    quantile = math.exp(float(sps.norm.ppf(plan.cost_cap.quantile)) * sigma - sigma * sigma / 2)
    factor = min(max(quantile, plan.cost_cap.min_factor), plan.cost_cap.max_factor)
    tasks = {}
    for task in gate_tasks:
        values = [(float(row[metric]), bool(row["resolved"])) for row in mine if row["task"] == task]
        mean = sum(v for v, _ in values) / len(values) if values else 0.0
        if mean <= 0:
            raise BadInput(f"the incumbent side has no valid run of {arm} on gate task {task} with {metric} above "
                           "zero: the candidate side's cost cap and its test cannot be sized (rule: design)")
        tasks[task] = betting.TaskDesign(mean, sum(r for _, r in values) / len(values), (cv * mean) ** 2,
                                         round(mean * factor, 6))
    return betting.Design(tasks, plan.plan_saving_pct / 100)


def designs(rows: Iterable[Mapping[str, Any]], gate_tasks: Iterable[str], arms: Iterable[str], plan: SamplingParams,
            metric: str) -> dict[str, betting.Design]:
    """`design` for each control arm."""
    rows, gate_tasks = list(rows), list(gate_tasks)
    return {arm: design(rows, gate_tasks, arm, plan, metric) for arm in sorted(set(arms))}


def by_run(control: list[Mapping[str, Any]], candidate: list[Mapping[str, Any]], metric: str
            ) -> list[tuple[betting.Run, betting.Run]]:
    """One task's blocks in run order, as the gate pairs them (skillevo.gate.rounds): a run lost to a harness
    fault, or not run yet, is (None, False), its worst."""
    def runs(rows: list[Mapping[str, Any]]) -> dict[int, betting.Run]:
        return {row["run"]: (row[metric], bool(row["resolved"])) for row in rows if not is_excluded(row)}
    mine, theirs = runs(control), runs(candidate)
    last = max((row["run"] for row in (*control, *candidate)), default=0)
    return [(mine.get(r, (None, False)), theirs.get(r, (None, False))) for r in range(1, last + 1)]


@dataclass(frozen=True)
class Preflight:
    tasks: int
    runs: int  # sampling.runs: what the candidate side and its controls will run per (task, arm)
    cv: float  # the coefficient of variation of the metric the figures assume
    spread_from: str  # "incumbent (N runs)" or "prior (sampling.prior_cv)"
    detectable_pct: float | None  # the saving per resolved task found with `power` at the cost test's level
    runs_needed: dict[str, int | None]  # per (task, arm), for each thing a promotion needs
    warnings: tuple[str, ...]
    planned: dict[str, float] | None = None  # the schedule's power by simulation (skillevo.core.planned)

    def to_dict(self) -> dict[str, Any]:
        return {"tasks": self.tasks, "runs": self.runs, "cv": round(self.cv, 6), "spread_from": self.spread_from,
                "detectable_improvement_pct": None if self.detectable_pct is None else round(self.detectable_pct, 2),
                "runs_needed": dict(self.runs_needed), "warnings": list(self.warnings), "planned": self.planned}


def spread(rows: Iterable[Mapping[str, Any]], metric: str) -> tuple[float, int] | None:
    """The metric's coefficient of variation pooled within (task, arm) cells over valid, measured runs (each run
    relative to its cell's mean, as the per_resolved test pools it), and the number of runs it rests on; None
    when no cell has two such runs or every mean is zero."""
    cells: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        value = row[metric]
        if not is_excluded(row) and value is not None:
            cells.setdefault((row["task"], row["arm"]), []).append(float(value))
    squares, df, used = 0.0, 0, 0
    for values in cells.values():
        mean = sum(values) / len(values)
        if len(values) >= 2 and mean > 0:
            squares += sum((v / mean - 1) ** 2 for v in values)
            df += len(values) - 1
            used += len(values)
    return (math.sqrt(squares / df), used) if df else None


def preflight(rows: Iterable[Mapping[str, Any]], gate_tasks: Iterable[str], sampling: SamplingParams,
              policy: Policy) -> Preflight:
    """What the configured runs can show on the gate's tasks, and the runs per (task, arm) each thing a promotion
    needs takes, from the incumbent side's own means, resolution and spread (its worst arm: apply needs every
    arm), before any candidate money is spent."""
    gate_tasks = sorted(set(gate_tasks))
    rows = [row for row in rows if row["task"] in gate_tasks and not is_excluded(row)]
    observed = spread(rows, policy.metric)
    if observed and observed[0] > 0:
        cv, source = observed[0], f"incumbent ({observed[1]} runs)"
    else:
        cv, source = sampling.prior_cv, "prior (sampling.prior_cv)"
    variances = []
    for arm in sorted({row["arm"] for row in rows}):
        cells = []
        for task in gate_tasks:
            mine = [row for row in rows if row["arm"] == arm and row["task"] == task and row[policy.metric] is not None]
            if mine:
                cells.append((sum(float(r[policy.metric]) for r in mine) / len(mine),
                              sum(1 for r in mine if r["resolved"]) / len(mine), cv))
        found = stats.per_resolved_variance(cells) if len(cells) == len(gate_tasks) else None
        if found is not None:
            variances.append(found)
    variance = max(variances) if variances else cv * cv / max(len(gate_tasks), 1)
    tasks = max(len(gate_tasks), 1)
    level = policy.alpha
    detectable = stats.detectable_per_resolved_pct(variance, sampling.runs, level, sampling.power)
    needed = {
        "min_total_runs": -(-policy.min_total_runs // tasks),
        "resolution_bound": -(-stats.runs_to_bound_drop(policy.max_resolution_drop_pct, policy.alpha) // tasks),
        "min_improvement": stats.runs_for_saving(variance, policy.min_improvement_pct, level, sampling.power),
        "saving_20pct": stats.runs_for_saving(variance, 20, level, sampling.power),
    }
    warnings = unpromotable(len(gate_tasks), sampling, policy)
    if detectable is not None and policy.min_improvement_pct < detectable:
        warnings.append(f"gate.min_improvement_pct {policy.min_improvement_pct:g}% is below the saving {sampling.runs} "
                        f"runs can detect ({detectable:.1f}% at power {sampling.power:g}): a real saving between the "
                        f"two will usually be kept out; {needed['min_improvement']} runs per task would find it")
    warnings += sequential_warnings(sampling, policy)
    return Preflight(len(gate_tasks), sampling.runs, cv, source, detectable, needed, tuple(warnings))


def unpromotable(gate_tasks: int, sampling: SamplingParams, policy: Policy) -> list[str]:
    """Why no candidate can be promoted with sampling.runs on `gate_tasks` tasks, whatever the data: the runs a
    promotion needs (gate.min_total_runs) and the runs that can rule out the largest resolution drop allowed.
    Known from params alone, so `skillevo check` says it before anything is paid."""
    tasks = max(gate_tasks, 1)
    total = -(-policy.min_total_runs // tasks)
    bound = -(-stats.runs_to_bound_drop(policy.max_resolution_drop_pct, policy.alpha) // tasks)
    out = []
    if sampling.runs < total:
        out.append(f"sampling.runs {sampling.runs} on {gate_tasks} gate task(s) is {sampling.runs * gate_tasks} runs "
                   f"per arm, below gate.min_total_runs {policy.min_total_runs}: no candidate can be promoted; run at "
                   f"least {total} per task")
    if sampling.runs < bound:
        out.append(f"{sampling.runs} runs on {gate_tasks} gate task(s) cannot rule out a resolution drop of "
                   f"{policy.max_resolution_drop_pct:g} points, so no candidate can be promoted; run at least "
                   f"{bound} per task")
    return out


def sequential_warnings(sampling: SamplingParams, policy: Policy) -> list[str]:
    """Where interim's stopping rule disagrees with the gate that will judge the stopped side (the looks read the
    gate's own metric, level and bounds, so only its policy and test can differ): alpha is kept either way, but an
    early stop the gate will not promote is money spent for nothing."""
    if not sampling.sequential.enabled:
        return []
    warnings = []
    if policy.policy != "per_resolved" or policy.test != "betting":
        warnings.append(f"gate.policy {policy.policy} with gate.test {policy.test} is not per_resolved's test by "
                        "betting, the test the looks use: the bench may stop where the gate will not decide the same")
    if looks(sampling)[0] < policy.min_runs:
        warnings.append(f"sampling.sequential.first {sampling.sequential.first} is below gate.min_runs "
                        f"{policy.min_runs}: a side stopped at the first look is insufficient evidence")
    return warnings
