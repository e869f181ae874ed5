"""The demo bench, end to end with the real CLI: the pipeline's own self-test.

The incumbent skills resolve every demo task; the known-better overlay (the wasteful instruction
dropped) is cheaper on every task and still resolves all; the known-worse overlay (the necessary
instruction dropped) fails the hidden oracle exactly where that instruction matters.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from skillevo.bench.side import plan, run_side
from skillevo.schemas import validate
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
    return {(r["task"], r["incumbent_arm"]): r["cost_usd"] for r in rows}


def test_incumbent_side_resolves_every_demo_task(incumbent):
    assert len(incumbent) == 8  # 4 tasks x 2 arms x 1 run
    assert {r["class"] for r in incumbent} == {"trivial", "investigation", "cross-module"}
    for row in incumbent:
        validate(row, "result-row.schema.json", "row")
        assert row["resolved"] and row["skill_invoked"] and row["simulated"], row["error_detail"]
        assert row["cost_usd"] > 0 and row["diff_files"] >= 2
    sessions = {r["arm"]: len(r["session_ids"]) for r in incumbent}
    assert sessions == {"direct": 1, "workflow": 2}


def test_known_better_overlay_is_cheaper_on_every_task_and_resolves_all(incumbent, tmp_path):
    rows = _side("candidate", tmp_path / "out", ROOT / "tests/overlays/known-better")
    assert {r["arm"] for r in rows} == {"candidate_direct", "candidate_workflow"}
    assert all(r["resolved"] and r["oracle_passed"] for r in rows)
    inc, cand = _cost(incumbent), _cost(rows)
    assert inc.keys() == cand.keys()
    for key in inc:
        assert cand[key] < inc[key], key


def test_known_worse_overlay_fails_the_oracle_where_the_instruction_matters(tmp_path):
    rows = _side("candidate", tmp_path / "out", ROOT / "tests/overlays/known-worse")
    by_task = defaultdict(set)
    for r in rows:
        by_task[r["task"]].add((r["verify_passed"], r["error_kind"]))
    for task in EDGE_CASE_TASKS:
        assert by_task[task] == {(True, "oracle-failed")}, task
    assert by_task["textstats-unique-words"] == {(True, None)}
