"""A candidate that damages a skill's description is kept out by the gate, because of the auto arm.

End to end with the real CLI on the demo's gate tasks: the hand-written overlay drops the wasteful survey line
from work/SKILL.md (what the demo's proposer does, which makes every arm cheaper) and also rewrites work's
description into one about something else. The workflow arm names its skills, so it never reads a description
and still resolves every task; the auto arm's sessions read the descriptions, no longer pick `work`, and without
its edge-case instruction fail the hidden oracle on every gate task: the gate keeps the incumbent there, and a
promotion needs every required arm.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from skillevo.bench import plan, run_side
from skillevo.core.results import load_side
from skillevo.gate import build_promotion
from tests.bench_fixtures import ROOT, params
from tests.gate_rows import freeze

pytestmark = [pytest.mark.cli, pytest.mark.bwrap]
TASKS = ROOT / "tasks/tasks.yaml"
WASTEFUL = "- Read every module of the package end to end before editing, so that no caller is missed.\n"
DAMAGED = "Summarise meeting notes and draft the weekly status e-mail for the team."


def _overlay(root: Path) -> Path:
    text = (ROOT / "skills/work/SKILL.md").read_text()
    description = next(line for line in text.splitlines() if line.startswith("description: "))
    assert WASTEFUL in text
    (root / "work").mkdir(parents=True)
    (root / "work/SKILL.md").write_text(text.replace(WASTEFUL, "").replace(description, f"description: {DAMAGED}"))
    return root


def test_a_damaged_description_is_kept_out_by_the_auto_arm(tmp_path):
    # the demo's gate tasks, mild noise as in the demo; 3 runs (gate.min_runs), no baseline and one incumbent run
    # keep it short (the gate reads only the candidate side, each arm beside its control; the incumbent side is
    # bound, not measured), so the resolution margin is widened to what 9 runs per arm can bound (the demo's 20
    # points need 14), and the gate is told to trust a cost test on 9 runs an arm (the demo's 40 guard against
    # tails this test is not about), by the bootstrap-t test (3 rounds are too few for the test by betting)
    p = params(runs=3, simulator={"noise": "demo", "seed": 0}, sampling={"incumbent_runs": 1},
               gate={"max_resolution_drop_pct": 40, "min_total_runs": 9, "test": "bootstrap"},
               tasks={"gate": ["ledger-currencies", "ledger-discount-tax", "textstats-sentence-length"],
                      "evidence": ["textstats-unique-words"]})
    incumbent = plan("incumbent", TASKS, ROOT / "skills", None, p)
    incumbent.tasks = [t for t in incumbent.tasks if t.id in p.tasks.gate]
    incumbent.arms = [a for a in incumbent.arms if not a.is_baseline]
    candidate = plan("candidate", TASKS, ROOT / "skills", _overlay(tmp_path / "overlay"), p)
    required = [a.name for a in candidate.arms]
    assert required == ["candidate_auto", "candidate_workflow"]  # the auto arm reads every description
    run_side(incumbent, p, tmp_path / "inc", quiet=True)
    rows = run_side(candidate, p, tmp_path / "cand", quiet=True)

    auto = [r for r in rows if r["arm"] == "candidate_auto"]
    assert all(r["skills_loaded"] == [[]] and r["skill_invoked"] is False for r in auto)  # work was not chosen
    assert all(r["error_kind"] == "oracle-failed" for r in auto)  # measured failures, not skill-not-invoked
    assert all(r["resolved"] and r["skills_loaded"] == [["plan"], ["work"]] for r in rows
               if r["arm"] == "candidate_workflow")

    manifest = freeze(tuple(required), overlay_digest=candidate.overlay_digest, candidate_origin="hand-written",
                      proposer_model=None)
    promotion = build_promotion(load_side(tmp_path / "inc", "incumbent"), load_side(tmp_path / "cand", "candidate"),
                                manifest, p.gate, now=datetime.now(UTC))
    decisions = {d["candidate_arm"]: d for d in promotion["decisions"]}
    assert decisions["candidate_auto"]["decision"] == "keep_incumbent"
    assert decisions["candidate_auto"]["reasons"][0].startswith("resolution fell (9/9 -> 0/9 resolved)")
    quality = decisions["candidate_workflow"]["quality"]
    assert quality["candidate"] == quality["incumbent"] == {"resolved": 9, "valid_runs": 9}  # named arms see nothing
    assert decisions["candidate_workflow"]["decision"] == "promote"  # cheaper without the survey: alone, it would pass
