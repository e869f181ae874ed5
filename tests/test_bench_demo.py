"""The demo bench, end to end with the real CLI: the pipeline's own self-test.

The incumbent skills resolve every demo task; the known-better overlay (the wasteful instruction
dropped) is cheaper on every task and still resolves all; the known-worse overlay (the necessary
instruction dropped) fails the hidden oracle exactly where that instruction matters.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from skillevo.bench import plan, run_side
from skillevo.files.schemas import validate
from tests.bench_fixtures import ROOT, params

pytestmark = [pytest.mark.cli, pytest.mark.bwrap]
TASKS = ROOT / "tasks/tasks.yaml"
EDGE_CASE_TASKS = {"textstats-sentence-length", "ledger-currencies", "ledger-discount-tax"}
ALL_TASKS = sorted([*EDGE_CASE_TASKS, "textstats-unique-words"])


def _side(side: str, out: Path, overlay: Path | None = None) -> list[dict]:
    # exact: one run per arm must show the known difference; every task a gate task, so both sides run all four
    p = params(runs=1, simulator={"noise": "none"}, tasks={"gate": ALL_TASKS, "evidence": []})
    return run_side(plan(side, TASKS, ROOT / "skills", overlay, p), p, out, quiet=True)


@pytest.fixture(scope="module")
def incumbent(demo_incumbent) -> list[dict]:
    return demo_incumbent[1]


def _cost(rows: list[dict]) -> dict[tuple[str, str], float]:
    return {(r["task"], r["incumbent_arm"]): r["cost_usd"] for r in rows if r["arm"] != "baseline"}


def test_incumbent_side_resolves_every_demo_task(incumbent):
    assert len(incumbent) == 12  # 4 tasks x 3 arms x 1 run
    assert {r["class"] for r in incumbent} == {"trivial", "investigation", "cross-module"}
    for row in incumbent:
        validate(row, "result-row.schema.json", "row")
        assert row["simulated"] and row["cost_usd"] > 0 and row["diff_files"] >= 2
        if row["arm"] != "baseline":
            assert row["resolved"] and row["skill_invoked"], row["error_detail"]
    sessions = {r["arm"]: len(r["session_ids"]) for r in incumbent}
    assert sessions == {"auto": 1, "baseline": 1, "workflow": 2}
    loaded = {r["arm"]: r["skills_loaded"] for r in incumbent}
    assert loaded == {"auto": [["work"]], "baseline": [[]], "workflow": [["plan"], ["work"]]}  # auto chose work


def test_the_baseline_has_no_skill_and_fails_where_the_edge_case_matters(incumbent, demo_incumbent):
    """No skill installed: the CLI lists only its own bundled skills, the agent works from the prompt alone,
    cheaper than with the skill and unresolved where the skill's edge-case instruction matters."""
    by = {(r["task"], r["arm"]): r for r in incumbent}
    for task in ALL_TASKS:
        base, auto = by[(task, "baseline")], by[(task, "auto")]
        assert base["skill_invoked"] is None and base["tool_uses"].get("Skill") is None
        assert base["cost_usd"] < auto["cost_usd"]
        assert (base["error_kind"], base["resolved"]) == (("oracle-failed", False) if task in EDGE_CASE_TASKS else
                                                          (None, True)), task
    report = (demo_incumbent[0] / "report.md").read_text()
    assert "## Against the baseline `baseline` (no skill installed)" in report
    assert re.search(r"\| auto \| 4/4 \| 1/4 \| \+75 points \| [\d.]+ \| [\d.]+ \| \+[\d.]+ \(\+[\d.]+%\) \|",
                     report), report


def test_known_better_overlay_is_cheaper_on_every_task_and_resolves_all(incumbent, tmp_path):
    rows = _side("candidate", tmp_path / "out", ROOT / "tests/overlays/known-better")
    assert {r["arm"] for r in rows} == {"auto", "workflow", "candidate_auto", "candidate_workflow"}
    assert all(r["resolved"] and r["oracle_passed"] for r in rows)
    controls = _cost([r for r in rows if not r["arm"].startswith("candidate_")])
    cand = _cost([r for r in rows if r["arm"].startswith("candidate_")])
    assert controls == _cost(incumbent)  # noise none: the controls measure exactly what the incumbent side did
    assert controls.keys() == cand.keys()
    for key in controls:
        assert cand[key] < controls[key], key


def test_known_worse_overlay_fails_the_oracle_where_the_instruction_matters(tmp_path):
    rows = _side("candidate", tmp_path / "out", ROOT / "tests/overlays/known-worse")
    by_task = defaultdict(set)
    for r in (r for r in rows if r["arm"].startswith("candidate_")):
        by_task[r["task"]].add((r["verify_passed"], r["error_kind"]))
    for task in EDGE_CASE_TASKS:
        assert by_task[task] == {(True, "oracle-failed")}, task
    assert by_task["textstats-unique-words"] == {(True, None)}
