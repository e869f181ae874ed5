"""The paid canary (params bench.canary): one stored cell per reused incumbent arm is paid again, and an arm whose
canary the stored runs cannot explain is served nothing, paid again whole, and its store entries replaced."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from skillevo.bench import LocalExecutor, drift, plan, run_side
from tests.bench_fixtures import ROOT, make_mini, params


def _row(resolved=True, cost=1.0, kind=None):
    return {"resolved": resolved, "error_kind": kind, "cost_usd": cost}


STORED = [_row(cost=1.0), _row(cost=1.2), _row(False, cost=0.9, kind="oracle-failed")]


@pytest.mark.parametrize("fresh, stored, found", [
    (_row(cost=1.1), STORED, None),
    (_row(False, cost=1.1, kind="oracle-failed"), STORED, None),  # the stored runs failed once too
    (_row(cost=1.7), STORED, None),  # within max 1.2 x 1.5
    (_row(cost=1.9), STORED, "outside the stored runs' 0.9 to 1.2"),
    (_row(cost=0.5), STORED, "outside the stored runs' 0.9 to 1.2"),
    (_row(False, cost=1.0, kind="oracle-failed"), [_row(), _row()], "every stored run resolved (2), the canary failed"),
    (_row(cost=1.0), [_row(False, kind="oracle-failed")] * 2, "every stored run failed (2), the canary resolved"),
    (_row(False, cost=None, kind="session-error"), STORED, "the canary measured nothing (session-error)"),
    (_row(cost=1.0), [*STORED, _row(False, cost=None, kind="infra-error")], None),  # excluded runs never count
])
def test_drift_is_what_the_stored_runs_cannot_explain(fresh, stored, found):
    why = drift(fresh, stored, "cost_usd", 1.5)
    assert (why is None) if found is None else (why is not None and found in why), why


class Drifted(LocalExecutor):
    """The model behind the same id now spends three times as much on one arm, as the canary (the first batch this
    executor runs) sees. Only the canary's row is changed: a changed row of a cell that is then stored would be
    refused when served (its transcript disagrees), which is the store's own defence, tested elsewhere."""

    def __init__(self, arm: str) -> None:
        super().__init__(2)
        self.arm, self.ran, self.calls = arm, [], 0

    def run(self, cells, on_result, cancel):
        self.calls += 1
        canary = self.calls == 1

        def changed(cell, result, **kw):
            self.ran.append(cell.name)
            if canary and cell.arm.name == self.arm and result.row["cost_usd"]:
                result.row["cost_usd"] = round(result.row["cost_usd"] * 3, 6)
            on_result(cell, result, **kw)
        super().run(cells, changed, cancel)


def _bench(tasks_file: Path, store: Path, out: Path, executor=None) -> dict:
    p = params(runs=1, bench={"canary": True})
    run_side(plan("incumbent", tasks_file, ROOT / "skills", None, p), p, out, quiet=True, store=store,
             executor=executor)
    return json.loads((out / "bench.json").read_text())


@pytest.mark.cli
@pytest.mark.bwrap
def test_a_canary_per_reused_arm_and_a_drifted_arm_paid_again_whole(tmp_path):
    tasks_file = make_mini(tmp_path)
    store = tmp_path / "store"
    first = _bench(tasks_file, store, tmp_path / "first")
    assert first["cell_store"]["canaries"] == [] and first["cell_store"]["paid"] == 6  # nothing was reused
    shutil.copytree(store, tmp_path / "store-before")

    steady = Drifted(arm="none")  # the same model: every canary agrees with the store
    again = _bench(tasks_file, store, tmp_path / "again", steady)
    canaries = again["cell_store"]["canaries"]
    assert sorted(c["arm"] for c in canaries) == ["auto", "baseline", "workflow"]
    assert all(c["drift"] is None and c["task"] == "cheat" and c["run"] == 1 and c["sessions"] >= 1 for c in canaries)
    assert len(steady.ran) == 3 and again["cell_store"] == {**again["cell_store"], "served": 6, "paid": 0}

    changed = Drifted(arm="workflow")
    drifted = _bench(tasks_file, store, tmp_path / "drifted", changed)
    by_arm = {c["arm"]: c for c in drifted["cell_store"]["canaries"]}
    assert "outside the stored runs'" in by_arm["workflow"]["drift"]
    assert by_arm["auto"]["drift"] is None and by_arm["baseline"]["drift"] is None
    assert drifted["cell_store"]["served"] == 4 and drifted["cell_store"]["paid"] == 2  # the workflow arm, whole
    assert drifted["cell_store"]["stored"] == 2  # its new measurements replace the stored ones
    assert sum(name.split("-")[-2] == "workflow" for name in changed.ran) == 3  # the canary, then its 2 cells
    rows = [json.loads(line) for line in (tmp_path / "drifted/results.jsonl").read_text().splitlines()]
    started = {json.loads(line)["recorded_at"] for line in (tmp_path / "again/results.jsonl").read_text().splitlines()}
    assert all((r["recorded_at"] not in started) == (r["arm"] == "workflow") for r in rows)  # paid now: workflow only
    # the store holds what was measured today: the next bench's canaries agree, and it pays only for them
    still = _bench(tasks_file, store, tmp_path / "after", Drifted(arm="none"))
    assert [c["drift"] for c in still["cell_store"]["canaries"]] == [None] * 3
    assert still["cell_store"]["served"] == 6 and still["cell_store"]["paid"] == 0
    after = {(r["task"], r["arm"], r["run"]): r["recorded_at"] for r in
             (json.loads(line) for line in (tmp_path / "after/results.jsonl").read_text().splitlines())}
    assert all(after[(r["task"], r["arm"], r["run"])] == r["recorded_at"] for r in rows)  # the replaced entries
