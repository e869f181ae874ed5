"""An exception no rule anticipated never costs finished work: one cell's failure, of any class, is that cell's row
(the local executor never lets it end the side and lose its neighbours' rows; the Ray executor's equivalent is in
tests/test_ray_executor.py), and a stage prints it as one line and exits 70, not as a traceback."""

from __future__ import annotations

import argparse
import threading

from skillevo.bench import CellResult, build_cells, executor, plan
from skillevo.core import models, stage
from tests.bench_fixtures import ROOT, make_mini, params


def test_an_exception_escaping_a_cell_is_its_infra_error_row_and_every_other_cell_is_kept(tmp_path, monkeypatch):
    p = params(runs=2)
    side = plan("incumbent", make_mini(tmp_path), ROOT / "skills", None, p)
    cells = build_cells(side, p.bench, models.Model("simulator", "claude-sonnet-4-6", "http://127.0.0.1:1"),
                        tmp_path / "scratch")
    victim = cells[len(cells) // 2]

    def fake_run_cell(spec, **_):
        if spec is victim:
            raise RecursionError("maximum recursion depth exceeded while removing a tree an agent nested 1,200 deep")
        return CellResult({"task": spec.task.id, "arm": spec.arm.name, "run": spec.run, "error_kind": None})

    monkeypatch.setattr(executor, "run_cell", fake_run_cell)
    got: dict[str, dict] = {}
    executor.LocalExecutor(2).run(cells, lambda cell, result: got.__setitem__(cell.name, result.row),
                                  threading.Event())
    assert set(got) == {c.name for c in cells}  # nobody's row was lost
    row = got[victim.name]
    assert row["error_kind"] == "infra-error" and row["error_detail"].startswith(
        "the harness failed running this cell: RecursionError: maximum recursion depth"), row["error_detail"]
    assert all(r["error_kind"] is None for name, r in got.items() if name != victim.name)


def test_a_stage_reports_an_unanticipated_exception_in_one_line(capsys, monkeypatch):
    def run(args):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.delenv("SKILLEVO_TRACEBACK", raising=False)
    assert stage.main("bench", argparse.ArgumentParser(), run, []) == 70
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "RecursionError: maximum recursion depth exceeded (a bug in skillevo" in err
