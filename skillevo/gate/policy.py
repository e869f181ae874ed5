"""The default promotion policy (DESIGN §5): one pure function from per-(task, arm) aggregates to decisions.

Conservative by construction: quality is judged before efficiency, missing or partial evidence is never read
as a win, and every verdict carries one sentence per reason and the per-task rows it was made from, so the
same function can recompute it from promotion.json alone.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from skillevo.gate._schema import GateInputError, first_error, schema_validator

PROMOTE = "promote"
KEEP_INCUMBENT = "keep_incumbent"
INSUFFICIENT_EVIDENCE = "insufficient_evidence"
CANDIDATE_PREFIX = "candidate_"
MAIN_LOOP_ONLY_METRICS = frozenset({"num_turns", "output_tokens"})
MAIN_LOOP_ONLY_WARNING = (
    "token and turn counts cover only the main agent loop: subagent spend is invisible to them and "
    "flatters subagent-heavy candidates; cost_usd is the only reported figure that includes subagents"
)
# A run that never invoked its skill says the skill text failed, whatever the oracle made of the rest.
SKILL_ATTRIBUTABLE_ERROR_KINDS = frozenset({"skill-not-invoked"})
_MODEL_ALIAS_SUFFIXES = ("latest", "auto")

Aggregates = Mapping[tuple[str, str], Mapping[str, Any]]


@dataclass(frozen=True)
class Policy:
    """Every `gate:` param. Bound whole into promotion.json, so apply sees exactly what the gate saw.

    bootstrap_seed and bootstrap_resamples only shape the reported interval; the decision never reads them.
    """

    metric: str = "cost_usd"
    min_runs: int = 3
    min_improvement_pct: float = 5.0
    max_task_regression_pct: float = 20.0
    max_failed_task_regression_pct: float = 100.0
    min_gated_task_ratio: float = 0.5
    resolution_margin: int = 2
    max_age_days: int = 90
    bootstrap_seed: int = 0
    bootstrap_resamples: int = 2000

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Policy:
        """Missing keys take the defaults; an unknown key fails, so a typo never silently keeps a default."""
        merged = {**asdict(cls()), **values}
        error = first_error(merged, schema_validator("promotion", "policy"))
        if error:
            raise GateInputError(f"gate policy: {error}")
        floats = {f.name for f in fields(cls) if f.type == "float"}
        return cls(**{k: float(v) if k in floats else v for k, v in merged.items()})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def metric_warning(self) -> str | None:
        return MAIN_LOOP_ONLY_WARNING if self.metric in MAIN_LOOP_ONLY_METRICS else None


def load_policy(params_path: Path) -> Policy:
    """The `gate:` section of params.yaml (absent section = all defaults)."""
    try:
        params = yaml.safe_load(params_path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise GateInputError(f"{params_path}: cannot read params: {e}") from e
    params = params or {}
    if not isinstance(params, dict) or not isinstance(params.get("gate") or {}, dict):
        raise GateInputError(f"{params_path}: `gate` must be a mapping (rule: params.yaml gate section)")
    try:
        return Policy.from_dict(params.get("gate") or {})
    except GateInputError as e:
        raise GateInputError(f"{params_path}: {e}") from e


def is_named_model(name: str) -> bool:
    """An alias such as `...-latest` or `auto` can change under the evidence between bench and apply."""
    name = name.strip().lower()
    return bool(name) and not name.endswith(_MODEL_ALIAS_SUFFIXES)


def incumbent_arm_of(candidate_arm: str) -> str:
    """docs/formats.md: the candidate arm paired with incumbent arm A is named candidate_A."""
    if not candidate_arm.startswith(CANDIDATE_PREFIX) or candidate_arm == CANDIDATE_PREFIX:
        raise ValueError(f"candidate arm {candidate_arm!r} is not named {CANDIDATE_PREFIX}<incumbent arm>")
    return candidate_arm.removeprefix(CANDIDATE_PREFIX)


def improvement_pct(incumbent: float | None, candidate: float | None) -> float | None:
    """Positive = the candidate spends less. None when unmeasured, or when a zero incumbent gives no scale."""
    if incumbent is None or candidate is None or incumbent == 0:
        return None
    return round(100 * (incumbent - candidate) / incumbent, 1)


def decide(
    aggregates: Aggregates, policy: Policy, *, benchmark_model: str, candidate_arms: Sequence[str]
) -> list[dict[str, Any]]:
    """One decision per candidate arm, each against its paired incumbent arm, in the given arm order."""
    return [
        decide_arm(
            aggregates,
            policy,
            benchmark_model=benchmark_model,
            incumbent_arm=incumbent_arm_of(arm),
            candidate_arm=arm,
        )
        for arm in candidate_arms
    ]


@dataclass
class _Judgement:
    row: dict[str, Any]
    reasons: list[str]
    insufficient: bool = False
    regressed: bool = False


def decide_arm(
    aggregates: Aggregates, policy: Policy, *, benchmark_model: str, incumbent_arm: str, candidate_arm: str
) -> dict[str, Any]:
    """The decision object for one candidate arm; `aggregates` maps (task, arm) to an aggregate."""
    metric = policy.metric
    reasons: list[str] = []
    insufficient = regressed = False
    if not is_named_model(benchmark_model):
        insufficient = True
        reasons.append(
            f"benchmark model {benchmark_model!r} is not a named model (empty, or an alias ending in "
            "'latest' or 'auto'); a pinned name is required so the evidence cannot drift"
        )

    rows: list[dict[str, Any]] = []
    for task in sorted({task for task, _ in aggregates}):
        incumbent, candidate = aggregates.get((task, incumbent_arm)), aggregates.get((task, candidate_arm))
        if incumbent is None or candidate is None:
            insufficient = True
            missing = incumbent_arm if incumbent is None else candidate_arm
            reasons.append(f"{task}: both {incumbent_arm} and {candidate_arm} are required, {missing} has no results")
            continue
        judgement = _judge_task(task, incumbent, candidate, policy)
        rows.append(judgement.row)
        reasons.extend(judgement.reasons)
        insufficient |= judgement.insufficient
        regressed |= judgement.regressed

    gated = [row["task"] for row in rows if row["gated"]]
    ungated = [row["task"] for row in rows if not row["gated"]]
    if ungated:
        reasons.append(
            f"not gated on {len(ungated)} task(s) neither arm resolved: {', '.join(ungated)} "
            f"(evidence base: {len(gated)}/{len(rows)} paired tasks gated)"
        )
    if not rows:
        insufficient = True
        reasons.append(f"no paired task results were found for {incumbent_arm} and {candidate_arm}")
    elif not gated:
        insufficient = True
        reasons.append(
            f"no task supplied quality signal: neither arm resolved a run on any of the {len(rows)} paired tasks"
        )
    elif len(gated) / len(rows) < policy.min_gated_task_ratio:  # not ratio * n: 0.28 * 25 > 7
        insufficient = True
        reasons.append(
            f"promotion evidence base is too thin: {len(gated)}/{len(rows)} paired tasks gated "
            f"(at least {100 * policy.min_gated_task_ratio:g}% required)"
        )

    improvements = [row["improvement_pct"] for row in rows if row["gated"] and row["improvement_pct"] is not None]
    median = round(statistics.median(improvements), 1) if improvements else None
    margin = sum(row["candidate"]["resolved"] - row["incumbent"]["resolved"] for row in rows)

    if insufficient:
        decision = INSUFFICIENT_EVIDENCE
    elif regressed:
        decision = KEEP_INCUMBENT
    elif margin >= policy.resolution_margin:
        decision = PROMOTE
        reasons.append(
            f"candidate improves total task resolution by {margin} runs "
            f"(at least {policy.resolution_margin} required) with no task regression"
        )
    else:
        if margin > 0:
            reasons.append(
                f"total resolution improved by only {margin} run(s), within the noise floor "
                f"({policy.resolution_margin} required); deciding on efficiency instead"
            )
        # Not insufficient means at least one gated task and a measured improvement on every gated task.
        assert median is not None
        decision = PROMOTE if median >= policy.min_improvement_pct else KEEP_INCUMBENT
        reasons.append(
            f"median {metric} improvement over {len(improvements)} gated task(s) is {median:.1f}% "
            f"(required {policy.min_improvement_pct:.1f}%)"
        )

    return {
        "incumbent_arm": incumbent_arm,
        "candidate_arm": candidate_arm,
        "decision": decision,
        "metric": metric,
        "metric_warning": policy.metric_warning,
        "median_improvement_pct": median,
        "resolution_margin": margin,
        "gated_tasks": gated,
        "ungated_tasks": ungated,
        "reasons": reasons,
        "tasks": rows,
    }


def _judge_task(
    task: str, incumbent: Mapping[str, Any], candidate: Mapping[str, Any], policy: Policy
) -> _Judgement:
    """The seed's per-task rule (notes/seed-system.md §4.2), every applicable check reported, in order."""
    metric = policy.metric
    n_inc, n_cand = incumbent["valid_runs"], candidate["valid_runs"]
    x_inc, x_cand = incumbent["excluded_runs"], candidate["excluded_runs"]
    r_inc, r_cand = incumbent["resolved"], candidate["resolved"]
    m_inc, m_cand = incumbent[metric], candidate[metric]
    improvement = improvement_pct(m_inc, m_cand)
    skill_attributable = any(
        kind in SKILL_ATTRIBUTABLE_ERROR_KINDS for agg in (incumbent, candidate) for kind in agg["error_kinds"]
    )
    fully_measured = n_inc >= policy.min_runs and n_inc == n_cand and x_inc == 0 and x_cand == 0
    mutually_unresolved = fully_measured and r_inc == 0 and r_cand == 0
    # A task both arms measured cleanly and never resolved measures the task, not the candidate: it stays in
    # the evidence but out of the gate, unless the skill itself is implicated or the metric cannot be read.
    gated = not (mutually_unresolved and not skill_attributable and improvement is not None)
    floor_applied = r_inc >= 1 or skill_attributable
    floor_met = (n_cand > 0 and r_cand == n_cand) if floor_applied else None
    row = {
        "task": task,
        "class": incumbent["class"],
        "gated": gated,
        "skill_attributable": skill_attributable,
        "quality_floor_applied": floor_applied,
        "quality_floor_met": floor_met,
        "incumbent_rate": round(r_inc / n_inc, 4) if n_inc else None,
        "candidate_rate": round(r_cand / n_cand, 4) if n_cand else None,
        "incumbent_metric": m_inc,
        "candidate_metric": m_cand,
        "improvement_pct": improvement,
        "incumbent": dict(incumbent),
        "candidate": dict(candidate),
    }
    j = _Judgement(row, [])

    if not gated:
        assert improvement is not None
        if improvement < -policy.max_failed_task_regression_pct:
            j.regressed = True
            j.reasons.append(
                f"{task}: {metric} regressed {-improvement:.1f}% ({m_inc:g} -> {m_cand:g}) on a task neither arm "
                f"resolved, above the {policy.max_failed_task_regression_pct:.1f}% failed-task cap"
            )
        return j

    if n_inc < policy.min_runs or n_cand < policy.min_runs:
        j.insufficient = True
        j.reasons.append(f"{task}: needs at least {policy.min_runs} valid runs per arm (got {n_inc}/{n_cand})")
    if x_inc or x_cand:
        j.insufficient = True
        j.reasons.append(f"{task}: promotion requires zero excluded runs in both paired arms (got {x_inc}/{x_cand})")
    if n_inc != n_cand:
        j.insufficient = True
        j.reasons.append(f"{task}: paired arms have different valid run counts ({n_inc}/{n_cand})")
    if _rate(r_cand, n_cand) < _rate(r_inc, n_inc):
        j.regressed = True
        j.reasons.append(
            f"{task}: resolution regressed from {_share(r_inc, n_inc)} to {_share(r_cand, n_cand)}"
        )
    if floor_applied and not floor_met:
        trigger = f"the incumbent resolves {r_inc}/{n_inc}" if r_inc else "a run never invoked the skill under test"
        j.regressed = True
        j.reasons.append(
            f"{task}: candidate must resolve every valid run for the oracle-backed quality floor "
            f"({trigger}; got {r_cand}/{n_cand})"
        )
    if m_inc is None or m_cand is None:
        j.insufficient = True
        j.reasons.append(
            f"{task}: {metric} was not measured on every valid run in both paired arms "
            f"(incumbent {_value(m_inc)}, candidate {_value(m_cand)}); cannot rank on it"
        )
    elif improvement is None:
        j.insufficient = True
        j.reasons.append(f"{task}: incumbent {metric} is zero; choose a metric with signal")
    elif improvement < -policy.max_task_regression_pct:
        j.regressed = True
        j.reasons.append(
            f"{task}: {metric} regressed {-improvement:.1f}% ({m_inc:g} -> {m_cand:g}), "
            f"above the {policy.max_task_regression_pct:.1f}% task cap"
        )
    return j


def _rate(resolved: int, valid: int) -> Fraction:
    """Exact, so 2/3 versus 4/6 never differs by a float rounding."""
    return Fraction(resolved, valid) if valid else Fraction(0)


def _share(resolved: int, valid: int) -> str:
    return f"{resolved}/{valid} ({float(100 * _rate(resolved, valid)):.1f}%)"


def _value(value: float | None) -> str:
    return "unmeasured" if value is None else f"{value:g}"
