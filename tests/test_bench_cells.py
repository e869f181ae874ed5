"""Bench cells end to end on a minimal task set: oracles catch cheats, kills keep only whole rows."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from skillevo.bench import build_cells, plan, run_cell, run_side
from skillevo.core import models
from skillevo.files.digests import sha256_bytes
from skillevo.files.schemas import validate
from skillevo.simulator import EscapeTargets, Simulator, load_all
from tests.bench_fixtures import CANARY, ROOT, capped, make_mini, params, write_params
from tests.conftest import session_processes

pytestmark = [pytest.mark.cli, pytest.mark.bwrap]


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_cheating_agent_passes_verify_but_not_the_oracle(tmp_path):
    tasks_file = make_mini(tmp_path)
    p = params(runs=1)
    side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
    rows = run_side(side, p, tmp_path / "out", quiet=True)
    by = {(r["task"], r["arm"]): r for r in rows}
    assert len(rows) == 6
    for arm in ("auto", "baseline", "workflow"):  # the baseline works without a skill: the greet task has no edge
        assert by[("greet", arm)]["resolved"] is True
        cheat = by[("cheat", arm)]
        assert cheat["verify_passed"] is True and cheat["oracle_passed"] is False
        assert cheat["error_kind"] == "oracle-failed" and cheat["resolved"] is False
    for row in rows:
        validate(row, "result-row.schema.json", "row")
        for art in row["transcripts"] + [row["patch"]] * bool(row["patch"]):
            data = (tmp_path / "out" / art["path"]).read_bytes()
            assert sha256_bytes(data) == art["sha256"] and CANARY.encode() not in data
    assert by[("greet", "auto")]["diff_files"] == 2  # pkg/greet.py and the new test, not .claude or docs/plan.md
    assert "docs/plan.md" not in (tmp_path / "out" / by[("greet", "workflow")]["patch"]["path"]).read_text()
    bench = json.loads((tmp_path / "out/bench.json").read_text())
    validate(bench, "bench-run.schema.json", "bench.json")
    assert bench["rows"] == bench["cells"] == 6
    assert not session_processes()


def test_oracle_is_never_in_the_workspace_during_the_session(tmp_path):
    tasks_file = make_mini(tmp_path)
    p = params(runs=1)
    side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
    side.tasks = side.tasks[:1]
    side.arms = [a for a in side.arms if a.name == "auto"]
    targets = EscapeTargets(outside_dir=str(tmp_path), planted_file=str(tmp_path / "none"), home_dir=str(Path.home()),
                            oracle_dir=str(tasks_file.parent / "oracles"), loopback_port=9,
                            marker=f"bench-escape-marker-{uuid.uuid4().hex}")
    with Simulator(load_all([tasks_file.parent / "playbooks/mini.yaml"]), escape=targets) as sim:
        model, _ = models.resolve(p.model, sim.url("escape"))
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        [cell] = build_cells(side, p.bench, model, scratch)
        result = run_cell(cell)
    transcript = b"".join(v for k, v in result.artifacts.items() if k.startswith("transcripts/")).decode()
    assert "oracle-search-done" in transcript
    assert CANARY not in transcript and "test_greet_oracle" not in transcript
    assert result.row["oracle_passed"] is False  # the escape agent did no work; the oracle ran after it and failed


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_bench_leaves_only_complete_valid_rows(tmp_path, sig):
    """A bench writes its side beside --out and renames it into place whole: SIGTERM publishes what it finished,
    marked partial; after SIGKILL --out does not exist at all, and the staging holds only whole rows."""
    tasks_file = make_mini(tmp_path)
    params_file = write_params(tmp_path / "params.yaml", runs=4, workers=2)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "skillevo.stages.bench", "--side", "incumbent",
                             "--tasks", str(tasks_file), "--skills", str(ROOT / "skills"), "--params", str(params_file),
                             "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 120
    results = tmp_path / f".out.staging-{proc.pid}" / "results.jsonl"
    while time.monotonic() < deadline and not (results.is_file() and results.read_bytes()):
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.1)
    assert results.is_file() and results.read_bytes(), "no cell finished within 120 s"
    time.sleep(0.5)
    proc.send_signal(sig)
    proc.wait(60)
    if sig == signal.SIGTERM:
        assert proc.returncode == 130, proc.stderr.read()
        assert b"interrupted" in proc.stderr.read()
        side = out
        assert (out / ".partial").is_file() and not results.parent.exists()
    else:
        assert not out.exists()
        side = results.parent
    time.sleep(1)
    rows = _rows(side)
    assert 1 <= len(rows) < 16
    for row in rows:
        validate(row, "result-row.schema.json", "row")
        for art in row["transcripts"]:
            assert sha256_bytes((side / art["path"]).read_bytes()) == art["sha256"]
    assert not (side / "bench.json").exists()  # an incomplete side never looks complete
    assert not session_processes()


def test_the_cli_stops_a_run_at_its_cost_cap_and_the_row_says_so(tmp_path):
    """The cap is enforced, not only recorded: under a cap below what the run costs uncapped, the pinned CLI stops
    the session (--max-budget-usd, in its own dollars, which are ours on the Anthropic path) and the row is a
    cost-cap failure; under a cap above it, the same run resolves as before."""
    tasks_file = make_mini(tmp_path)
    p = params(runs=1)

    def one(cap: float | None, out: str) -> dict:
        side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
        side.tasks = side.tasks[:1]
        side.arms = [a for a in side.arms if a.name == "auto"]
        [row] = run_side(side if cap is None else capped(side, cap), p, tmp_path / out, quiet=True)
        return row

    free = one(None, "free")
    assert free["resolved"] is True and free["cost_usd"] > 0, free["error_detail"]
    roomy = one(round(free["cost_usd"] * 1.5, 6), "roomy")
    assert roomy["resolved"] is True and roomy["error_kind"] is None, roomy["error_detail"]
    tight = one(round(free["cost_usd"] / 3, 6), "tight")
    assert tight["error_kind"] == "cost-cap" and tight["resolved"] is False, tight
    assert "the CLI stopped it" in tight["error_detail"]
    assert tight["cost_usd"] is not None and tight["cost_usd"] < free["cost_usd"]  # stopped, and measured
