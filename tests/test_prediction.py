"""The proposer is held to its prediction (issue 33, item 2): proposal.md's `Predicted improvement: n%` is bound
by freeze, scored by the gate against each arm's interval, handed to the next proposer and counted by
`make report`. End to end through the real stages: tests/test_pipeline.py and tests/test_pipeline_evolve.py."""

from __future__ import annotations

import json

import pytest

from skillevo import propose
from skillevo.core import prediction
from skillevo.evidence.bundle import gate_summary
from skillevo.files.errors import BadInput
from skillevo.files.schemas import SCHEMA_DIR


@pytest.mark.parametrize("text, value", [
    ("# Proposal\n\nPredicted improvement: 12%\n", 12.0),
    ("Predicted improvement: -4.5 %.\n", -4.5),
    ("  predicted IMPROVEMENT:+7%\n", 7.0),
    ("# Proposal\n\nNo figure here; the cost should fall.\n", None),
])
def test_a_prediction_is_one_figure_on_its_own_line_or_none(text, value):
    assert prediction.parse(text, "out/proposal.md") == value


@pytest.mark.parametrize("text, rule", [
    ("Predicted improvement: 12%\nPredicted improvement: 30%\n", "2 lines start"),
    ("Predicted improvement: a lot\n", "is not one figure in percent"),
    ("Predicted improvement: 120%\n", "is not one figure in percent"),
    ("Predicted improvement: 12% or 30%\n", "is not one figure in percent"),
    ("Predicted improvement: 12\n", "is not one figure in percent"),
])
def test_a_prediction_that_cannot_be_scored_is_refused_naming_the_file_and_the_rule(text, rule):
    with pytest.raises(BadInput, match=rule) as caught:
        prediction.parse(text, "results/proposal/proposal.md")
    assert str(caught.value).startswith("results/proposal/proposal.md: ") and "(rule: one line" in str(caught.value)


def test_the_exported_proposal_is_read_through_the_one_parser(tmp_path):
    (tmp_path / "proposal.md").write_text("# Proposal\n\nPredicted improvement: 15%\n")
    assert propose.predicted(tmp_path) == 15.0
    (tmp_path / "proposal.md").write_text("Predicted improvement: 15%\n" * 2)
    with pytest.raises(BadInput, match=str(tmp_path / "proposal.md")):
        propose.predicted(tmp_path)


def _estimate(low: float, high: float) -> dict:
    return {"improvement_pct": (low + high) / 2, "interval_pct": [low, high]}


@pytest.mark.parametrize("predicted, estimate, expected", [
    (12.0, _estimate(9.3, 14.8), "hit"),
    (9.3, _estimate(9.3, 14.8), "hit"),  # the interval's ends are inside it
    (28.0, _estimate(9.3, 14.8), "miss"),  # the right direction, the wrong size
    (5.0, _estimate(-3.0, 4.0), "miss"),  # the interval spans zero: no sign is contradicted
    (12.0, _estimate(-9.0, -2.0), "wrong sign"),
    (-5.0, _estimate(2.0, 9.0), "wrong sign"),
    (12.0, None, "unmeasured"),
])
def test_the_score_against_one_arm_s_interval(predicted, estimate, expected):
    assert prediction.score(predicted, estimate) == expected


def test_every_score_the_code_gives_is_one_the_promotion_schema_allows():
    schema = json.loads((SCHEMA_DIR / "promotion.schema.json").read_text())
    allowed = schema["properties"]["prediction"]["properties"]["scores"]["additionalProperties"]["enum"]
    assert tuple(allowed) == prediction.SCORES


def test_the_record_over_generations_counts_each_scored_arm_and_the_silent_proposals():
    decisions = [{"candidate_arm": "candidate_auto", "estimate": _estimate(9.0, 15.0)},
                 {"candidate_arm": "candidate_work", "estimate": _estimate(-8.0, -1.0)}]
    promotions = [
        {"candidate_origin": "proposer", "decisions": decisions, "prediction": prediction.scored(12.0, decisions)},
        {"candidate_origin": "proposer", "decisions": decisions},  # no prediction line
        {"candidate_origin": "hand-written", "decisions": decisions},  # a person's: not the proposer's record
        {"candidate_origin": "declined", "decisions": [], "no_proposal": "nothing to change"},
    ]
    assert prediction.record(promotions) == ("the proposer's record: 50% hits (1 hit, 0 miss, 1 wrong sign, "
                                             "0 unmeasured); 1 proposal(s) without a prediction")
    assert prediction.record([]).startswith("the proposer's record: nothing scored yet")


def test_the_next_proposer_reads_how_its_prediction_fared():
    decisions = [{"candidate_arm": "candidate_auto", "decision": "keep_incumbent", "reasons": ["no better"],
                  "estimate": _estimate(-2.0, 3.0)}]
    promotion = {"candidate_origin": "proposer", "decisions": decisions,
                 "prediction": prediction.scored(20.0, decisions)}
    assert gate_summary(promotion)[-1] == ("prediction: The proposer predicted 20% cheaper per resolved task on the "
                                           "gate's tasks; scored against each arm's measured interval: "
                                           "candidate_auto: miss.")
    del promotion["prediction"]
    assert "made no prediction" in gate_summary(promotion)[-1]
