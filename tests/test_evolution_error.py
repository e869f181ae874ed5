"""An evolution's chance of any false promotion is stated and kept within gate.family_alpha (issue 33, item 5):
each generation that tests a candidate spends gate.alpha squared (its test and evolve's confirmation on a fresh
replicate), a no_proposal or a confirmation spends nothing more, and evolve stops before a generation the budget
cannot pay for. `make gate-study` measures the rate over 20-generation runs of null candidates."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from skillevo.core import config
from skillevo.gate import family
from skillevo.ops import generations

ROOT = Path(__file__).resolve().parents[1]


def test_each_tested_generation_spends_alpha_squared_and_the_default_allows_twenty():
    assert family.per_generation(0.05) == pytest.approx(0.0025)
    assert family.horizon(0.05, 0.05) == 20 and family.horizon(0.05, 0.01) == 500
    nineteen, twenty = family.budget(0.05, [0.05] * 19), family.budget(0.05, [0.05] * 20)
    assert nineteen.allows(0.05) and not twenty.allows(0.05)
    assert twenty.left == 0 and "0.05 of gate.family_alpha 0.05 spent over 20 tested generation(s), 0 left" in \
        twenty.line()
    assert family.budget(0.05, [0.05] * 20).allows(0.01) is False  # 0.0001 more than nothing left
    assert config.load(ROOT / "params.yaml").gate.family_alpha == 0.05


def _archive(root: Path, kinds: list[str]) -> None:
    """generations/gen-NNN with what family_budget reads: a tested generation, its confirmation, a no_proposal."""
    for n, kind in enumerate(kinds, start=1):
        gen = root / "generations" / f"gen-{n:03d}"
        (gen / "gate").mkdir(parents=True)
        promotion = {"policy": {"alpha": 0.05}, "decisions": [] if kind == "declined" else [{"decision": "x"}]}
        if kind == "declined":
            promotion["no_proposal"] = "nothing to change"
        (gen / "gate/promotion.json").write_text(json.dumps(promotion))
        (gen / "meta.json").write_text(json.dumps({"generation": n, "confirms": n - 1 if kind == "confirm" else None}))


def test_the_archive_spends_only_for_generations_that_tested_a_candidate(tmp_path):
    _archive(tmp_path, ["tested", "confirm", "declined", "tested"])
    spent = generations.family_budget(0.05, tmp_path / "generations")
    assert spent.generations == 2 and spent.spent == pytest.approx(0.005) and spent.left == pytest.approx(0.045)


def test_evolve_stops_before_a_generation_the_budget_cannot_pay_for(tmp_path, monkeypatch, capsys):
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    _archive(tmp_path, ["tested"] * 20)
    monkeypatch.chdir(tmp_path)
    assert generations.evolve(3, dvc=str(tmp_path / "no-dvc-runs")) == 0  # it never reaches `dvc repro`
    out = capsys.readouterr().out
    assert "evolve: stopping before generation 1: another at gate.alpha 0.05 would spend 0.0025 more than the 0 " \
           "left" in out, out
    assert "raise gate.family_alpha, or lower gate.alpha, to go on" in out
