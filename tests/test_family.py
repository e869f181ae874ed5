"""A realistic family end to end (tests/families/realistic): three skills, a script with an execute bit, a
reference file, long descriptions, and a skill the auto arm chooses by its description alone. A whole
generation runs on it in a clone of the project, then `make apply`."""

from __future__ import annotations

import copy
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import yaml

from skillevo.core import params_edit
from tests.bench_fixtures import ROOT
from tests.test_pipeline import make, run
from tests.worktree import clone_of_worktree

pytestmark = [pytest.mark.cli, pytest.mark.bwrap]
FAMILY = ROOT / "tests/families/realistic"
SCRIPT = "work/scripts/check.sh"
BUG_REPORT = "textstats-sentence-length"  # the task whose prompt is a bug report: triage's by description


def playbook() -> dict:
    """The demo's playbook for this family: work sessions verify with the skill's script, and the bug report
    has triage steps (the same fix, reached by investigating)."""
    book = yaml.safe_load((ROOT / "tasks/playbooks/demo.yaml").read_text())
    for task in book["tasks"]:
        work = task["sessions"]["work"]
        if task["id"] == BUG_REPORT:
            task["sessions"]["triage"] = copy.deepcopy(work)
        for step in work:
            if str(step.get("bash", "")).startswith("python3 -m pytest"):
                step["bash"] = f".claude/skills/{SCRIPT} {step['bash'].split()[-1]}"
    return book


def _install(clone: Path) -> None:
    for root in ("skills", ".claude/skills"):
        shutil.rmtree(clone / root)
        shutil.copytree(FAMILY / "skills", clone / root)  # copy2: the script keeps its execute bit
    params_edit.set_value(clone / "params.yaml", "skills", "evolvable", ["plan", "work", "triage"])
    # mechanics, not statistics (tests/test_gate_study.py has those): 3 candidate runs and 1 incumbent run keep CI
    # short, and 9 runs per arm bound a resolution drop only within 40 points (docs/gate.md)
    params_edit.set_value(clone / "params.yaml", "sampling", "runs", 3)
    params_edit.set_value(clone / "params.yaml", "sampling", "incumbent_runs", 1)
    params_edit.set_value(clone / "params.yaml", "gate", "max_resolution_drop_pct", 40)
    params_edit.set_value(clone / "params.yaml", "gate", "min_total_runs", 9)  # the tails rule, at this test's size
    params_edit.set_value(clone / "params.yaml", "gate", "test", "bootstrap")  # 3 rounds: too few for betting
    (clone / "tasks/playbooks/demo.yaml").write_text(yaml.safe_dump(playbook(), sort_keys=False))
    make(clone, "modes")
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A"], clone)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a realistic family"], clone)


def _rows(side: Path) -> list[dict]:
    return [json.loads(line) for line in (side / "results.jsonl").read_text().splitlines()]


def test_a_realistic_family_runs_a_whole_generation_and_apply(tmp_path):
    assert os.access(FAMILY / "skills" / SCRIPT, os.X_OK)
    clone = clone_of_worktree(tmp_path / "clone")
    _install(clone)
    assert json.loads((clone / "skill-modes.json").read_text())["executable"] == [SCRIPT]
    out = make(clone, "demo")
    assert "decision: promote" in out, out[-3000:]

    incumbent = _rows(clone / "results/bench-incumbent")
    for row in incumbent:  # the auto arm chose by description: triage for the bug report, work elsewhere
        if row["arm"] == "auto":
            assert row["skills_loaded"] == [["triage" if row["task"] == BUG_REPORT else "work"]], row["task"]
    checked = 0
    for row in incumbent:
        for meta, loaded in zip(row["transcripts"], row["skills_loaded"] or [], strict=False):
            text = (clone / "results/bench-incumbent" / meta["path"]).read_text()
            assert "Permission denied" not in text
            if loaded == ["work"]:  # the skill's own script ran, executable in the workspace
                assert "work/check.sh: verifying tests/" in text, meta["path"]
                checked += 1
    assert checked == 3 + 4  # auto's work sessions (three tasks), and every workflow run's work session (four)
    proposal = (clone / "results/proposal/proposal.md").read_text()
    assert "## Frontmatter changes (computed by skillevo)" in proposal and "## Script changes" in proposal

    applied = make(clone, "apply")
    assert "applied 2 file(s)" in applied
    frozen = (clone / "results/freeze/overlay/work/SKILL.md").read_bytes()
    for root in ("skills", ".claude/skills"):
        assert (clone / root / "work/SKILL.md").read_bytes() == frozen
        assert stat.S_IMODE(os.stat(clone / root / SCRIPT).st_mode) == 0o755  # untouched, still a script
    changed = run(["git", "status", "--porcelain", "--", "skills", ".claude", "skill-modes.json"], clone)
    assert sorted(line[3:] for line in changed.splitlines() if line.strip()) == [".claude/skills/work/SKILL.md",
                                                                                  "skills/work/SKILL.md"]
