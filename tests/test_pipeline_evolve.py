"""`make evolve` end to end: generations that hand their rejections on, and a promotion confirmed on a fresh
replicate."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.test_pipeline import DVC, WASTEFUL, make, ran, run, sessions, settled
from tests.worktree import clone_of_worktree

pytestmark = [pytest.mark.cli, pytest.mark.bwrap, pytest.mark.timeout(2400)]  # generations, on a loaded runner


def _removed(proposal: Path) -> str:
    return next(line for line in proposal.read_text().splitlines() if line.startswith("Instruction removed: "))


def test_evolve_hands_every_rejection_on_leaves_dvc_clean_and_a_teammate_reproduces_it_exactly(tmp_path):
    """Generations at one run a cell (insufficient evidence, every time), each handed the memory of all the earlier
    ones: each proposal is one no earlier generation made, the evidence shows every earlier rejection, and once no
    run shows a cost left to cut the proposer declines and evolve stops there (issue 32, item 4: a no_proposal
    generation, never a guess); nothing is left for `dvc status` or `make demo`, and a teammate's `dvc repro --pull`
    on a fresh clone runs nothing and leaves dvc.lock byte for byte as committed."""
    clone = clone_of_worktree(tmp_path / "clone")
    doc = yaml.safe_load((clone / "params.yaml").read_text())
    doc["sampling"].update(runs=1, incumbent_runs=1)  # mechanics, not statistics: keep CI short
    doc["gate"]["min_runs"] = 1
    doc["arms"] = {"workflow": doc["arms"]["workflow"]}  # one arm and one gate task
    doc["tasks"]["gate"], doc["tasks"]["evidence"] = doc["tasks"]["gate"][:1], [*doc["tasks"]["gate"][1:],
                                                                              *doc["tasks"]["evidence"]]
    (clone / "params.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    run([*git, "commit", "-qam", "one run a cell: no generation can promote"], clone)
    out = make(clone, "evolve", "GENERATIONS=4")
    assert "the proposer declined in generation 3: " in out, out[-4000:]
    generations = sorted((clone / "generations").glob("gen-*"))
    assert [g.name for g in generations] == ["gen-001", "gen-002", "gen-003"]
    for g in generations[:2]:
        decisions = json.loads((g / "gate/promotion.json").read_text())["decisions"]
        assert {d["decision"] for d in decisions} == {"insufficient_evidence"}
    last = json.loads((generations[2] / "gate/promotion.json").read_text())
    assert last["decisions"] == [] and "2 line(s) tried before" in last["no_proposal"], last["no_proposal"]
    removed = [_removed(g / "proposal/proposal.md") for g in generations[:2]]
    assert len(set(removed)) == 2 and WASTEFUL in removed[0], removed  # never re-proposed
    for n, g in enumerate(generations):
        manifest = json.loads((g / "evidence/manifest.json").read_text())
        assert manifest["rejected"]["selected"] == n  # every earlier generation's candidate, diff and verdict
    assert any(f["path"] == "prior-proposal.md" for f in manifest["files"])
    handed = json.loads((clone / "previous/memory/rejected.json").read_text())["candidates"]
    assert [c["generation"] for c in handed] == [2, 1]  # what generation 3 read: a no_proposal rejects nothing
    assert all(f"-{r.removeprefix('Instruction removed: ')}" in c["diff"]
               for r, c in zip(removed[::-1], handed, strict=True))
    for later in out.split("== generation ")[2:]:
        assert "bench@incumbent" not in ran(later)
    report = make(clone, "report")
    assert re.search(r"\| 2 \| .*=insufficient_evidence.* \| reused \|", report), report
    assert re.search(r"\| 3 \| no_proposal \| .* \| reused \|", report), report
    # the proposer's record (issue 33, item 2): each generation that proposed scored once per arm (at one run a
    # cell, the gate made no estimate: unmeasured), the no_proposal left out; the last proposer read its own score
    record = re.search(r"the proposer's record: .* \((\d+) hit, (\d+) miss, (\d+) wrong sign, (\d+) unmeasured\); "
                       r"0 proposal\(s\) without a prediction", report)
    assert record and sum(map(int, record.groups())) == 2, report
    summary = json.loads((clone / "results/evidence/gate-summary.json").read_text())
    assert any("The proposer predicted" in json.dumps(entry) for entry in summary), summary

    # what was handed on is tracked: nothing is left to run here
    assert settled(run([DVC, "status"], clone))
    assert ran(make(clone, "demo")) == set()
    tracked = ["dvc.lock", "params.yaml", "generations.dvc", "previous/memory.dvc"]
    run(["git", "add", *tracked], clone)
    run([*git, "commit", "-qm", "three generations, the last a no_proposal"], clone)
    assert run(["git", "status", "--porcelain"], clone).strip() == ""  # nothing else needs committing
    make(clone, "push")

    teammate = tmp_path / "teammate"
    subprocess.run(["git", "clone", "-q", str(clone), str(teammate)], check=True)
    run([DVC, "remote", "modify", "--local", "local", "url", str(tmp_path / "skillevo-remote")], teammate)
    log = tmp_path / "teammate-sessions.log"
    out = run([DVC, "repro", "--pull"], teammate, SKILLEVO_SIMULATOR_SESSION_LOG=str(log))
    assert ran(out) == set() and sessions(log) == 0
    assert (teammate / "dvc.lock").read_bytes() == (clone / "dvc.lock").read_bytes()
    status = run([DVC, "status"], teammate)  # only the archive, which no stage reads, waits for `make pull`
    rest = re.sub(r"identity:\s+always changed", "", re.sub(r"WARNING: stage: 'apply' is frozen.*\n", "", status))
    assert rest.split() == ["generations.dvc:", "changed", "outs:", "not", "in", "cache:", "generations"], status
    make(teammate, "pull")
    assert settled(run([DVC, "status"], teammate))
    assert sorted(p.name for p in (teammate / "generations").iterdir()) == ["gen-001", "gen-002", "gen-003"]
    assert (teammate / "previous/memory/rejected.json").read_bytes() == \
        (clone / "previous/memory/rejected.json").read_bytes()
    assert (teammate / "results/gate/promotion.json").read_bytes() == \
        (clone / "results/gate/promotion.json").read_bytes()
    shutil.rmtree(clone / "results")


def test_evolve_confirms_a_promotion_with_a_fresh_replicate_before_it_is_final(tmp_path):
    clone = clone_of_worktree(tmp_path / "clone")
    doc = yaml.safe_load((clone / "params.yaml").read_text())
    # mechanics, not statistics: one arm (auto: one session a run), one gate task of 10 runs, and a gate told that
    # 10 runs an arm, at fixed runs, are enough for the bootstrap-t test (too few rounds for the test by betting)
    doc["arms"] = {"auto": doc["arms"]["auto"]}
    doc["sampling"].update(runs=10, incumbent_runs=2)
    doc["gate"].update(min_total_runs=10, max_resolution_drop_pct=30, test="bootstrap")
    doc["sampling"]["sequential"].update(enabled=False)
    doc["tasks"]["gate"], doc["tasks"]["evidence"] = doc["tasks"]["gate"][:1], [*doc["tasks"]["gate"][1:],
                                                                              *doc["tasks"]["evidence"]]
    (clone / "params.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "a small confirmation"], clone)
    out = make(clone, "evolve", "GENERATIONS=1", "NOISE=demo")
    assert "confirming: sampling.replicate 0 -> 1, both sides measured afresh" in out
    assert "promoted in generation 1, confirmed by replicate 1" in out
    confirmation = out.split("confirming:")[1]
    assert {"bench@incumbent", "bench@candidate", "gate"} <= ran(confirmation)
    assert not {"evidence", "propose", "freeze"} & ran(confirmation)  # the same frozen candidate, re-measured
    assert yaml.safe_load((clone / "params.yaml").read_text())["sampling"]["replicate"] == 1
    bench = json.loads((clone / "results/bench-candidate/bench.json").read_text())
    assert bench["replicate"] == 1
    meta = json.loads((clone / "generations/gen-002/meta.json").read_text())
    assert meta["confirms"] == 1
    assert "| 2 (confirms 1) |" in make(clone, "report")
