"""A generation whose proposer finds nothing in the evidence to change is a cheap, reported no_proposal (issue 32,
item 4): propose exports only the reason, freeze an empty overlay and a `declined` manifest, the candidate side
measures nothing, and the gate records no decision, which apply refuses. Every step fails closed: a declined
manifest that carries files, a candidate side that ran arms for it, or an empty decision list without a reason."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from skillevo import propose
from skillevo.core import layout, overlay
from skillevo.files.errors import BadInput
from skillevo.files.schemas import first_error, schema_validator
from skillevo.gate import build_promotion, pipeline_bindings
from skillevo.gate.promotion import PromotionRefused, validate_for_apply
from skillevo.gate.report import write_outputs
from tests.gate_rows import freeze, sides
from tests.test_gate_promotion import DEFAULT, NOW, promoting_rows

REASON = "In 12 evidence run(s), no line of the evolvable skills gave tool calls that a run shows."


def _declined_manifest(**fields) -> dict:
    return freeze((), **{"overlay_digest": layout.tree_digest({}, set()), "files": [], "destinations": {},
                         "candidate_origin": "declined", "changed_lines": 0, "no_proposal": REASON, **fields})


def _declined_sides():
    incumbent, candidate = sides(promoting_rows())
    bench = {**candidate.bench, "arms": [], "cells": 0, "rows": 0, "served_models": [],
             "overlay_digest": layout.tree_digest({}, set()), "design": None}
    return incumbent, dataclasses.replace(candidate, bench=bench, rows=())


def test_the_proposer_s_reason_is_its_proposal_s_first_paragraph(tmp_path):
    out = tmp_path / "proposal"
    out.mkdir()
    (out / "proposal.md").write_text(f"{overlay.NO_PROPOSAL}\n\n{REASON}\nSecond line.\n\nMore detail.\n")
    assert propose.declined(out) == REASON + " Second line."
    (out / "overlay").mkdir()  # an overlay beside it: a proposal, whatever its text says
    assert propose.declined(out) is None
    (out / "overlay").rmdir()
    (out / "proposal.md").write_text("# Proposal: drop a line\n")
    assert propose.declined(out) is None


@pytest.mark.parametrize("files, header", [
    ({"proposal.md": "I looked and found nothing."}, "not headed"),
    ({"proposal.md": f"{overlay.NO_PROPOSAL}\n\nnothing", "notes.txt": "x"}, "something else beside it"),
    ({}, "nothing at all"),
])
def test_a_session_that_wrote_no_overlay_and_no_reasoned_refusal_is_refused(tmp_path, files, header):
    ws_out = tmp_path / "out"
    ws_out.mkdir()
    for name, text in files.items():
        (ws_out / name).write_text(text)
    with pytest.raises(propose.ProposalRefused, match="no proposal.md headed '# No proposal'"):
        propose.read_declined(ws_out)


def test_a_declined_manifest_may_carry_no_candidate():
    validator = schema_validator("freeze-manifest")
    assert first_error(_declined_manifest(), validator) is None
    for forged in (_declined_manifest(files=freeze()["files"]), _declined_manifest(required_candidate_arms=[
            "candidate_workflow"]), _declined_manifest(destinations={"skills/work/SKILL.md": "3" * 64}),
            {k: v for k, v in _declined_manifest().items() if k != "no_proposal"}):
        assert first_error(forged, validator) is not None, forged
    assert first_error({**freeze(), "no_proposal": REASON}, validator) is not None  # a reason only when declined
    assert first_error({**freeze(), "files": []}, validator) is not None  # a proposal has files


def test_the_gate_records_no_decision_and_apply_refuses_it(tmp_path):
    incumbent, candidate = _declined_sides()
    manifest = _declined_manifest()
    promotion = build_promotion(incumbent, candidate, manifest, DEFAULT, now=NOW)
    assert promotion["decisions"] == [] and promotion["no_proposal"] == REASON
    assert promotion["candidate_origin"] == "declined"
    current = pipeline_bindings(manifest, candidate.bench, DEFAULT)
    with pytest.raises(PromotionRefused, match="a no_proposal generation .* has nothing to apply"):
        validate_for_apply(json.loads(json.dumps(promotion)), current, NOW)
    forged = {**copy.deepcopy(promotion), "candidate_origin": "proposer"}
    forged.pop("no_proposal")  # an empty decision list is refused by the schema without the reason
    with pytest.raises(PromotionRefused, match="does not match its schema"):
        validate_for_apply(forged, current, NOW)
    lines = write_outputs(tmp_path, promotion, incumbent, candidate, manifest)
    assert lines == [f"no_proposal: {lines[0].split(': ', 1)[1]}"] and REASON in lines[0]
    report = (tmp_path / "report.md").read_text()
    assert "- **no_proposal** — the proposer found nothing in the evidence to change" in report
    assert json.loads((tmp_path / "metrics.json").read_text())["sessions"] == len(incumbent.rows)


def test_a_candidate_side_that_ran_arms_for_a_declined_generation_is_refused():
    incumbent, candidate = sides(promoting_rows())
    declined = _declined_manifest()
    bench = {**candidate.bench, "overlay_digest": declined["overlay_digest"]}
    with pytest.raises(BadInput, match="rule: a no_proposal generation measures nothing"):
        build_promotion(incumbent, dataclasses.replace(candidate, bench=bench), declined, DEFAULT, now=NOW)
    _, empty = _declined_sides()
    with pytest.raises(BadInput, match="differ|is not the frozen overlay"):  # a proposal's manifest, an empty side
        build_promotion(incumbent, empty, freeze(), DEFAULT, now=NOW)



def test_a_pulled_no_proposal_freeze_without_its_empty_overlay_is_read_as_empty(tmp_path):
    """DVC restores no empty directory on a pull: a teammate's results/freeze holds the manifest alone. The
    candidate bench reads that as the empty overlay it was, and only when the manifest says declined."""
    from skillevo.bench.sideplan import _declined

    frozen = tmp_path / "freeze"
    frozen.mkdir()
    (frozen / "manifest.json").write_text(json.dumps(_declined_manifest()))
    assert _declined(frozen / "overlay")
    (frozen / "overlay").mkdir()
    assert not _declined(frozen / "overlay")  # there: read as it is
    (frozen / "overlay").rmdir()
    (frozen / "manifest.json").write_text(json.dumps(freeze()))
    assert not _declined(frozen / "overlay")  # a proposal's overlay gone missing: the reader refuses it
    (frozen / "manifest.json").write_text(json.dumps({**_declined_manifest(), "files": freeze()["files"]}))
    with pytest.raises(BadInput, match="freeze-manifest"):
        _declined(frozen / "overlay")
