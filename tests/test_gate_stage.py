"""`python -m skillevo.stages.gate`: documented options, end-to-end outputs, and bad input named by file, line and
rule."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from skillevo.files.digests import sha256_bytes
from skillevo.files.schemas import first_error, schema_validator
from skillevo.stages import gate as stage
from tests.gate_rows import CANDIDATE, INCUMBENT, bench, controls, designed, freeze, row, runs, write_side

ROOT = Path(__file__).resolve().parents[1]
TASKS = {"t1": "trivial", "t2": "investigation"}


# Two tasks of eight runs: a margin of 50 points bounds a resolution drop on far fewer; the test by betting
# needs some seven rounds to promote even a halved cost (skillevo/stats/betting.py).
SMALL = "gate: {max_resolution_drop_pct: 50, min_total_runs: 1, test: betting}\n"
HALVED = (0.5, 0.55, 0.45, 0.5) * 2


def setup_inputs(tmp_path: Path, *, candidate_costs=HALVED, candidate_rows=None, params=SMALL, metric="cost_usd"):
    params = "arms: {workflow: {sessions: [{skill: work, prompt: '{prompt}'}]}}\n" + params
    incumbent_rows = runs("t1", INCUMBENT, [1.0, 1.1, 0.9, 1.05] * 2)
    incumbent_rows += runs("t2", INCUMBENT, [2.0, 2.1, 1.9, 2.0] * 2, cls="investigation")
    if candidate_rows is None:
        candidate_rows = runs("t1", CANDIDATE, list(candidate_costs)) + runs(
            "t2", CANDIDATE, [1.0, 1.05, 0.95, 1.0] * 2, cls="investigation"
        )
    write_side(tmp_path / "inc", bench("incumbent", TASKS), incumbent_rows)
    write_side(tmp_path / "cand", designed(bench("candidate", TASKS), incumbent_rows, metric),
               controls(incumbent_rows, candidate_rows))
    (tmp_path / "manifest.json").write_text(json.dumps(freeze()), encoding="utf-8")
    (tmp_path / "params.yaml").write_text(params, encoding="utf-8")
    return [
        "--incumbent", str(tmp_path / "inc"), "--candidate", str(tmp_path / "cand"),
        "--freeze", str(tmp_path / "manifest.json"), "--params", str(tmp_path / "params.yaml"),
        "--out", str(tmp_path / "out"),
    ]


def test_help_documents_inputs_and_outputs():
    result = subprocess.run(
        [sys.executable, "-m", "skillevo.stages.gate", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    for text in (
        "--incumbent", "results/bench-incumbent", "--candidate", "results/bench-candidate", "--freeze",
        "results/freeze/manifest.json", "--params", "params.yaml", "--out", "results/gate", "results.jsonl",
        "bench.json", "promotion.json", "report.md", "metrics.json", "figures.json", "plots/tasks.csv", "min_runs",
        "exit status",
    ):
        assert text in result.stdout, text


def test_end_to_end_as_a_module(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "skillevo.stages.gate", *setup_inputs(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    [line] = result.stdout.splitlines()
    assert re.fullmatch(
        r"candidate_workflow: promote \(cost_usd per resolved task 50\.2% cheaper \(90% interval (-?\d+\.\d)% to "
        r"(\d+\.\d)%, p<=0\.0\d+\), resolved 16/16 -> 16/16\)",
        line,
    ), line
    out = tmp_path / "out"
    promotion = json.loads((out / "promotion.json").read_text(encoding="utf-8"))
    assert first_error(promotion, schema_validator("promotion")) is None
    assert promotion["decisions"][0]["decision"] == "promote"

    report = (out / "report.md").read_text(encoding="utf-8")
    assert report.index("candidate_workflow: promote") < report.index("| task |") < report.index("Reasons:")
    assert re.search(r"\| t1 \| 8/8 \| 8/8 \| 1\.0125 \| 0\.5 \| 50\.6% \| -?\d+\.\d% to \d+\.\d% \|", report), report
    assert "the test by betting reached e=" in report and "**Claim:** the candidate is cheaper" in report
    assert "What cheaper means" in report and "per resolved task for the control" in report
    assert "Simulated" in report and "Per protocol" in report and "plots/improvement.svg" in report

    assert json.loads((out / "metrics.json").read_text(encoding="utf-8")) == {  # what `dvc metrics show` prints
        "candidate_workflow": {"decision_code": 1, "improvement_pct": 50.21}, "sessions": 48, "cost_usd": 60.2}
    metrics = json.loads((out / "figures.json").read_text(encoding="utf-8"))  # every figure, flat
    assert all(isinstance(v, int | float) and not isinstance(v, bool) for v in metrics.values())
    assert metrics["candidate_workflow.decision_code"] == 1
    assert metrics["candidate_workflow.improvement_pct"] == 50.21
    assert metrics["candidate_workflow.interval_low_pct"] < 50.21 < metrics["candidate_workflow.interval_high_pct"]
    assert metrics["candidate_workflow.control_per_resolved"] == 1.50625  # 1.0125 + 2 dollars a round, 2 resolved
    assert (metrics["incumbent.total_cost_usd"], metrics["candidate.total_cost_usd"]) == (24.1, 24.1 + 12.0)
    assert (metrics["incumbent.sessions"], metrics["candidate.sessions"]) == (16, 32)  # the candidate side's controls

    with (out / "plots" / "tasks.csv").open(newline="", encoding="utf-8") as f:
        plot = list(csv.DictReader(f))
    assert [(r["label"], r["task"], r["arm"]) for r in plot] == [
        (f"t1 ({CANDIDATE})", "t1", CANDIDATE), (f"t2 ({CANDIDATE})", "t2", CANDIDATE)]
    assert all(float(r["interval_low_pct"]) < float(r["improvement_pct"]) < float(r["interval_high_pct"])
               for r in plot)
    svg = (out / "plots" / "improvement.svg").read_text(encoding="utf-8")
    assert svg.startswith("<?xml") and "t1 (candidate_workflow)" in svg and "all tasks" in svg


def test_outputs_are_reproducible_apart_from_the_clock(tmp_path: Path, capsys):
    args = setup_inputs(tmp_path)

    def outputs():
        assert stage.main(args) == 0
        out = tmp_path / "out"
        report = (out / "report.md").read_text(encoding="utf-8").splitlines()
        return (
            [line for line in report if not line.startswith("- generated ")],  # the only clock-dependent line
            (out / "metrics.json").read_bytes(),
            (out / "figures.json").read_bytes(),
            (out / "plots" / "tasks.csv").read_bytes(),
            (out / "plots" / "improvement.svg").read_bytes(),
        )

    assert outputs() == outputs()


def test_a_kept_incumbent_still_exits_zero(tmp_path: Path, capsys):
    assert stage.main(setup_inputs(tmp_path, candidate_costs=(1.3, 1.3, 1.3))) == 0
    assert capsys.readouterr().out.startswith("candidate_workflow: keep_incumbent")
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["candidate_workflow"]["decision_code"] == 0


def test_a_main_loop_metric_warns_on_stderr(tmp_path: Path, capsys):
    params = "gate:\n  metric: output_tokens\n  max_resolution_drop_pct: 50\n"
    assert stage.main(setup_inputs(tmp_path, params=params, metric="output_tokens")) == 0
    assert "warning: metric output_tokens" in capsys.readouterr().err


def _bad_row_cases():
    """name: (candidate rows, the bad line, the message); each case breaks one rule in one row."""
    good = runs("t1", CANDIDATE, [0.8, 0.85, 0.9]) + runs("t2", CANDIDATE, [1.9, 1.8, 2.0], cls="investigation")

    def second(**changes):
        return [good[0], {**good[1], **changes}, *good[2:]]

    without_cost = {k: v for k, v in good[1].items() if k != "cost_usd"}
    return {
        "negative run": (second(run=0), 2, r"\$\.run: 0 is less than the minimum of 1 \(rule: minimum\)"),
        "missing field": ([good[0], without_cost, *good[2:]], 2,
                          r"'cost_usd' is a required property \(rule: required\)"),
        "unknown error kind": (second(error_kind="timeout"), 2, r"\$\.error_kind.*\(rule: enum\)"),
        "undeclared arm": (
            good + [row("t1", "candidate_direct", 1)], 7,
            r"arm 'candidate_direct' is not declared in .*bench\.json \(rule: declared arm\)",
        ),
        "unbound task": (good + [row("t9", CANDIDATE, 1)], 7, r"task 't9' is not bound .*\(rule: bound task\)"),
        "duplicate cell": (good + [good[0]], 7, r"run 1 appears twice \(rule: one row per cell\)"),
        "wrong overlay": (second(overlay_digest="9" * 64), 2, r"\(rule: a row carries the overlay its arm installed"),
        "resolved without oracle": (second(oracle_passed=False), 2, r"\(rule: resolved\)"),
        "unresolved without a kind": (second(resolved=False), 2, r"\(rule: unresolved run names its failure\)"),
        "class mismatch": (second(**{"class": "investigation"}), 2, r"\(rule: task class\)"),
    }


@pytest.mark.parametrize("name", sorted(_bad_row_cases()))
def test_a_bad_row_fails_naming_file_line_and_rule(tmp_path: Path, capsys, name):
    rows, line, message = _bad_row_cases()[name]
    assert stage.main(setup_inputs(tmp_path, candidate_rows=rows)) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'cand' / 'results.jsonl'}:{line}: " in err
    assert re.search(message, err), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "text, message",
    [("{not json\n", r"results\.jsonl:1: not valid JSON.*\(rule: JSON syntax\)"),
     ('{"cost_usd": NaN}\n', r"results\.jsonl:1: not valid JSON: NaN is not a number"),
     ("[1, 2]\n", r"results\.jsonl:1: \$: \[1, 2\] is not of type 'object' \(rule: type\)")],
)
def test_unparseable_lines_are_named(tmp_path: Path, capsys, text, message):
    args = setup_inputs(tmp_path)
    (tmp_path / "cand" / "results.jsonl").write_text(text, encoding="utf-8")
    assert stage.main(args) == 2
    assert re.search(message, capsys.readouterr().err)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda b: b.update(side="incumbent"), r"cand/bench\.json: \$\.side: is 'incumbent', expected 'candidate'"),
        (lambda b: b["arms"][1].update(name="workflow_v2"),
         r"must be named 'candidate_workflow'.*\(rule: arm naming\)"),
        (lambda b: b["arms"].pop(0), r"\(rule: contemporaneous controls\)"),
        (lambda b: b.update(controls=None), r"\(rule: contemporaneous controls\)"),
        (lambda b: b.update(overlay_digest=None), r"\$\.overlay_digest.*\(rule: overlay_digest\)"),
        (lambda b: b.update(effort="high"),
         r"\$\.effort differ \(rule: both sides are benchmarked with identical effort\)"),
        (lambda b: b["task_bindings"].pop(), r"\$\.task_bindings differ"),
        (lambda b: b.pop("model"), r"'model' is a required property"),
    ],
)
def test_a_bad_bench_json_is_refused(tmp_path: Path, capsys, change, message):
    args = setup_inputs(tmp_path)
    path = tmp_path / "cand" / "bench.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    change(document)
    path.write_text(json.dumps(document), encoding="utf-8")
    (tmp_path / "cand" / "results.jsonl").write_text("", encoding="utf-8")
    assert stage.main(args) == 2
    assert re.search(message, capsys.readouterr().err)


def test_a_control_row_removed_after_the_bench_is_refused(tmp_path: Path, capsys):
    """Dropping the control's cheapest run (or any one) would make the comparison one-sided: every block (task, run)
    must hold the candidate's row and its control's."""
    args = setup_inputs(tmp_path)
    path = tmp_path / "cand" / "results.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [line for line in lines if not ('"arm": "workflow"' in line and '"run": 2' in line and '"t1"' in line)]
    assert len(kept) == len(lines) - 1
    path.write_text("".join(kept), encoding="utf-8")
    assert stage.main(args) == 2
    err = capsys.readouterr().err
    assert "task 't1' run 2 has rows for ['candidate_workflow']" in err and "(rule: contemporaneous controls)" in err


def test_rows_are_split_at_newlines_only(tmp_path: Path, capsys):
    rows = runs("t1", CANDIDATE, [0.8, 0.85, 0.9], error_detail="line\u2028separator") + runs(
        "t2", CANDIDATE, [1.9, 1.8, 2.0], cls="investigation"
    )
    args = setup_inputs(tmp_path, candidate_rows=rows)
    path = tmp_path / "cand" / "results.jsonl"
    written = [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in written), encoding="utf-8")
    assert "\u2028" in path.read_text(encoding="utf-8")
    bench_json = json.loads((path.parent / "bench.json").read_text(encoding="utf-8"))  # as such a bench would
    (path.parent / "bench.json").write_text(json.dumps({**bench_json, "results_sha256": sha256_bytes(
        path.read_bytes())}), encoding="utf-8")
    assert stage.main(args) == 0, capsys.readouterr().err
