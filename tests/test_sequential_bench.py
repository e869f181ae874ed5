"""A sequential candidate side, end to end with the real CLI: it runs in looks, its candidate arm beside its control
in every block, asks sampling.interim after each look, stops paying when the answer is known, and records the
look it stopped at for the gate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillevo.bench import LocalExecutor, plan, run_side
from skillevo.bench.cell import infra_error
from skillevo.core import config, controls
from skillevo.core.results import load_side, sequential_record
from tests.bench_fixtures import ROOT, make_mini, params_doc

pytestmark = [pytest.mark.cli, pytest.mark.bwrap]
SEQUENTIAL = {"runs": 6, "sequential": {"enabled": True, "first": 2, "batch": 2}}
HARMLESS = "\nKeep your final message short.\n"


def _params():
    doc = params_doc(simulator={"noise": "demo"}, tasks={"gate": ["greet"], "evidence": []})
    doc["sampling"].update(SEQUENTIAL)
    return config.parse(doc)


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sequential")
    tasks_file = make_mini(tmp)
    p = _params()
    incumbent = run_side(plan("incumbent", tasks_file, ROOT / "skills", None, p), p, tmp / "incumbent", quiet=True)
    null = tmp / "null-overlay/work"
    null.mkdir(parents=True)
    (null / "SKILL.md").write_text((ROOT / "skills/work/SKILL.md").read_text() + HARMLESS)
    return tmp, tasks_file, p, incumbent


def _candidate(sides, overlay: Path, name: str) -> Path:
    tmp, tasks_file, p, incumbent = sides
    out = tmp / name
    run_side(plan("candidate", tasks_file, ROOT / "skills", overlay, p), p, out, quiet=True, store=tmp / "store")
    return out


def test_a_null_candidate_stops_for_futility_at_the_first_look(sides):
    out = _candidate(sides, sides[0] / "null-overlay", "null")
    bench = json.loads((out / "bench.json").read_text())
    assert bench["sequential"] == {"looks": [2, 4, 6], "stopped_at_look": 1, "reason": "futility"}
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {r["run"] for r in rows} == {1, 2} and bench["cells"] == bench["rows"] == len(rows)
    # the control ran beside the candidate in every block, and stopped with it
    assert sorted((r["arm"], r["run"]) for r in rows) == [
        (arm, run) for arm in ("auto", "candidate_auto", "candidate_workflow", "workflow") for run in (1, 2)]
    assert {r["side"] for r in rows} == {"candidate"} and bench["controls"] == "interleaved"
    controls = [r for r in rows if r["arm"] in ("auto", "workflow")]
    stored = {tuple(r["session_ids"]) for r in sides[3]}
    assert all(r["overlay_digest"] is None and tuple(r["session_ids"]) not in stored for r in controls)  # new sessions
    record = sequential_record(load_side(out, "candidate"))  # what the gate will read: consistent with the rows
    assert record is not None and record.runs == 2


class Faulty(LocalExecutor):
    """Harness faults, each once: `blind` cells are lost before the model answered (a worker that died at its start),
    `spent` ones after their session had run up its cost (an API failure late in a long run)."""

    def __init__(self, blind: set[tuple[str, str, int]], spent: set[tuple[str, str, int]]) -> None:
        super().__init__(2)
        self.blind, self.spent = set(blind), set(spent)

    def run(self, cells, on_result, cancel):
        def faulted(cell, result, **kw):
            key = (cell.task.id, cell.arm.name, cell.run)
            if key in self.blind:
                self.blind.discard(key)
                result = infra_error(cell, "the worker was lost before the cell started")
            elif key in self.spent:
                self.spent.discard(key)
                result.row.update(error_kind="session-error", resolved=False, ok=False,
                                  error_detail="the API failed late in the run")
            on_result(cell, result, **kw)
        super().run(cells, faulted, cancel)


def test_a_block_lost_before_the_model_answered_is_measured_again_inside_its_look(sides):
    tmp, tasks_file, _, _ = sides
    doc = params_doc(simulator={"noise": "demo"}, tasks={"gate": ["greet"], "evidence": []},
                     bench={"fault_reruns_pct": 50})
    doc["sampling"].update(SEQUENTIAL)
    p = config.parse(doc)
    out = tmp / "faulty"
    faults = Faulty(blind={("greet", "candidate_workflow", 1)}, spent={("greet", "auto", 2)})
    run_side(plan("candidate", tasks_file, ROOT / "skills", tmp / "null-overlay", p), p, out, quiet=True,
             executor=faults)
    bench = json.loads((out / "bench.json").read_text())
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert bench["fault_reruns"] == {"pct": 50, "blocks": 1} and bench["sequential"]["stopped_at_look"] == 1
    again = [r for r in rows if r.get("replaces") is not None]
    # the blind fault's block, every arm, once more in fresh slots past the schedule; the late fault's is not
    assert sorted((r["arm"], r["run"], r["replaces"]) for r in again) == [
        (arm, 7, 1) for arm in ("auto", "candidate_auto", "candidate_workflow", "workflow")]
    assert min(r["slot"] for r in again) > max(r["slot"] for r in rows if r["replaces"] is None)
    assert bench["cells"] == bench["rows"] == len(rows) == 12
    side = load_side(out, "candidate")  # what the gate reads: the controls check passes, the look is the first
    controls.check(side.bench, side.rows, side.digests["results_sha256"], str(out))
    settled = controls.settle(side.rows)
    assert sorted((r["arm"], r["run"]) for r in settled) == [
        (arm, run) for arm in ("auto", "candidate_auto", "candidate_workflow", "workflow") for run in (1, 2)]
    kinds = {(r["arm"], r["run"]): r["error_kind"] for r in settled}
    assert kinds[("candidate_workflow", 1)] != "infra-error" and kinds[("auto", 2)] == "session-error"
