"""promotion.json: what it binds, and validate_for_apply refusing every kind of tampering by name."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skillevo.core.config import Policy
from skillevo.core.results import Side
from skillevo.files.errors import BadInput
from skillevo.files.schemas import first_error, schema_validator
from skillevo.gate import (
    PromotionRefused,
    build_promotion,
    load_freeze,
    pipeline_bindings,
    recompute_decisions,
    validate_for_apply,
    write_promotion,
)
from tests.gate_rows import (
    CANDIDATE,
    DESTINATIONS,
    INCUMBENT,
    MODEL,
    OVERLAY,
    freeze,
    runs,
    sides,
)

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(days=1)
# Three tasks of eight runs: the bound on a resolution drop needs a margin this wide, and fewer runs than the
# heavy-tail minimum (both tested in tests/test_gate_stratified.py); a halved cost reaches the test by betting's
# 1 / alpha in some seven rounds (skillevo/stats/betting.py).
DEFAULT = Policy.from_dict({"max_resolution_drop_pct": 50, "min_total_runs": 1, "test": "betting"})


def promoting_rows():
    return (
        runs("t1", INCUMBENT, [1.0, 1.1, 0.9, 1.05] * 2) + runs("t1", CANDIDATE, [0.5, 0.55, 0.45, 0.5] * 2)
        + runs("t2", INCUMBENT, [2.0, 2.1, 1.9, 2.0] * 2) + runs("t2", CANDIDATE, [1.0, 0.9, 1.1, 1.0] * 2)
        + runs("t3", INCUMBENT, [1.0, 1.05, 0.95, 1.0] * 2) + runs("t3", CANDIDATE, [0.5, 0.45, 0.55, 0.5] * 2)
    )


def stored(rows=None, manifest=None, policy=DEFAULT):
    """A promotion as apply reads it: built, written, read back."""
    incumbent, candidate = sides(rows or promoting_rows())
    promotion = build_promotion(incumbent, candidate, manifest or freeze(), policy, now=NOW)
    return json.loads(json.dumps(promotion)), pipeline_bindings(manifest or freeze(), candidate.bench, policy)


def test_promotion_binds_everything_apply_checks():
    promotion, _ = stored()
    assert first_error(promotion, schema_validator("promotion")) is None
    assert promotion["schema_version"] == 1
    assert promotion["generated_at"] == "2025-03-01T12:00:00+00:00"
    assert promotion["evidence_expires_at"] == "2025-05-30T12:00:00+00:00"
    assert promotion["benchmark_model"] == MODEL["name"] and promotion["backend"] == MODEL
    assert promotion["proposer_model"] == "skillevo-sim-proposer-1" and promotion["candidate_origin"] == "proposer"
    assert promotion["effort"] == "medium"
    assert promotion["overlay_digest"] == OVERLAY
    assert promotion["destination_digests"] == DESTINATIONS
    assert promotion["required_candidate_arms"] == [CANDIDATE]
    assert [b["id"] for b in promotion["task_bindings"]] == ["t1", "t2", "t3"]
    assert promotion["policy"] == DEFAULT.to_dict()
    [decision] = promotion["decisions"]
    assert decision["decision"] == "promote" and decision["policy"] == "per_resolved"
    assert 45 < decision["estimate"]["improvement_pct"] < 55
    assert decision["tasks"][0]["candidate"]["cost_usd"] == 0.5
    assert decision["test"]["kind"] == "betting" and decision["test"]["e_value"] >= 20
    assert promotion["design"] == {INCUMBENT: decision["test"]["design"]}


def test_a_stored_promotion_validates_and_recomputes():
    promotion, current = stored()
    validate_for_apply(promotion, current, LATER)
    assert recompute_decisions(promotion) == promotion["decisions"]


def test_the_proposer_s_prediction_is_scored_beside_the_decision_never_in_it():
    """Issue 33, item 2: a 50% saving measured; a prediction of 50% hits, 10% misses, -10% has the wrong sign; the
    decision and apply's checks are the same whatever was predicted."""
    plain, current = stored()
    assert "prediction" not in plain  # a manifest without prediction_pct: nothing scored, nothing invented
    low, high = plain["decisions"][0]["estimate"]["interval_pct"]
    for predicted, score in ((round((low + high) / 2, 1), "hit"), (10.0, "miss"), (-10.0, "wrong sign")):
        promotion, _ = stored(manifest=freeze(prediction_pct=predicted))
        assert promotion["prediction"] == {"improvement_pct": predicted, "scores": {CANDIDATE: score}}
        assert first_error(promotion, schema_validator("promotion")) is None
        assert promotion["decisions"] == plain["decisions"]
        validate_for_apply(promotion, current, LATER)


def test_hand_written_overlays_have_no_proposer_model():
    manifest = freeze(candidate_origin="hand-written", proposer_model=None)
    promotion, current = stored(manifest=manifest)
    assert promotion["proposer_model"] is None
    validate_for_apply(promotion, current, LATER)
    with pytest.raises(BadInput, match="proposer_model"):
        stored(manifest=freeze(candidate_origin="hand-written"))


def test_write_is_deterministic_and_refuses_an_invalid_document(tmp_path: Path):
    promotion, _ = stored()
    write_promotion(promotion, tmp_path / "a.json")
    write_promotion(copy.deepcopy(promotion), tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    promotion["decisions"][0]["extra"] = 1
    with pytest.raises(ValueError, match="extra"):
        write_promotion(promotion, tmp_path / "c.json")
    assert not (tmp_path / "c.json").exists()


def test_sides_must_be_benchmarked_alike_and_with_the_frozen_overlay():
    incumbent, candidate = sides(promoting_rows())

    def with_candidate_bench(change):
        bench_json = copy.deepcopy(candidate.bench)
        change(bench_json)
        other = Side(candidate.directory, bench_json, candidate.rows)
        return build_promotion(incumbent, other, freeze(), DEFAULT, now=NOW)

    with pytest.raises(BadInput, match=r"task_bindings differ .*identical task bindings"):
        with_candidate_bench(lambda b: b["task_bindings"][0].update(prompt_sha256="9" * 64))
    with pytest.raises(BadInput, match=r"\$\.model differ"):
        with_candidate_bench(lambda b: b["model"].update(name="another-model"))
    with pytest.raises(BadInput, match="frozen overlay"):
        build_promotion(incumbent, candidate, freeze(overlay_digest="9" * 64), DEFAULT, now=NOW)
    with pytest.raises(ValueError, match="timezone-aware"):
        build_promotion(incumbent, candidate, freeze(), DEFAULT, now=datetime(2025, 1, 1))


@pytest.mark.parametrize(
    "manifest, message",
    [
        (freeze(required_candidate_arms=["workflow"]), r"required_candidate_arms\[0\].*candidate_"),
        (freeze(overlay_digest="short"), r"\$\.overlay_digest"),
        (freeze(destinations={"/etc/passwd": "b" * 64}), r"\$\.destinations"),
        ({k: v for k, v in freeze().items() if k != "destinations"}, "'destinations' is a required property"),
    ],
)
def test_a_bad_freeze_manifest_is_refused_by_name(tmp_path: Path, manifest, message):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(BadInput, match=message) as error:
        load_freeze(path)
    assert str(path) in str(error.value)


def _keep_promotion():
    rows = promoting_rows()
    incumbent = {(r["task"], r["run"]): r["cost_usd"] for r in rows if r["arm"] == INCUMBENT}
    for r in rows:
        if r["arm"] == CANDIDATE:
            r["cost_usd"] = round(incumbent[(r["task"], r["run"])] * 1.01, 4)  # a shade dearer everywhere
    return stored(rows)


def _flip(p):
    p["decisions"][0]["decision"] = "promote"


def _shift(key, days):
    def tamper(p):
        p[key] = (datetime.fromisoformat(p[key]) + timedelta(days=days)).isoformat()
    return tamper


def _set(path, value):
    def tamper(p):
        target = p
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
    return tamper


def _remove_task(p):
    del p["decisions"][0]["tasks"][1]


# name: (tamper on the stored promotion, fragment the refusal must name)
TAMPERS = {
    "a sample edited": (_set(["decisions", 0, "tasks", 0, "candidate", "samples", 0, "cost_usd"], 0.25),
                        "decisions[0]."),
    "embedded median edited": (_set(["decisions", 0, "tasks", 1, "candidate", "cost_usd"], 1.5),
                               "decisions[0].tasks[1].candidate.cost_usd: is not the median of its samples"),
    "estimate edited": (_set(["decisions", 0, "estimate", "improvement_pct"], 25.0),
                        "decisions[0].estimate.improvement_pct"),
    "reason edited": (_set(["decisions", 0, "reasons", 0], "trust me"), "decisions[0].reasons[0]"),
    "task removed": (_remove_task, "decisions[0].tasks"),
    "extra top-level field": (_set(["note"], "x"), "'note' was unexpected"),
    "extra nested field": (_set(["decisions", 0, "tasks", 0, "incumbent", "bonus"], 1),
                           "$.decisions[0].tasks[0].incumbent"),
    "expiry pushed out": (_shift("evidence_expires_at", 30), "evidence_expires_at"),
    "expiry before generation": (_shift("evidence_expires_at", -91), "evidence_expires_at"),
    "generated in the future": (_shift("generated_at", 3), "generated_at"),
    "naive timestamp": (_set(["generated_at"], "2025-03-01T12:00:00"), "$.generated_at"),
    "destination digest changed": (
        _set(["destination_digests", "skills/work/SKILL.md"], "c" * 64), "destination_digests['skills/work/SKILL.md']"
    ),
    "overlay digest changed": (_set(["overlay_digest"], "c" * 64), "overlay_digest"),
    "policy loosened": (_set(["policy", "min_improvement_pct"], 1.0), "policy.min_improvement_pct"),
    "design loosened": (_set(["design", INCUMBENT, "tasks", "t1", "cap"], 100.0), "design.workflow.tasks.t1.cap"),
    "task binding changed": (_set(["task_bindings", 0, "verify_sha256"], "c" * 64), "task_bindings[0].verify_sha256"),
    "backend changed": (_set(["backend", "simulated"], False), "backend.simulated"),
    "arm renamed": (_set(["decisions", 0, "incumbent_arm"], "direct"), "decisions[0].incumbent_arm"),
    "impossible aggregate": (_set(["decisions", 0, "tasks", 0, "candidate", "resolved"], 9),
                             "decisions[0].tasks[0].candidate.resolved"),
    "runs do not add up": (_set(["decisions", 0, "tasks", 0, "incumbent", "runs"], 5),
                           "decisions[0].tasks[0].incumbent.runs"),
    "schema version": (_set(["schema_version"], 2), "$.schema_version"),
}


@pytest.mark.parametrize("name", TAMPERS)
def test_tampered_promotion_is_refused_naming_the_field(name):
    tamper, field = TAMPERS[name]
    promotion, current = stored()
    validate_for_apply(copy.deepcopy(promotion), current, LATER)
    tamper(promotion)
    with pytest.raises(PromotionRefused) as refused:
        validate_for_apply(promotion, current, LATER)
    assert field in str(refused.value)


def test_flipping_a_kept_decision_to_promote_is_refused():
    promotion, current = _keep_promotion()
    assert promotion["decisions"][0]["decision"] == "keep_incumbent"
    with pytest.raises(PromotionRefused, match=r"decisions\[0\]\.decision: is 'keep_incumbent'"):
        validate_for_apply(promotion, current, LATER)
    _flip(promotion)
    with pytest.raises(PromotionRefused, match=r"decisions\[0\]\.decision: the stored decision does not follow"):
        validate_for_apply(promotion, current, LATER)


@pytest.mark.parametrize(
    "key, value, field",
    [
        ("benchmark_model", "other-model-1", "benchmark_model"),
        ("proposer_model", None, "proposer_model"),
        ("effort", "high", "effort"),
        ("candidate_origin", "hand-written", "candidate_origin"),
        ("required_candidate_arms", [CANDIDATE, "candidate_direct"], "required_candidate_arms[1]"),
        ("policy", Policy.from_dict({'max_age_days': 30}), "policy.max_age_days"),
    ],
)
def test_a_binding_that_moved_since_the_gate_is_refused(key, value, field):
    promotion, current = stored()
    with pytest.raises(PromotionRefused) as refused:
        validate_for_apply(promotion, {**current, key: value}, LATER)
    assert str(refused.value).startswith(field)


def test_current_accepts_a_policy_object_and_refuses_a_missing_binding():
    promotion, current = stored()
    validate_for_apply(promotion, {**current, "policy": DEFAULT}, LATER)
    with pytest.raises(PromotionRefused, match="^backend: the pipeline supplied no current value"):
        validate_for_apply(promotion, {k: v for k, v in current.items() if k != "backend"}, LATER)


def test_decisions_must_cover_exactly_the_required_arms():
    promotion, current = stored()
    promotion["decisions"].append(copy.deepcopy(promotion["decisions"][0]))
    with pytest.raises(PromotionRefused, match="^decisions: cover arms"):
        validate_for_apply(promotion, current, LATER)


@pytest.mark.parametrize(
    "now, ok",
    [
        (NOW - timedelta(minutes=4), True),  # clock skew tolerated
        (NOW - timedelta(minutes=6), False),  # generated in the future
        (NOW + timedelta(days=90), True),
        (NOW + timedelta(days=90, seconds=1), False),  # expired
    ],
)
def test_evidence_window(now, ok):
    promotion, current = stored()
    if ok:
        validate_for_apply(promotion, current, now)
    else:
        with pytest.raises(PromotionRefused, match="^(generated_at|evidence_expires_at)"):
            validate_for_apply(promotion, current, now)


def test_refusal_is_a_value_error_and_now_must_be_aware():
    assert issubclass(PromotionRefused, ValueError)
    promotion, current = stored()
    with pytest.raises(ValueError, match="timezone-aware"):
        validate_for_apply(promotion, current, datetime(2025, 3, 2))


@pytest.mark.parametrize("name", ["", "claude-sonnet-latest"])
def test_an_unnamed_model_is_recorded_as_insufficient_evidence_not_rejected(name):
    incumbent, candidate = sides(promoting_rows())
    for side in (incumbent, candidate):
        side.bench["model"]["name"] = name
    promotion = build_promotion(incumbent, candidate, freeze(), DEFAULT, now=NOW)
    assert promotion["decisions"][0]["decision"] == "insufficient_evidence"
    assert "is not a pinned model id" in promotion["decisions"][0]["reasons"][0]
