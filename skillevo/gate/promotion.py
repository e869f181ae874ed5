"""promotion.json: the gate's decisions bound to everything they depend on, and the check apply runs on it.

The file must carry enough to recompute every decision (the per-task aggregates and the whole policy), so
apply trusts arithmetic it can redo rather than a verdict someone could have edited.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from skillevo.core import controls, overlay, prediction, sampling
from skillevo.core.config import Policy, SamplingParams, section
from skillevo.core.layout import incumbent_arm_of
from skillevo.core.results import (
    EXCLUDED_ERROR_KINDS,
    GATE_METRICS,
    Side,
    aggregate,
    check_blocks,
    median,
    sequential_record,
    served_models,
)
from skillevo.files import documents, safefs
from skillevo.files.errors import BadInput
from skillevo.files.schemas import first_error, schema_validator, validate
from skillevo.gate import looks
from skillevo.gate.policy import decide, decide_arm
from skillevo.gate.verdict import PROMOTE
from skillevo.stats import betting

SCHEMA_VERSION = 1
BINDING_KEYS = (
    "benchmark_model",
    "served_models",
    "proposer_model",
    "effort",
    "candidate_origin",
    "overlay_digest",
    "destination_digests",
    "required_candidate_arms",
    "task_bindings",
    "policy",
    "backend",
    "sequential",
    "design",
)
CLOCK_SKEW = timedelta(minutes=5)


class PromotionRefused(BadInput):
    """promotion.json may not be applied; the message names the offending field."""


def load_freeze(path: Path) -> dict[str, Any]:
    """The freeze manifest, checked against its schema and the arm naming rule before anything is decided on it."""
    manifest: dict[str, Any] = validate(documents.load_json(path, what="freeze manifest"), "freeze-manifest", path)
    for i, arm in enumerate(manifest["required_candidate_arms"]):
        try:
            incumbent_arm_of(arm)
        except BadInput as e:
            raise BadInput(f"{path}: $.required_candidate_arms[{i}]: {e}") from None
    return manifest


def pipeline_bindings(freeze: Mapping[str, Any], bench: Mapping[str, Any], policy: Policy) -> dict[str, Any]:
    """What a promotion binds, from the freeze manifest, a side's bench.json and the gate params.

    Apply builds its `current` with the same function from what the pipeline holds at apply time.
    """
    return {
        "benchmark_model": bench["model"]["name"],
        "served_models": list(bench["served_models"]),
        "proposer_model": freeze["proposer_model"],
        "effort": bench["effort"],
        "candidate_origin": freeze["candidate_origin"],
        "overlay_digest": freeze["overlay_digest"],
        "destination_digests": dict(sorted(freeze["destinations"].items())),
        "required_candidate_arms": list(freeze["required_candidate_arms"]),
        "task_bindings": bench["task_bindings"],
        "policy": policy.to_dict(),
        "backend": bench["model"],
        "sequential": looks.binding(policy, bench.get("sequential")),
        "design": bench.get("design"),
    }


def build_promotion(
    incumbent: Side, candidate: Side, freeze: Mapping[str, Any], policy: Policy, *, now: datetime,
    plan: SamplingParams | None = None,
) -> dict[str, Any]:
    """Decide every required candidate arm and bind the result; refuse sides that were not benchmarked alike.
    `plan` is params `sampling` (the design's caps and bets; schema defaults when None)."""
    _require_aware(now, "now")
    gate_tasks = candidate.bench["task_split"]["gate"]
    judged = [b for b in incumbent.bench["task_bindings"] if b["id"] in gate_tasks]
    if judged != candidate.bench["task_bindings"]:
        raise BadInput(
            f"{incumbent.directory / 'bench.json'} and {candidate.directory / 'bench.json'}: $.task_bindings differ "
            "on the gate's tasks (rule: both sides are benchmarked with identical task bindings)"
        )
    declined = freeze["candidate_origin"] == overlay.DECLINED
    for key, what in (("task_split", "task split"), ("model", "model"), ("effort", "effort"),
                      ("served_models", "served model ids"), ("simulator", "simulator noise"),
                      ("replicate", "replicate")):
        if incumbent.bench[key] != candidate.bench[key] and not (declined and key == "served_models"):
            raise BadInput(
                f"{incumbent.directory / 'bench.json'} and {candidate.directory / 'bench.json'}: $.{key} differ "
                f"(rule: both sides are benchmarked with identical {what})"
            )
    for side in (incumbent, candidate):
        if served_models(side.rows) != side.bench["served_models"]:
            raise BadInput(f"{side.directory / 'bench.json'}: $.served_models does not list what its rows say the "
                           "API served (rule: served models)")
    if candidate.bench["overlay_digest"] != freeze["overlay_digest"]:
        raise BadInput(
            f"{candidate.directory / 'bench.json'}: $.overlay_digest is not the frozen overlay's "
            f"{freeze['overlay_digest']} (rule: the candidate side ran the frozen overlay)"
        )
    if candidate.bench["skills_digest"] != incumbent.bench["skills_digest"]:
        raise BadInput(f"{candidate.directory / 'bench.json'}: $.skills_digest is not the incumbent side's: the "
                       "candidate must run exactly the incumbent skills plus the frozen overlay (rule: one family)")
    generated = now.astimezone(UTC).replace(microsecond=0)
    if declined:  # a no_proposal generation: nothing was measured, nothing is decided
        if candidate.rows or candidate.bench["arms"]:
            raise BadInput(f"{candidate.directory}: ran arms for a generation whose proposer declined "
                           "(rule: a no_proposal generation measures nothing)")
        return _checked({"schema_version": SCHEMA_VERSION, "generated_at": generated.isoformat(),
                         "evidence_expires_at": expiry(incumbent, policy).isoformat(),
                         "evidence": {"incumbent": dict(incumbent.digests), "candidate": dict(candidate.digests)},
                         **pipeline_bindings(freeze, candidate.bench, policy), "decisions": [],
                         "no_proposal": freeze["no_proposal"]})
    if sequential_record(incumbent) is not None:  # load_side refuses it too; a Side can be built without it
        raise BadInput(f"{incumbent.directory / 'bench.json'}: $.sequential: only the candidate side runs in looks "
                       "(rule: sequential sampling)")
    record = sequential_record(candidate)
    if candidate.bench.get("controls") != "interleaved":
        raise BadInput(f"{candidate.directory / 'bench.json'}: $.controls: the candidate side ran no contemporaneous "
                       "controls; stored incumbent runs are never the control alone (rule: contemporaneous controls)")
    check_blocks(candidate)
    controls.check(candidate.bench, candidate.rows, candidate.digests["results_sha256"], str(candidate.directory))
    designs = _check_design(incumbent, candidate, policy, plan or section(SamplingParams, "sampling", {}, "defaults"))
    candidate_arms = {arm["name"] for arm in candidate.bench["arms"]}

    bindings = pipeline_bindings(freeze, candidate.bench, policy)
    classes = {binding["id"]: binding["class"] for binding in bindings["task_bindings"]}
    # the decision compares each candidate arm with its control from the same side; the incumbent side's stored
    # runs (the proposer's evidence) never stand in for it
    aggregates = aggregate(controls.settle(candidate.rows), classes, candidate_arms)  # re-run blocks in place
    decisions = decide(
        aggregates,
        policy,
        benchmark_model=bindings["benchmark_model"],
        candidate_arms=bindings["required_candidate_arms"],
        sequential=None if record is None else record.to_dict(),
        designs=designs,
    )
    promotion = {
        "schema_version": SCHEMA_VERSION,
        "generated_at": generated.isoformat(),
        "evidence_expires_at": expiry(candidate, policy).isoformat(),
        "evidence": {"incumbent": dict(incumbent.digests), "candidate": dict(candidate.digests)},
        **bindings,
        "decisions": decisions,
    }
    if (scored := prediction.scored(freeze.get("prediction_pct"), decisions)) is not None:
        promotion["prediction"] = scored  # the proposer's record, never the decision's input
    return _checked(promotion)


def _checked(promotion: dict[str, Any]) -> dict[str, Any]:
    error = first_error(promotion, schema_validator("promotion"))
    if error:
        raise BadInput(f"the promotion these inputs make does not match its schema: {error}")
    return promotion


def _check_design(incumbent: Side, candidate: Side, policy: Policy, plan: SamplingParams
                  ) -> dict[str, betting.Design] | None:
    """The design the candidate side ran under (its cost caps and the test's bets) must be the one the incumbent
    side gives (skillevo.core.sampling.design, drawn again here): a side run with looser caps, or bets sized by
    someone else, is refused. The bootstrap test, and the geometric and seed policies, bet nothing and need none."""
    recorded = candidate.bench.get("design")
    if policy.policy != "per_resolved" or policy.test != "betting":
        return None
    where = candidate.directory / "bench.json"
    if recorded is None:
        raise BadInput(f"{where}: $.design: the candidate side ran without a design (no --incumbent): no cost cap "
                       "bounded its runs, and the test has no bets fixed before its data (rule: design)")
    controls_ = sorted({arm["incumbent_arm"] for arm in candidate.bench["arms"]})
    try:
        expected = sampling.designs(incumbent.rows, candidate.bench["task_split"]["gate"], controls_,
                                    plan, policy.metric)
    except BadInput as e:
        raise BadInput(f"{incumbent.directory}: {e}") from None
    found = {arm: d.to_dict() for arm, d in expected.items()}
    if json.loads(json.dumps(found)) != recorded:
        raise BadInput(f"{where}: $.design: is not what the incumbent side {incumbent.directory} gives (caps and "
                       f"bets sized from other runs or other params) (rule: design)")
    return {arm: betting.Design.from_dict(d) for arm, d in recorded.items()}


def expiry(candidate: Side, policy: Policy) -> datetime:
    """When the evidence stops counting: max_age_days after the oldest row the decision rests on was recorded (a
    reused row ages)."""
    oldest = candidate.oldest_recorded_at
    if oldest is None:
        raise BadInput(f"{candidate.directory}: no row: there is no evidence to decide on (rule: evidence)")
    return (datetime.fromisoformat(oldest) + timedelta(days=policy.max_age_days)).astimezone(UTC)


def write_promotion(promotion: Mapping[str, Any], path: Path) -> None:
    """Validate, then replace the file atomically and durably so a reader never sees half a promotion."""
    error = first_error(promotion, schema_validator("promotion"))
    if error:
        raise BadInput(f"refusing to write an invalid promotion.json: {error}")
    safefs.write_atomic(path, documents.dump_json(promotion))


def recompute_decisions(promotion: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each stored decision decided again from its own embedded aggregates under the embedded policy."""
    policy = Policy.from_dict(promotion["policy"], "promotion.json policy")
    recomputed = []
    for stored in promotion["decisions"]:
        aggregates = {
            (agg["task"], agg["arm"]): agg for row in stored["tasks"] for agg in (row["incumbent"], row["candidate"])
        }
        recomputed.append(
            decide_arm(
                aggregates,
                policy,
                benchmark_model=promotion["benchmark_model"],
                incumbent_arm=stored["incumbent_arm"],
                candidate_arm=stored["candidate_arm"],
                sequential=promotion["sequential"],
                design=None if promotion["design"] is None else betting.Design.from_dict(
                    promotion["design"][stored["incumbent_arm"]]),
            )
        )
    return recomputed


def validate_for_apply(promotion: Any, current: Mapping[str, Any], now: datetime) -> None:
    """Raise PromotionRefused unless this promotion may be applied to what the pipeline holds now.

    `current` has one entry per BINDING_KEYS name (`policy` as a Policy or its dict).
    """
    _require_aware(now, "now")
    error = first_error(promotion, schema_validator("promotion"))
    if error:
        raise PromotionRefused(f"promotion.json does not match its schema: {error}")
    for key in BINDING_KEYS:
        if key not in current:
            raise PromotionRefused(f"{key}: the pipeline supplied no current value to compare with")
        expected = current[key].to_dict() if isinstance(current[key], Policy) else current[key]
        difference = first_difference(promotion[key], expected, key)
        if difference:
            raise PromotionRefused(f"{difference}: differs from what the pipeline holds now")
    _check_timestamps(promotion, now)
    _check_decisions(promotion)


def _check_timestamps(promotion: Mapping[str, Any], now: datetime) -> None:
    generated = _parse_time(promotion, "generated_at")
    expires = _parse_time(promotion, "evidence_expires_at")
    if generated > now + CLOCK_SKEW:
        raise PromotionRefused(f"generated_at: {promotion['generated_at']} is in the future (rule: no future times)")
    if expires > generated + timedelta(days=promotion["policy"]["max_age_days"]):
        raise PromotionRefused(f"evidence_expires_at: {promotion['evidence_expires_at']} is more than max_age_days "
                               "after the promotion was made")
    if now > expires:
        raise PromotionRefused(f"evidence_expires_at: the evidence expired at {promotion['evidence_expires_at']} "
                               "(rule: evidence max age)")


def _check_decisions(promotion: Mapping[str, Any]) -> None:
    decisions = promotion["decisions"]
    if not decisions or promotion.get("no_proposal") is not None:  # never vacuously true: no decision applies nothing
        raise PromotionRefused(f"decisions: none: a no_proposal generation ({promotion.get('no_proposal')}) has "
                               "nothing to apply (rule: only a promoted arm is applied)")
    arms = [decision["candidate_arm"] for decision in decisions]
    if sorted(arms) != sorted(promotion["required_candidate_arms"]):
        raise PromotionRefused(
            f"decisions: cover arms {arms}, not exactly required_candidate_arms {promotion['required_candidate_arms']}"
        )
    task_ids = sorted(binding["id"] for binding in promotion["task_bindings"])
    for i, stored in enumerate(decisions):
        where = f"decisions[{i}]"
        if stored["incumbent_arm"] != incumbent_arm_of(stored["candidate_arm"]):
            raise PromotionRefused(f"{where}.incumbent_arm: {stored['incumbent_arm']!r} is not the paired arm")
        if stored["decision"] != PROMOTE:
            raise PromotionRefused(f"{where}.decision: is {stored['decision']!r}; only {PROMOTE!r} can be applied")
        if [row["task"] for row in stored["tasks"]] != task_ids:
            raise PromotionRefused(f"{where}.tasks: do not cover the bound tasks {task_ids} once each, in order")
        for j, row in enumerate(stored["tasks"]):
            for side in ("incumbent", "candidate"):
                _check_aggregate(row[side], f"{where}.tasks[{j}].{side}")
        _check_look(promotion["sequential"], stored, where)
        recomputed = recompute_decisions({**promotion, "decisions": [stored]})[0]
        difference = first_difference(stored, recomputed, where)
        if difference:
            raise PromotionRefused(f"{difference}: the stored decision does not follow from its embedded aggregates")


def _check_look(sequential: Mapping[str, Any] | None, stored: Mapping[str, Any], where: str) -> None:
    """The candidate's runs are the stopped look's: a later look's laxer level never judges fewer runs."""
    if sequential is None:
        return
    reach = sequential["looks"][sequential["stopped_at_look"] - 1]
    for arm in ("candidate", "incumbent"):
        found = max((row[arm]["runs"] for row in stored["tasks"]), default=reach)
        if found != reach:
            raise PromotionRefused(f"{where}.tasks: the {arm if arm == 'candidate' else 'control'} ran {found} runs "
                                   f"in a cell, but look {sequential['stopped_at_look']} is {reach} runs per cell")


def _check_aggregate(agg: Mapping[str, Any], where: str) -> None:
    """Counts a real aggregation could have produced; the schema cannot relate fields to each other."""
    excluded = sum(count for kind, count in agg["error_kinds"].items() if kind in EXCLUDED_ERROR_KINDS)
    if agg["runs"] != agg["valid_runs"] + agg["excluded_runs"]:
        raise PromotionRefused(f"{where}.runs: is not valid_runs + excluded_runs")
    if agg["excluded_runs"] != excluded:
        raise PromotionRefused(f"{where}.excluded_runs: does not match the excluded error kinds ({excluded})")
    if agg["resolved"] > agg["valid_runs"]:
        raise PromotionRefused(f"{where}.resolved: exceeds valid_runs")
    samples = agg["samples"]
    if len(samples) != agg["valid_runs"] or len({s["run"] for s in samples}) != len(samples):
        raise PromotionRefused(f"{where}.samples: not one sample per valid run")
    if sum(1 for s in samples if s["resolved"]) != agg["resolved"]:
        raise PromotionRefused(f"{where}.samples: resolved samples do not add up to resolved")
    for metric in GATE_METRICS:
        if agg[metric] != median([s[metric] for s in samples]):
            raise PromotionRefused(f"{where}.{metric}: is not the median of its samples (rule: promotion recomputes)")


def first_difference(stored: Any, expected: Any, path: str) -> str | None:
    """The path of the first place two JSON values differ, so a refusal can name the field."""
    if isinstance(stored, dict) and isinstance(expected, dict):
        for key in sorted(set(stored) | set(expected)):
            where = f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"
            if key not in stored or key not in expected:
                return where
            difference = first_difference(stored[key], expected[key], where)
            if difference:
                return difference
        return None
    if isinstance(stored, list) and isinstance(expected, list):
        for i, (a, b) in enumerate(zip(stored, expected, strict=False)):
            difference = first_difference(a, b, f"{path}[{i}]")
            if difference:
                return difference
        return None if len(stored) == len(expected) else f"{path}[{min(len(stored), len(expected))}]"
    same = stored == expected and isinstance(stored, bool) == isinstance(expected, bool)
    return None if same else path


def _parse_time(promotion: Mapping[str, Any], key: str) -> datetime:
    """The schema's pattern already demands an explicit offset; this catches impossible dates."""
    try:
        return datetime.fromisoformat(promotion[key])
    except ValueError as e:
        raise PromotionRefused(f"{key}: not a valid ISO-8601 time: {e}") from e


def _require_aware(moment: datetime, name: str) -> None:
    if moment.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware")
