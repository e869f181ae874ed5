"""The cost ledger of `make evolve` / `make report`: what was paid now versus served from DVC's cache."""

from __future__ import annotations

import json
from pathlib import Path

from skillevo import generations

START = "2026-12-01T10:00:00+00:00"


def _row(run: int, recorded_at: str, cost: float, sessions: int = 1) -> dict:
    return {"run": run, "recorded_at": recorded_at, "cost_usd": cost, "session_ids": [f"s{run}-{i}" for i in range(sessions)]}


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
        {"decisions": [{"candidate_arm": "candidate_auto", "decision": decision, "estimate": estimate}]}))
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
    assert "in all: paid $1.3000 for 2 sessions; served from cache $2.5000 (4 sessions); $0.1083 per promoted " \
           "percentage point" in report
    assert "simulated:" in report


def test_a_generation_served_entirely_from_cache_paid_nothing(tmp_path):
    archive = tmp_path / "generations"
    old = "2026-11-01T00:00:00+00:00"
    results = _results(tmp_path / "a", [_row(1, old, 1.0)], [_row(1, old, 0.9)], 3.0, "keep_incumbent")
    generations.archive(results, archive, started_at=START, ran=frozenset())  # `dvc repro` ran no stage
    report = generations.report(archive)
    assert "| 0.0000 (0) | 2.4000 (3) | reused |" in report and "nothing promoted" in report
