"""`skillevo run TASK` runs one cell as the bench does, and `skillevo show` reads its transcripts (issue 32, item 6):
a team sees what a session does on one task before it pays for a generation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from skillevo.files.errors import BadInput
from skillevo.ops import transcript_view
from tests.bench_fixtures import make_mini, params_doc

EVENTS = [
    {"type": "system", "subtype": "init", "session_id": "s1", "model": "claude-sonnet-4-6",
     "claude_code_version": "2.1.332", "tools": ["Read", "Bash"]},
    {"type": "assistant", "message": {"content": [
        {"type": "text", "text": "Reading the   module first."},
        {"type": "tool_use", "name": "Read", "input": {"file_path": "a.py"}}]}},
    {"type": "user", "message": {"content": [{"type": "tool_result", "content": "x" * 1000}]}},
    {"type": "assistant", "message": {"content": [
        {"type": "tool_use", "name": "Bash", "input": {"command": "false"}}]}},
    {"type": "user", "message": {"content": [{"type": "tool_result", "is_error": True,
                                              "content": [{"type": "text", "text": "exit 1"}]}]}},
    {"type": "result", "subtype": "success", "num_turns": 3, "total_cost_usd": 0.0123456, "duration_ms": 900},
]


def test_a_transcript_reads_as_one_line_per_step():
    shown = list(transcript_view.lines(EVENTS))
    assert shown[0] == "session s1: model claude-sonnet-4-6, CLI 2.1.332, tools Read, Bash"
    assert shown[1] == "assistant: Reading the module first."
    assert shown[2] == '  -> Read {"file_path": "a.py"}'
    assert shown[3].startswith("  <- xxx") and shown[3].endswith("... (1000 chars)")
    assert shown[5] == "  <- error: exit 1"
    assert shown[6] == "end: success after 3 turn(s), $0.0123, 900 ms"
    assert list(transcript_view.lines(EVENTS, None))[3] == "  <- " + "x" * 1000  # --full


def test_a_malformed_step_is_skipped_never_a_crash():
    """A transcript is the agent's output: content that is not a list of objects reads as nothing, for `show` and
    the gate's page alike (found by mypy: a string inside content raised AttributeError)."""
    hostile = [{"type": "assistant", "message": {"content": ["a string", 7, None, {"type": "text", "text": "ok"}]}},
               {"type": "user", "message": "not an object"}, {"type": "user", "message": {"content": "text"}}]
    assert list(transcript_view.lines(hostile)) == ["assistant: ok"]


def test_show_reads_only_below_the_directory_a_row_names(tmp_path):
    (tmp_path / "transcripts").mkdir()
    (tmp_path / "transcripts/a.jsonl").write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    (tmp_path / "results.jsonl").write_text(json.dumps({"transcripts": [{"path": "transcripts/a.jsonl"}]}) + "\n")
    [(where, data)] = transcript_view.transcripts(tmp_path)
    assert where.endswith("transcripts/a.jsonl") and len(transcript_view.parse(data, where)) == len(EVENTS)
    (tmp_path / "results.jsonl").write_text(json.dumps({"transcripts": [{"path": "../../etc/passwd"}]}) + "\n")
    with pytest.raises(BadInput):
        transcript_view.transcripts(tmp_path)
    with pytest.raises(BadInput, match="neither a transcript nor a directory with results.jsonl"):
        transcript_view.transcripts(tmp_path / "transcripts")


def _skillevo(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "skillevo", *args], cwd=cwd, capture_output=True, text=True)


@pytest.mark.cli
@pytest.mark.bwrap
def test_one_task_runs_alone_and_its_transcript_reads(tmp_path):
    tasks_file = make_mini(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params_doc()))
    from tests.bench_fixtures import ROOT

    family = ["--skills", str(ROOT / "skills"), "--tasks", str(tasks_file)]
    done = _skillevo(tmp_path, "run", "greet", *family)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "results/run/greet-auto"
    assert "run 1: resolved" in done.stdout and "skillevo show results/run/greet-auto" in done.stdout
    [row] = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert row["arm"] == "auto" and row["resolved"] is True
    shown = _skillevo(tmp_path, "show", str(out))
    assert shown.returncode == 0, shown.stderr
    assert "  -> Skill " in shown.stdout and "end: success" in shown.stdout
    again = _skillevo(tmp_path, "run", "greet", *family)  # never over another run
    assert again.returncode == 2 and "exists" in again.stderr
    unknown = _skillevo(tmp_path, "run", "nope", *family, "--out", str(tmp_path / "x"))
    assert unknown.returncode == 2 and "no task 'nope'" in unknown.stderr and "greet" in unknown.stderr
    bad_arm = _skillevo(tmp_path, "run", "greet", "--arm", "nope", *family, "--out", str(tmp_path / "y"))
    assert bad_arm.returncode == 2 and "no incumbent-side arm 'nope'" in bad_arm.stderr
