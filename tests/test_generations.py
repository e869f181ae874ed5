"""The cost ledger of `make evolve` / `make report`: what was paid now versus served from DVC's cache."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from skillevo.ops import generations

START = "2026-12-01T10:00:00+00:00"


def _row(run: int, recorded_at: str, cost: float, sessions: int = 1) -> dict:
    return {"run": run, "recorded_at": recorded_at, "cost_usd": cost,
            "session_ids": [f"s{run}-{i}" for i in range(sessions)]}


def _results(root: Path, incumbent: list[dict], candidate: list[dict], improvement: float, decision: str) -> Path:
    results = root / "results"
    for side, rows in (("incumbent", incumbent), ("candidate", candidate)):
        (results / f"bench-{side}").mkdir(parents=True)
        (results / f"bench-{side}/results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (results / f"bench-{side}/bench.json").write_text(json.dumps({"model": {"simulated": True}}))
    (results / "proposal").mkdir()
    (results / "proposal/session.json").write_text(json.dumps({"session_id": "p1", "cost_usd": 0.5}))
    (results / "gate").mkdir()
    estimate = {"improvement_pct": improvement, "interval_pct": [improvement - 2, improvement + 2]}
    (results / "gate/promotion.json").write_text(json.dumps(
        {"decisions": [{"candidate_arm": "candidate_auto", "decision": decision, "estimate": estimate,
                        "reasons": ["the gate's reason"]}], "policy": {"alpha": 0.05}}))
    return results


def test_rows_recorded_before_the_generation_started_were_served_not_paid(tmp_path):
    archive = tmp_path / "generations"
    cached = "2026-11-30T09:00:00+00:00"  # the incumbent side came from the run-cache: recorded yesterday
    results = _results(tmp_path / "a", [_row(1, cached, 1.0, 2), _row(2, cached, 1.5, 2)],
                       [_row(1, "2026-12-01T10:05:00+00:00", 0.8)], 12.0, "promote")
    generations.archive(results, archive, started_at=START, ran=frozenset({"propose", "bench@candidate"}))
    meta = json.loads((archive / "gen-001/meta.json").read_text())
    assert meta["ledger"]["incumbent"] == {"paid": {"cost_usd": 0.0, "sessions": 0},
                                           "served": {"cost_usd": 2.5, "sessions": 4}}
    assert meta["ledger"]["candidate"]["paid"] == {"cost_usd": 0.8, "sessions": 1}
    assert meta["ledger"]["proposer"]["paid"] == {"cost_usd": 0.5, "sessions": 1}
    report = generations.report(archive)
    assert "| 1 | candidate_auto=promote | 12.0% (10.0% to 14.0%) | 1.3000 (2) | 2.5000 (4) | reused |" in report
    assert "in all: paid $1.3000 for 2 sessions; served by the run-cache and the cell store $2.5000 (4 sessions); " \
           "$0.1083 per promoted percentage point" in report
    assert "simulated:" in report


def test_a_generation_served_entirely_from_cache_paid_nothing(tmp_path):
    archive = tmp_path / "generations"
    old = "2026-11-01T00:00:00+00:00"
    results = _results(tmp_path / "a", [_row(1, old, 1.0)], [_row(1, old, 0.9)], 3.0, "keep_incumbent")
    generations.archive(results, archive, started_at=START, ran=frozenset())  # `dvc repro` ran no stage
    report = generations.report(archive)
    assert "| 0.0000 (0) | 2.4000 (3) | reused |" in report and "nothing promoted" in report


def test_make_report_after_make_demo_shows_the_generation_in_results(tmp_path, monkeypatch, capsys):
    """`make demo` archives nothing: the report leads with the decision in results/, then the (empty) archive."""
    _results(tmp_path, [_row(1, START, 1.0)], [_row(1, START, 0.9)], 12.0, "promote")
    monkeypatch.chdir(tmp_path)
    assert generations.main(["report"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("current generation (results/):\ndecision: promote\n  candidate_auto: promote")
    assert "no generations archived yet" in out


# ----------------------------------------------------------------------------------- the memory handed on

def _archived(archive: Path, n: int, family: dict[str, bytes], digest: str, drop: str, decisions: list[str]) -> Path:
    """generations/gen-NNN/ as archive() leaves it: the frozen overlay dropping the line holding `drop`."""
    from skillevo.core import layout

    gen = archive / f"gen-{n:03d}"
    text = b"".join(line for line in family["work/SKILL.md"].splitlines(True) if drop.encode() not in line)
    (gen / "freeze/overlay/work").mkdir(parents=True)
    (gen / "freeze/overlay/work/SKILL.md").write_bytes(text)
    overlay_digest = layout.tree_digest({"work/SKILL.md": text})
    (gen / "freeze/manifest.json").write_text(json.dumps({"files": [{"path": "work/SKILL.md", "executable": False}]}))
    (gen / "bench-candidate").mkdir()
    (gen / "bench-candidate/bench.json").write_text(json.dumps({"skills_digest": digest}))
    (gen / "bench-candidate/results.jsonl").write_text(f'{{"generation": {n}}}\n')
    (gen / "gate").mkdir()
    (gen / "gate/promotion.json").write_text(json.dumps({"overlay_digest": overlay_digest, "decisions": [
        {"candidate_arm": f"candidate_{arm}", "decision": d, "reasons": [f"gen {n} {arm}"]}
        for arm, d in zip(("auto", "workflow"), decisions, strict=True)]}))
    (gen / "proposal").mkdir()
    (gen / "proposal/proposal.md").write_text(f"Instruction removed: {drop}\n")
    return gen


def test_hand_on_rebuilds_the_memory_of_every_rejected_candidate_of_this_incumbent(tmp_path, monkeypatch):
    from skillevo.core import layout, memory
    from tests.bench_fixtures import ROOT

    shutil.copytree(ROOT / "skills", tmp_path / "skills")
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    executables: set[str] = set()
    family = layout.read_family("skills", frozenset(), executables)
    digest = layout.tree_digest(family, executables)
    archive, previous = tmp_path / "generations", tmp_path / "previous"
    (previous / "bench-candidate").mkdir(parents=True)  # the layout before the memory: removed
    (previous / "README.md").write_text("# previous/\n")
    assert generations.hand_on(archive, previous) is False and not (previous / "memory").exists()
    _archived(archive, 1, family, digest, "Read every module", ["keep_incumbent", "insufficient_evidence"])
    _archived(archive, 2, family, digest, "Handle empty", ["promote", "promote"])  # promoted: not a rejection
    _archived(archive, 3, family, digest, "End with two", ["insufficient_evidence", "insufficient_evidence"])
    _archived(archive, 4, family, "9" * 64, "Write the tests", ["keep_incumbent", "keep_incumbent"])  # other skills
    _archived(archive, 5, family, digest, "Make the smallest", ["promote", "keep_incumbent"])  # half a promotion

    assert generations.hand_on(archive, previous) is True
    assert sorted(p.name for p in previous.iterdir()) == ["README.md", "memory"]
    entries, _ = memory.load(previous / "memory/rejected.json")
    assert [e["generation"] for e in entries] == [5, 3, 1]
    assert [[d["decision"] for d in e["decisions"]] for e in entries] == [
        ["promote", "keep_incumbent"], ["insufficient_evidence", "insufficient_evidence"],
        ["keep_incumbent", "insufficient_evidence"]]
    assert [line for line in entries[2]["diff"].splitlines() if line.startswith("-- ")] == [
        next(f"-{line}" for line in family["work/SKILL.md"].decode().splitlines() if "Read every module" in line)]
    assert [memory.futile(e) for e in entries] == [True, False, True]
    # the newest rejected generation's side, verdict and proposal, as before
    assert (previous / "memory/bench-candidate/results.jsonl").read_text() == '{"generation": 5}\n'
    assert (previous / "memory/proposal.md").read_text() == "Instruction removed: Make the smallest\n"
    assert json.loads((previous / "memory/gate/promotion.json").read_text())["decisions"][0]["reasons"] == [
        "gen 5 auto"]
    before = {p: p.read_bytes() for p in previous.rglob("*") if p.is_file()}
    assert generations.hand_on(archive, previous) is True  # a function of the archive and the skills: no change
    assert {p: p.read_bytes() for p in previous.rglob("*") if p.is_file()} == before


def test_hand_on_refuses_an_archive_tracked_but_not_pulled(tmp_path, monkeypatch):
    """A teammate who ran `dvc repro --pull` has the memory but not the archive: rebuilding from nothing would
    forget every rejection, so evolve stops and says to pull."""
    import pytest

    from skillevo.files.errors import BadInput
    from tests.bench_fixtures import ROOT

    shutil.copytree(ROOT / "skills", tmp_path / "skills")
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "previous/memory").mkdir(parents=True)
    (tmp_path / "previous/memory/rejected.json").write_text("kept\n")
    (tmp_path / "generations.dvc").write_text("outs:\n- path: generations\n")
    with pytest.raises(BadInput, match=r"generations: \S*generations\.dvc tracks it but it is not in this checkout; "
                                       r"run `make pull` first"):
        generations.hand_on(tmp_path / "generations", tmp_path / "previous")
    assert (tmp_path / "previous/memory/rejected.json").read_text() == "kept\n"


def test_a_canary_of_a_served_incumbent_is_paid_and_counted(tmp_path):
    archive = tmp_path / "generations"
    cached = "2026-11-30T09:00:00+00:00"
    results = _results(tmp_path / "a", [_row(1, cached, 1.0, 2), _row(2, cached, 1.5, 2)],
                       [_row(1, "2026-12-01T10:05:00+00:00", 0.8)], 12.0, "promote")
    canary = {"task": "t", "arm": "auto", "run": 1, "sessions": 2, "cost_usd": 0.9,
              "recorded_at": "2026-12-01T10:01:00+00:00", "drift": None}
    (results / "bench-incumbent/bench.json").write_text(json.dumps(
        {"model": {"simulated": True}, "cell_store": {"served": 2, "paid": 0, "stored": 0, "canaries": [canary]}}))
    generations.archive(results, archive, started_at=START, ran=frozenset({"propose", "bench@incumbent"}))
    ledger = json.loads((archive / "gen-001/meta.json").read_text())["ledger"]["incumbent"]
    assert ledger == {"paid": {"cost_usd": 0.9, "sessions": 2}, "served": {"cost_usd": 2.5, "sessions": 4}}
