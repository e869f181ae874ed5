"""The evidence stage: selection, redaction, the oracle guard, budgets, cold start and reproducible manifests.

Inputs are synthetic previous-generation directories built in tmp_path: rows valid against
schemas/result-row.schema.json, transcripts and patches written with skillevo.agent.transcript.write so
their size and sha256 match the row, exactly as the bench stores them.

A transcript or patch whose bytes do not match its row is *refused*: the row is left out of the bundle,
the manifest lists it under `dropped` with the reason, and the next eligible row takes its place.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from skillevo import evidence as ev
from skillevo.agent import transcript
from skillevo.core import config, memory
from skillevo.core import tasks as tasks_mod
from skillevo.core.oracle_guard import OracleGuard
from skillevo.core.redact import env_secrets
from skillevo.evidence.compact import compact_jsonl, compact_text
from skillevo.files import documents
from skillevo.files.digests import canonical_json, sha256_bytes
from skillevo.files.errors import BadInput
from skillevo.files.schemas import validate
from skillevo.stages import evidence as stage
from tests import gate_rows

PLANTED = "sk-ant-api03-PLANTEDsecretKEY0123456789abcdefXYZ"
ENV_KEY = "literal-proxy-credential-4711"  # matches no pattern: only the literal ANTHROPIC_API_KEY redaction removes it
CANARY = "# skillevo-oracle-canary: 0123456789abcdef0123456789abcdef"
ORACLE_LINE = "assert hidden_checker(lambda: 42) == 'the distinctive hidden expectation'"
ORACLE = f'"""hidden oracle"""\n{CANARY}\nimport pytest\n\n\ndef test_hidden():\n    {ORACLE_LINE}\n'.encode()


def guard() -> OracleGuard:
    return OracleGuard([ORACLE])


# ------------------------------------------------------------------------------------------ builders


def make_row(task: str, arm: str, run: int, *, resolved: bool = False, error_kind: str | None = "verify-failed",
             cost: float | None = 1.0, **fields: Any) -> dict[str, Any]:
    """A complete results row (tests/gate_rows.row, the one row builder) with evidence-flavoured defaults."""
    defaults = {"num_turns": 5, "diff_files": 2, "diff_insertions": 10, "diff_deletions": 3,
                "verify_tail": "x" * 1000 + "\nFAILED tests/test_a.py::test_one - AssertionError\n",
                "session_ids": [f"{task}-{arm}-{run}-s1"]}
    row = gate_rows.row(task, arm, run, resolved=resolved, error_kind=None if resolved else error_kind,
                        cost_usd=cost, **{**defaults, **fields})
    return validate(row, "result-row", "test row")


def events(label: str, n: int = 3, extra: str = "") -> list[dict[str, Any]]:
    return ([{"type": "system", "subtype": "init", "session_id": label}]
            + [{"type": "assistant", "message": {"content": [{"type": "text", "text": f"{label} step {i} {extra}"}]}}
               for i in range(n)]
            + [{"type": "result", "subtype": "success", "total_cost_usd": 0.1, "session_id": label}])


def jsonl(evts: list[dict[str, Any]]) -> bytes:
    """Raw bytes as a careless bench might store them: not redacted (the stage must redact on its own)."""
    return b"".join(json.dumps(e, sort_keys=True).encode() + b"\n" for e in evts)


def add_artifacts(side_dir: Path, row: dict[str, Any], transcripts: list[bytes] = (), patch: bytes | None = None):
    stem = f"{row['task']}-{row['arm']}-run{row['run']}"
    metas = []
    for i, data in enumerate(transcripts, start=1):
        meta = transcript.write(data, side_dir / "transcripts", f"{stem}-s{i}.jsonl")
        metas.append(dict(meta, path=f"transcripts/{meta['path']}"))
    row["transcripts"] = metas
    if patch is not None:
        meta = transcript.write(patch, side_dir / "patches", f"{stem}.patch")
        row["patch"] = dict(meta, path=f"patches/{meta['path']}")
    return validate(row, "result-row.schema.json", "test row")


def write_results(side_dir: Path, rows: list[dict[str, Any]]) -> None:
    side_dir.mkdir(parents=True, exist_ok=True)
    (side_dir / "results.jsonl").write_bytes(b"".join(canonical_json(r) + b"\n" for r in rows))


def patch_text(task: str, body: str = "+    return len(set(words))") -> bytes:
    return f"diff --git a/{task}.py b/{task}.py\n--- a/{task}.py\n+++ b/{task}.py\n@@ -1 +1 @@\n{body}\n".encode()


def promotion() -> dict[str, Any]:
    """A promotion.json made by the real gate code, its one decision's reasons replaced (a secret planted)."""
    from datetime import UTC, datetime

    from skillevo.core.config import Policy
    from skillevo.gate import build_promotion
    from tests.test_gate_promotion import promoting_rows

    incumbent, candidate = gate_rows.sides(promoting_rows())
    doc = build_promotion(incumbent, candidate, gate_rows.freeze(), Policy.from_dict({}),
                          now=datetime(2025, 1, 1, tzinfo=UTC))
    doc["decisions"][0].update(decision="keep_incumbent",
                               reasons=["reason one", "reason two", f"reason three {PLANTED}", "reason four"])
    return validate(doc, "promotion", "test promotion")


def previous_generation(root: Path, *, proposal: str = "# Proposal\n\nShorten the plan step.\n") -> Path:
    """bench-incumbent + bench-candidate + gate/promotion.json + proposal.md, with a planted secret and oracle bytes."""
    prev = root / "previous"
    inc, cand = prev / "bench-incumbent", prev / "bench-candidate"
    inc_rows = [
        add_artifacts(inc, make_row("t1", "workflow", 1, resolved=True, cost=2.0),
                      [jsonl(events("inc-t1-plan")), jsonl(events("inc-t1-work"))], patch_text("t1")),
        add_artifacts(inc, make_row("t2", "workflow", 1, resolved=True, cost=0.5),
                      [jsonl(events("inc-t2"))], patch_text("t2")),
        make_row("t2", "workflow", 2, error_kind="infra-error", ok=False),  # harness trouble: excluded
    ]
    cand_rows = [
        # planted secret in the transcript and in verify output; ENV_KEY only as a literal
        add_artifacts(cand, make_row("t1", "candidate_workflow", 1, verify_tail=f"token {PLANTED} {ENV_KEY}\nFAILED"),
                      [jsonl(events("cand-t1", extra=f"export ANTHROPIC_API_KEY={PLANTED}; key {ENV_KEY}"))],
                      patch_text("t1")),
        # oracle line in the patch: the patch is withheld, the row and its transcript stay
        add_artifacts(cand, make_row("t2", "candidate_workflow", 1, error_kind="oracle-failed"),
                      [jsonl(events("cand-t2"))], patch_text("t2", f"+    {ORACLE_LINE}")),
        # canary in a transcript: that transcript is withheld
        add_artifacts(cand, make_row("t3", "candidate_workflow", 1, resolved=True, cost=1.0),
                      [jsonl(events("cand-t3", extra=CANARY))], patch_text("t3")),
    ]
    write_results(inc, inc_rows)
    write_results(cand, cand_rows)
    (prev / "gate").mkdir()
    (prev / "gate" / "promotion.json").write_text(json.dumps(promotion()), encoding="utf-8")
    (prev / "proposal.md").write_text(proposal, encoding="utf-8")
    return prev


DEFAULT_LIMITS = config.evidence_limits()  # the schema's defaults, read once


def build(prev: Path, limits: config.EvidenceParams = DEFAULT_LIMITS, **kwargs: Any) -> ev.Bundle:
    return ev.build_bundle(ev.load_previous(prev), guard=guard(), limits=limits, skills=("plan", "work"),
                           secrets=(ENV_KEY,), **kwargs)


def all_text(bundle: ev.Bundle) -> str:
    return "\n".join(data.decode() for data in [*bundle.files.values(), bundle.manifest_bytes])


# --------------------------------------------------------------------------------------------- tests


def test_rows_are_selected_by_priority_and_compacted(tmp_path: Path):
    bundle = build(previous_generation(tmp_path))
    rows = json.loads(bundle.files["rows.json"])
    # unresolved first by (task, arm, run), then resolved by cost, highest first; the infra row is excluded
    assert [(r["task"], r["arm"], r["resolved"]) for r in rows] == [
        ("t1", "candidate_workflow", False), ("t2", "candidate_workflow", False),
        ("t1", "workflow", True), ("t3", "candidate_workflow", True), ("t2", "workflow", True)]
    assert bundle.manifest["rows"] == {"considered": 6, "excluded_infra": 1, "refused": 0, "over_cap": 0,
                                       "dropped_for_budget": 0, "selected": 5}
    first = rows[0]
    assert set(first) == {"row", "side", "task", "class", "arm", "run", "resolved", "error_kind", "cost_usd",
                          "num_turns", "output_tokens", "churn", "session_ids", "verify_tail", "transcripts",
                          "patch", "notes"}
    assert first["churn"] == {"files": 2, "insertions": 10, "deletions": 3}
    assert first["transcripts"] == ["transcripts/row1-1.jsonl"] and first["patch"] == "patches/row1.diff"
    assert len(rows[2]["verify_tail"]) == 600 and rows[2]["verify_tail"].endswith("AssertionError\n")
    assert rows[2]["transcripts"] == ["transcripts/row3-1.jsonl", "transcripts/row3-2.jsonl"]
    for r in rows:  # every named file is in the bundle and the manifest
        for name in r["transcripts"] + ([r["patch"]] if r["patch"] else []):
            assert name in bundle.files
    listed = [f["path"] for f in bundle.manifest["files"]]
    assert listed == sorted(bundle.files) and "prior-proposal.md" in listed
    for f in bundle.manifest["files"]:
        assert f["sha256"] == sha256_bytes(bundle.files[f["path"]]) and f["bytes"] == len(bundle.files[f["path"]])
    assert json.loads(bundle.files["gate-summary.json"]) == [
        "candidate_workflow: keep_incumbent — reason one; reason two; reason three [REDACTED]",
        "prediction: The proposer made no prediction (no 'Predicted improvement:' line in proposal.md)."]


def test_priority_puts_unmeasured_cost_last_among_resolved_rows():
    rows = [make_row("a", "work", 1, resolved=True, cost=None), make_row("b", "work", 1, resolved=True, cost=0.1),
            make_row("z", "work", 2), make_row("c", "work", 1, resolved=True, cost=3.0), make_row("z", "work", 1),
            make_row("a", "work", 2, error_kind="session-error", ok=False)]
    ordered, excluded = ev.order_rows(ev.SourceRow(r, "seed", Path("."), "seed:1") for r in rows)
    assert [(s.row["task"], s.row["run"]) for s in ordered] == [("z", 1), ("z", 2), ("c", 1), ("b", 1), ("a", 1)]
    assert excluded == 1


def test_row_cap_and_per_row_transcript_cap(tmp_path: Path):
    bundle = build(previous_generation(tmp_path), config.evidence_limits(max_rows=2, max_transcripts_per_row=1))
    assert bundle.manifest["rows"]["selected"] == 2 and bundle.manifest["rows"]["over_cap"] == 3
    bundle = build(previous_generation(tmp_path / "b"), config.evidence_limits(max_transcripts_per_row=1))
    t1 = json.loads(bundle.files["rows.json"])[2]
    assert t1["transcripts"] == ["transcripts/row3-1.jsonl"]  # the later (work) session is kept
    assert b"inc-t1-work" in bundle.files["transcripts/row3-1.jsonl"]
    assert any("max_transcripts_per_row 1" in n for n in t1["notes"])


def test_a_planted_secret_never_reaches_the_bundle(tmp_path: Path):
    prev = previous_generation(tmp_path)
    raw = b"".join(p.read_bytes() for p in (prev / "bench-candidate" / "transcripts").iterdir())
    assert PLANTED.encode() in raw and ENV_KEY.encode() in raw  # the inputs really carry them
    bundle = build(prev)
    text = all_text(bundle)
    assert PLANTED not in text and ENV_KEY not in text and "[REDACTED]" in text
    assert "sk-ant-" not in text
    # the literal comes from the environment in the stage
    assert env_secrets({"ANTHROPIC_API_KEY": ENV_KEY, "ANTHROPIC_AUTH_TOKEN": "", "OTHER": "x"}) == (ENV_KEY,)


def test_a_secret_in_a_json_key_is_redacted_too(tmp_path: Path):
    side = tmp_path / "previous" / "bench-candidate"
    evts = [{"type": "user", "headers": {PLANTED: "value", "x-api-key": "plain-value-123"}}]
    write_results(side, [add_artifacts(side, make_row("t1", "candidate_work", 1), [jsonl(evts)])])
    bundle = build(tmp_path / "previous")
    assert PLANTED not in all_text(bundle) and "plain-value-123" not in all_text(bundle)


def test_no_oracle_bytes_reach_the_bundle(tmp_path: Path):
    bundle = build(previous_generation(tmp_path))
    rows = json.loads(bundle.files["rows.json"])
    t2 = rows[1]
    assert t2["task"] == "t2" and t2["patch"] is None and t2["transcripts"] == ["transcripts/row2-1.jsonl"]
    assert any("withheld" in n for n in t2["notes"])
    t3 = rows[3]
    assert t3["task"] == "t3" and t3["transcripts"] == [] and t3["patch"] == "patches/row4.diff"
    dropped = {d["what"]: d["reason"] for d in bundle.manifest["dropped"]}
    assert dropped["patches/row2.diff"] == "withheld: carries a line of a hidden oracle file"
    assert dropped["transcripts/row4-1.jsonl"] == "withheld: carries a hidden oracle's canary"
    # no distinctive line of the oracle anywhere, neither raw nor inside a JSON string
    text = all_text(bundle)
    assert "skillevo-oracle-canary" not in text and "0123456789abcdef0123456789abcdef" not in text
    assert ORACLE_LINE not in text and ORACLE_LINE.replace("'", "\\'") not in text
    for path, data in bundle.files.items():
        assert guard().check_file(path, data) is None, path


def test_oracle_lines_inside_json_strings_and_verify_output_are_caught(tmp_path: Path):
    side = tmp_path / "previous" / "bench-candidate"
    tool_result = f"def test_hidden():\n        {ORACLE_LINE}\n"  # one JSON string, escaped newlines
    rows = [add_artifacts(side, make_row("t1", "candidate_work", 1, verify_tail=f"E   {ORACLE_LINE}\nFAILED"),
                          [jsonl([{"type": "user", "content": tool_result}])])]
    write_results(side, rows)
    bundle = build(tmp_path / "previous")
    [row] = json.loads(bundle.files["rows.json"])
    assert row["transcripts"] == [] and row["verify_tail"] is None
    assert ORACLE_LINE not in all_text(bundle)


def test_guard_ignores_short_lines_and_can_exempt_visible_lines():
    g = guard()
    assert g.check_text("import pytest\n") is None  # too short to be distinctive
    assert g.check_text(f"   {ORACLE_LINE}   ") is not None  # whitespace is stripped
    visible = OracleGuard([ORACLE], visible=[f"{ORACLE_LINE}\n{CANARY}\n".encode()])
    assert visible.check_text(ORACLE_LINE) is None  # the agent sees it anyway
    assert visible.check_text(CANARY) is not None  # a canary is never exempt


def test_guard_from_a_tasks_file(tmp_path: Path):
    tasks_file = tasks_fixture(tmp_path)
    g = OracleGuard.for_tasks(tasks_mod.load(tasks_file), exempt_visible=False)
    assert g.check_text(ORACLE_LINE) and g.check_text("# visible line shared by target and oracle file!") is not None
    g = OracleGuard.for_tasks(tasks_mod.load(tasks_file))
    assert g.check_text(ORACLE_LINE) and g.check_text("# visible line shared by target and oracle file!") is None


def test_a_transcript_that_does_not_match_its_row_is_refused(tmp_path: Path):
    prev = previous_generation(tmp_path)
    cand = prev / "bench-candidate"
    first = json.loads((cand / "results.jsonl").read_text().splitlines()[0])
    path = cand / first["transcripts"][0]["path"]
    os.chmod(path, 0o600)
    path.write_bytes(path.read_bytes().replace(b"step 0", b"step X"))  # same size, other sha256
    bundle = build(prev, config.evidence_limits(max_rows=2))
    rows = json.loads(bundle.files["rows.json"])
    assert [(r["task"], r["arm"]) for r in rows] == [("t2", "candidate_workflow"), ("t1", "workflow")]
    assert bundle.manifest["rows"]["refused"] == 1 and bundle.manifest["rows"]["over_cap"] == 2
    [refusal] = [d for d in bundle.manifest["dropped"] if d["what"].startswith("row t1/candidate_workflow")]
    assert refusal == {"what": "row t1/candidate_workflow/run1 (bench-candidate:1)",
                       "reason": f"refused: bench-candidate/{first['transcripts'][0]['path']}: does not match "
                                 "its row (size or sha256 differs) (rule: transcripts match rows)"}
    assert str(tmp_path) not in bundle.manifest_bytes.decode()


@pytest.mark.parametrize("tamper", ["missing", "symlink", "longer", "patch"])
def test_other_broken_artifacts_refuse_the_row(tmp_path: Path, tamper: str):
    prev = previous_generation(tmp_path)
    cand = prev / "bench-candidate"
    first = json.loads((cand / "results.jsonl").read_text().splitlines()[0])
    path = cand / (first["patch"] if tamper == "patch" else first["transcripts"][0])["path"]
    os.chmod(path, 0o600)
    if tamper == "missing":
        path.unlink()
    elif tamper == "symlink":
        target = tmp_path / "elsewhere.jsonl"
        shutil.copyfile(path, target)
        path.unlink()
        path.symlink_to(target)
    else:
        path.write_bytes(path.read_bytes() + b"\n")
    bundle = build(prev)
    assert bundle.manifest["rows"]["refused"] == 1
    assert all(r["task"] != "t1" or r["arm"] != "candidate_workflow" for r in json.loads(bundle.files["rows.json"]))


def test_over_budget_drops_rows_then_the_proposal_then_fails(tmp_path: Path):
    big = "# Proposal\n" + "".join(f"line {i} of a long proposal\n" for i in range(300))
    prev = previous_generation(tmp_path, proposal=big)
    full = build(prev)
    sizes = {p: len(v) for p, v in full.files.items()}
    fixed = sizes["learnings.json"] + sizes["gate-summary.json"] + sizes["rejected.json"]
    proposal = sizes["prior-proposal.md"]

    # room for everything but the last row's files: the lowest-priority row goes first
    last = [p for p in sizes if p.startswith(("transcripts/row5-", "patches/row5."))]
    bundle = build(prev, config.evidence_limits(max_bundle_bytes=full.total_bytes - sum(sizes[p] for p in last)))
    assert bundle.manifest["rows"]["selected"] == 4 and bundle.manifest["rows"]["dropped_for_budget"] == 1
    assert [d["what"] for d in bundle.manifest["dropped"]][-1] == "row 5 (t2/workflow/run1)"
    assert "over evidence.max_bundle_bytes" in bundle.manifest["dropped"][-1]["reason"]
    assert bundle.total_bytes <= bundle.manifest["limits"]["max_bundle_bytes"]

    # room for the proposal but no row: every row goes, the proposal stays
    bundle = build(prev, config.evidence_limits(max_bundle_bytes=fixed + proposal + 3))
    assert bundle.manifest["rows"]["selected"] == 0 and "prior-proposal.md" in bundle.files
    assert json.loads(bundle.files["rows.json"]) == []

    # not even the proposal fits: it goes too
    bundle = build(prev, config.evidence_limits(max_bundle_bytes=max(fixed + 3, 1024)))
    assert "prior-proposal.md" not in bundle.files and bundle.manifest["rows"]["dropped_for_budget"] == 5
    assert bundle.manifest["dropped"][-1]["what"] == "prior-proposal.md"

    # not even the fixed files fit: fail, naming the budget and the sizes
    learnings = [{"skill": "work", "date": None, "task": None, "friction": "f" * 200, "suggestion": "s" * 200,
                  "line": i} for i in range(10)]
    with pytest.raises(ev.EvidenceError, match=r"max_bundle_bytes 1024: \d+ bytes with every row, the prior proposal "
                                               r"and every rejected candidate dropped \(gate-summary.json \d+, "
                                               r"learnings.json \d+, rejected.json 3"):
        build(prev, config.evidence_limits(max_bundle_bytes=1024), learnings=learnings)


def test_over_long_transcripts_keep_whole_trailing_events():
    evts = events("long", n=200, extra="padding " * 20)
    data = b"".join(canonical_json(e) + b"\n" for e in evts)
    out, omitted = compact_jsonl(data, 4096)
    assert len(out) <= 4096 and omitted > 0
    lines = out.split(b"\n")
    assert json.loads(lines[0]) == {"type": "skillevo_compacted", "omitted_bytes": omitted}
    kept = out[len(lines[0]) + 1:]
    assert data.endswith(kept) and kept.startswith(b"{")  # whole events, the most recent ones
    assert omitted == len(data) - len(kept)
    assert compact_jsonl(data, len(data)) == (data, 0)
    # one huge event: its long strings are elided rather than losing every event
    huge = canonical_json({"type": "user", "content": "z" * 100_000}) + b"\n"
    out, _ = compact_jsonl(huge, 8192)
    assert len(out) <= 8192 and b"chars elided" in out and out.count(b"\n") == 2


def test_over_long_text_keeps_head_and_tail():
    text = "".join(f"line {i}\n" for i in range(5000))
    out, omitted = compact_text(text, 2048)
    assert len(out.encode()) <= 2048 and omitted > 0
    assert out.startswith("line 0\n") and out.endswith("line 4999\n")
    assert f"[skillevo: {omitted} bytes omitted from the middle of this file]\n" in out
    assert compact_text("short\n", 2048) == ("short\n", 0)


def test_big_files_are_compacted_in_the_bundle(tmp_path: Path):
    side = tmp_path / "previous" / "bench-incumbent"
    big_patch = patch_text("t1", "\n".join(f"+line {i}" for i in range(3000)))
    write_results(side, [add_artifacts(side, make_row("t1", "work", 1), [jsonl(events("big", n=300))], big_patch)])
    bundle = build(tmp_path / "previous", config.evidence_limits(max_file_bytes=4096))
    assert all(len(v) <= 4096 for v in bundle.files.values())
    assert json.loads(bundle.files["transcripts/row1-1.jsonl"].split(b"\n")[0])["type"] == "skillevo_compacted"
    assert b"bytes omitted from the middle" in bundle.files["patches/row1.diff"]
    notes = json.loads(bundle.files["rows.json"])[0]["notes"]
    assert any("compacted" in n for n in notes)


def test_learnings_keep_the_last_n_for_evolvable_skills(tmp_path: Path):
    path = tmp_path / "learnings.jsonl"
    items = [{"skill": ["work", "plan", "review"][i % 3], "date": f"2025-01-0{i % 9 + 1}", "task": None,
              "friction": f"friction {i}", "suggestion": f"suggestion {i} {PLANTED if i == 7 else ''}"}
             for i in range(9)]
    path.write_text("\n".join(json.dumps(i) for i in items) + "\n\n", encoding="utf-8")
    picked, digest = ev.load_learnings(path, ("plan", "work"), 4)
    assert [p["friction"] for p in picked] == ["friction 3", "friction 4", "friction 6", "friction 7"]
    assert digest == sha256_bytes(path.read_bytes())
    bundle = ev.build_bundle(ev.Inputs("cold-start"), guard=guard(), skills=("plan", "work"), learnings=picked,
                             learnings_digest=digest)
    stored = json.loads(bundle.files["learnings.json"])
    assert len(stored) == 4 and set(stored[0]) == {"skill", "date", "task", "friction", "suggestion"}
    assert PLANTED not in bundle.files["learnings.json"].decode()
    assert bundle.manifest["inputs"] == {"learnings": digest}


@pytest.mark.parametrize("line, message", [
    ("not json", "not valid JSON"),
    ('["a list"]', "exactly the keys"),
    ('{"skill": "work", "friction": "f", "suggestion": "s", "date": null}', "exactly the keys"),
    ('{"skill": "", "date": null, "task": null, "friction": "f", "suggestion": "s"}', "skill: must be"),
    ('{"skill": "work", "date": 5, "task": null, "friction": "f", "suggestion": "s"}', "date: must be"),
])
def test_a_malformed_learning_fails_naming_file_and_line(tmp_path: Path, line: str, message: str):
    path = tmp_path / "learnings.jsonl"
    good = '{"skill": "work", "date": null, "task": "t1", "friction": "f", "suggestion": "s"}'
    path.write_text(f"{good}\n{line}\n", encoding="utf-8")
    with pytest.raises(BadInput, match=rf"learnings.jsonl:2: .*{message}"):
        ev.load_learnings(path, ("work",), 40)


@pytest.mark.parametrize("make", ["missing", "empty", "hidden-only", "readme-only"])
def test_cold_start(tmp_path: Path, make: str):
    prev = tmp_path / "previous"
    if make != "missing":
        prev.mkdir()
    if make == "hidden-only":
        (prev / ".gitignore").write_text("*\n")
    if make == "readme-only":
        (prev / "README.md").write_text("# previous/\n")
    inputs = ev.load_previous(prev)
    assert inputs.source == "cold-start"
    bundle = ev.build_bundle(inputs, guard=guard(), skills=("work",))
    out = ev.write_bundle(bundle, tmp_path / "evidence")
    manifest = json.loads((out / "manifest.json").read_text())
    validate(manifest, "evidence-manifest.schema.json", "manifest")
    assert manifest["source"] == "cold-start" and manifest["rows"]["selected"] == 0 and manifest["inputs"] == {}
    assert sorted(p.name for p in out.iterdir()) == ["gate-summary.json", "learnings.json", "manifest.json",
                                                     "patches", "rejected.json", "rows.json", "transcripts"]
    assert json.loads((out / "rejected.json").read_text()) == [] and manifest["rejected"]["considered"] == 0
    assert json.loads((out / "rows.json").read_text()) == []


def test_same_inputs_give_byte_identical_manifests(tmp_path: Path):
    one = previous_generation(tmp_path / "one")
    two = tmp_path / "elsewhere" / "copy"
    shutil.copytree(one, two)  # another absolute path, other mtimes
    a = ev.write_bundle(build(one), tmp_path / "a")
    b = ev.write_bundle(build(two), tmp_path / "b")
    assert (a / "manifest.json").read_bytes() == (b / "manifest.json").read_bytes()
    for f in json.loads((a / "manifest.json").read_text())["files"]:
        assert (a / f["path"]).read_bytes() == (b / f["path"]).read_bytes()
    data = (a / "manifest.json").read_bytes()
    assert data.endswith(b"}\n") and data == documents.dump_json(json.loads(data))
    assert str(tmp_path).encode() not in data
    validate(json.loads(data), "evidence-manifest.schema.json", "manifest")


def test_write_bundle_modes_and_refusals(tmp_path: Path):
    bundle = build(previous_generation(tmp_path))
    out = ev.write_bundle(bundle, tmp_path / "evidence")
    for path in [out, *out.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o755 if path.is_dir() else 0o644), path
    # a previous bundle is replaced
    (out / "transcripts" / "row99-1.jsonl").write_text("stale")
    ev.write_bundle(bundle, out)
    assert not (out / "transcripts" / "row99-1.jsonl").exists()
    # anything else is refused and left alone
    other = tmp_path / "work"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    (other / "manifest.json").write_text("{}")
    with pytest.raises(ev.EvidenceError, match="not a previous evidence bundle"):
        ev.write_bundle(bundle, other)
    assert (other / "notes.txt").read_text() == "keep me"


def test_the_current_incumbent_side_joins_the_previous_generation(tmp_path: Path):
    """dvc.yaml passes --incumbent results/bench-incumbent --previous previous (a README until a generation fails)."""
    built = previous_generation(tmp_path / "gen")
    prev = tmp_path / "previous"
    prev.mkdir()
    (prev / "README.md").write_text("what the last generation left\n")
    (prev / "stray").mkdir()
    inputs = ev.load_previous(prev, built / "bench-incumbent")
    assert inputs.source == "previous" and set(inputs.digests) == {"bench-incumbent/results.jsonl"}
    bundle = ev.build_bundle(inputs, guard=guard())
    assert [r["arm"] for r in json.loads(bundle.files["rows.json"])] == ["workflow", "workflow"]
    assert bundle.manifest["dropped"][0] == {"what": "previous stray", "reason": "ignored: not an evidence input"}
    # the current incumbent side takes the place of the previous one
    inputs = ev.load_previous(built, tmp_path / "gen" / "previous" / "bench-incumbent")
    assert {"what": "previous bench-incumbent/",
            "reason": "ignored: --incumbent gives this generation's incumbent side"} in inputs.dropped
    assert ev.load_previous(None, None).source == "cold-start"
    with pytest.raises(ev.EvidenceError, match="--incumbent must be a bench side directory"):
        ev.load_previous(prev, tmp_path / "missing")


def test_bad_inputs_fail_with_a_clear_message(tmp_path: Path):
    prev = tmp_path / "previous"
    prev.mkdir()
    side = prev / "bench-candidate"
    write_results(side, [make_row("t1", "workflow", 1)])  # an incumbent row on the candidate side
    with pytest.raises(BadInput, match=r"results.jsonl:1: \$.side"):
        ev.load_previous(prev)
    (side / "results.jsonl").write_text('{"task": NaN}\n')
    with pytest.raises(BadInput, match=r"results.jsonl:1: not valid JSON: NaN is not a number"):
        ev.load_previous(prev)
    (side / "results.jsonl").write_text('{"task": "t1"}\n')
    with pytest.raises(BadInput, match=r"results.jsonl:1: \$: 'class' is a required property"):
        ev.load_previous(prev)
    (prev / "gate").mkdir()
    (prev / "gate" / "promotion.json").write_text('{"schema_version": 1}')
    write_results(side, [])
    with pytest.raises(BadInput, match="promotion.json"):
        ev.load_previous(prev)


@pytest.mark.parametrize("section, message", [
    ({"max_rows": -1}, r"\$\.max_rows: -1 is less than the minimum of 0"),
    ({"max_file_bytes": True}, r"\$\.max_file_bytes: True is not of type 'integer'"),
    ({"max_rowz": 3}, "'max_rowz' was unexpected"),
    ({"max_rejected": 1001}, r"\$\.max_rejected: 1001 is greater than the maximum of 1000"),
])
def test_params_are_checked(section: dict[str, Any], message: str):
    with pytest.raises(BadInput, match=message):
        config.evidence_limits(**section)
    assert config.evidence_limits() == config.EvidenceParams(
        max_rows=12, max_transcripts_per_row=2, max_file_bytes=262144, max_bundle_bytes=2097152, max_learnings=40,
        verify_tail_chars=600, max_rejected=20)


# ------------------------------------------------------------------------------------------ rejected candidates

FAMILY = {"work/SKILL.md": b"---\nname: work\ndescription: d\n---\n# Work\n\n- step one\n- step two\n- step three\n"}
THIS = gate_rows.bench("incumbent", {"t1": "trivial"})["skills_digest"]


def rejected(gen: int, drop: str, decision: str = "keep_incumbent", digest: str = THIS,
             reasons: tuple[str, ...] = ("no cheaper",)) -> dict[str, Any]:
    text = b"".join(line for line in FAMILY["work/SKILL.md"].splitlines(True) if drop.encode() not in line)
    return memory.entry(gen, digest, FAMILY, (), {"work/SKILL.md": text}, (),
                        [{"candidate_arm": "candidate_workflow", "decision": decision, "reasons": list(reasons)}])


def with_memory(root: Path, entries: list[dict[str, Any]]) -> tuple[Path, Path]:
    """A previous generation, its memory of rejected candidates, and this generation's incumbent side."""
    prev = previous_generation(root)
    (prev / "rejected.json").write_bytes(memory.dump(entries))
    incumbent = root / "bench-incumbent"
    shutil.copytree(prev / "bench-incumbent", incumbent)
    (incumbent / "bench.json").write_text(json.dumps(gate_rows.bench("incumbent", {"t1": "trivial"})))
    return prev, incumbent


def test_every_rejected_candidate_of_this_incumbent_reaches_the_bundle_newest_first(tmp_path: Path):
    entries = [rejected(1, "step one"), rejected(2, "step two", "insufficient_evidence"),
               rejected(3, "step one", digest="3" * 64),  # measured against another incumbent
               rejected(4, "step three", reasons=("r1", f"token {PLANTED}", "r3", "r4"))]
    prev, incumbent = with_memory(tmp_path, entries)
    bundle = ev.build_bundle(ev.load_previous(prev, incumbent), guard=guard(), skills=("work",), secrets=(ENV_KEY,))
    shown = json.loads(bundle.files["rejected.json"])
    assert [e["generation"] for e in shown] == [4, 2, 1]
    assert [e["decisions"][0]["decision"] for e in shown] == ["keep_incumbent", "insufficient_evidence",
                                                             "keep_incumbent"]
    for entry, step in zip(shown, ("step three", "step two", "step one"), strict=True):
        assert entry["diff"].startswith("--- a/work/SKILL.md\n+++ b/work/SKILL.md\n@@ ")
        assert [line for line in entry["diff"].splitlines() if line.startswith("-") and not line.startswith("---")] == \
               [f"-- {step}"]
    assert shown[0]["decisions"][0]["reasons"] == ["r1", "token [REDACTED]", "r3"]  # the first three, redacted
    assert PLANTED not in all_text(bundle)
    manifest = bundle.manifest
    validate(manifest, "evidence-manifest.schema.json", "manifest")
    assert manifest["rejected"] == {"considered": 4, "other_incumbent": 1, "over_cap": 0, "dropped": 0, "selected": 3}
    assert manifest["inputs"]["rejected.json"] == sha256_bytes((prev / "rejected.json").read_bytes())
    assert {"what": "rejected candidate of generation 3",
            "reason": "left out: measured against another incumbent than this generation's"} in manifest["dropped"]
    capped = ev.build_bundle(ev.load_previous(prev, incumbent), guard=guard(), skills=("work",),
                             limits=config.evidence_limits(max_rejected=2))
    assert [e["generation"] for e in json.loads(capped.files["rejected.json"])] == [4, 2]
    assert capped.manifest["rejected"]["over_cap"] == 1


def test_a_rejected_diff_with_oracle_bytes_is_withheld(tmp_path: Path):
    entry = rejected(2, "step two")
    entry["diff"] += f"+{ORACLE_LINE}\n"
    prev, incumbent = with_memory(tmp_path, [rejected(1, "step one"), entry])
    bundle = ev.build_bundle(ev.load_previous(prev, incumbent), guard=guard(), skills=("work",))
    assert [e["generation"] for e in json.loads(bundle.files["rejected.json"])] == [1]
    assert ORACLE_LINE not in all_text(bundle) and bundle.manifest["rejected"]["dropped"] == 1


def test_over_budget_drops_the_oldest_rejected_candidate_after_the_rows_and_the_proposal(tmp_path: Path):
    long = ("the candidate cost about the same as the incumbent on every task " * 3,)
    prev, incumbent = with_memory(tmp_path, [rejected(1, "step one", reasons=long),
                                             rejected(2, "step two", reasons=long),
                                             rejected(4, "step three", reasons=long)])
    full = ev.build_bundle(ev.load_previous(prev, incumbent), guard=guard(), skills=("work",))
    shown = json.loads(full.files["rejected.json"])
    newest_two = len(documents.dump_json(shown[:2]))
    room = len(full.files["learnings.json"]) + len(full.files["gate-summary.json"]) + len(b"[]\n") + newest_two
    bundle = ev.build_bundle(ev.load_previous(prev, incumbent), guard=guard(), skills=("work",),
                             limits=config.evidence_limits(max_bundle_bytes=max(room, 1024)))
    assert room >= 1024, room  # the budget is what the test says it is
    assert bundle.manifest["rows"]["selected"] == 0 and "prior-proposal.md" not in bundle.files
    assert [e["generation"] for e in json.loads(bundle.files["rejected.json"])] == [4, 2]
    assert bundle.manifest["dropped"][-1]["what"] == "rejected candidate of generation 1"
    assert bundle.manifest["rejected"] == {"considered": 3, "other_incumbent": 0, "over_cap": 0, "dropped": 1,
                                           "selected": 2}


@pytest.mark.parametrize("tamper, message", [
    (lambda doc: doc["candidates"][0].pop("diff"), "'diff' is a required property"),
    (lambda doc: doc["candidates"][0]["decisions"][0].update(decision="promote"), "candidates"),
    (lambda doc: doc.update(schema_version=2), "schema_version"),
])
def test_a_malformed_memory_fails_naming_the_file(tmp_path: Path, tamper, message):
    prev, incumbent = with_memory(tmp_path, [rejected(1, "step one")])
    doc = json.loads((prev / "rejected.json").read_text())
    tamper(doc)
    (prev / "rejected.json").write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=f"rejected.json.*{message}"):
        ev.load_previous(prev, incumbent)


# ------------------------------------------------------------------------------------------------ CLI


def tasks_fixture(root: Path) -> Path:
    tasks = root / "tasks"
    target = tasks / "targets" / "demo"
    target.mkdir(parents=True)
    (target / "demo.py").write_text("# visible line shared by target and oracle file!\n")
    (tasks / "oracles" / "t1").mkdir(parents=True)
    shared = b"# visible line shared by target and oracle file!\n"
    (tasks / "oracles" / "t1" / "test_oracle.py").write_bytes(ORACLE + shared)
    (tasks / "tasks.yaml").write_text(
        "schema_version: 1\ntasks:\n  - id: t1\n    class: trivial\n    target: targets/demo\n"
        "    prompt: do it\n    verify: 'true'\n    oracle:\n      command: 'true'\n"
        "      files:\n        - {source: t1/test_oracle.py, target: test_oracle.py}\n")
    return tasks / "tasks.yaml"


def run_stage(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = stage.main(list(argv))
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def test_cli_help_documents_every_option():
    code, out, _ = run_stage("--help")
    assert code == 0
    for text in ("--previous", "[previous/memory]", "rejected.json", "--seed", "--learnings", "learnings.jsonl",
                 "--tasks", "tasks/tasks.yaml", "--params", "params.yaml", "--out", "results/evidence", "evidence:",
                 "skills.evolvable", "cold start", "gate/promotion.json", "proposal.md", "Exit 2"):
        assert text in out, text


def test_cli_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", ENV_KEY)
    tasks_file = tasks_fixture(tmp_path)
    prev = previous_generation(tmp_path)
    params = tmp_path / "params.yaml"
    params.write_text("arms: {workflow: {sessions: [{skill: work, prompt: '{prompt}'}]}}\n"
                      "skills: {evolvable: [work]}\nevidence: {max_rows: 3}\n")
    learnings = tmp_path / "learnings.jsonl"
    learnings.write_text('{"skill": "work", "date": null, "task": null, "friction": "f", "suggestion": "s"}\n')
    args = ["--previous", str(prev), "--tasks", str(tasks_file), "--params", str(params),
            "--learnings", str(learnings), "--out", str(tmp_path / "evidence")]
    code, out, err = run_stage(*args)
    assert code == 0, err
    assert out.startswith("evidence: source previous; 3 rows selected of 4")  # 2 rows held back: gate tasks
    assert "left out 2 rows of the gate's tasks: held back: the gate decides on these tasks" in err
    manifest = (tmp_path / "evidence" / "manifest.json").read_bytes()
    assert set(json.loads(manifest)["inputs"]) == {"bench-incumbent/results.jsonl", "bench-candidate/results.jsonl",
                                                   "gate/promotion.json", "proposal.md", "learnings"}
    text = "".join(p.read_text() for p in (tmp_path / "evidence").rglob("*") if p.is_file())
    assert ENV_KEY not in text and PLANTED not in text and ORACLE_LINE not in text
    assert run_stage(*args)[0] == 0  # a rerun replaces its own bundle, byte for byte
    assert (tmp_path / "evidence" / "manifest.json").read_bytes() == manifest
    # --seed instead of --previous, and a seed directory of mixed sides
    seed = tmp_path / "seed"
    seed.mkdir()
    for side in ("bench-incumbent", "bench-candidate"):
        for sub in ("transcripts", "patches"):
            shutil.copytree(prev / side / sub, seed / sub, dirs_exist_ok=True)
    (seed / "results.jsonl").write_bytes(b"".join((prev / s / "results.jsonl").read_bytes()
                                                  for s in ("bench-incumbent", "bench-candidate")))
    code, out, err = run_stage("--seed", str(seed), *args[2:-1], str(tmp_path / "evidence"))
    assert code == 0, err
    assert json.loads((tmp_path / "evidence" / "manifest.json").read_text())["source"] == "seed"
    # failures exit 2 with the reason
    code, _, err = run_stage(*args[:-1], str(tmp_path / "evidence"), "--seed", str(seed))
    assert code == 2
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "keep.txt").write_text("x")
    code, _, err = run_stage(*args[:-1], str(tmp_path / "junk"))
    assert code == 2 and "refusing to replace it" in err
    params.write_text("arms: {workflow: {sessions: [{skill: work, prompt: '{prompt}'}]}}\n"
                      "evidence: {max_bundle_bytes: 1024}\nskills: {evolvable: [work]}\n")
    learnings.write_text("".join(json.dumps({"skill": "work", "date": None, "task": None, "friction": "f" * 300,
                                             "suggestion": "s"}) + "\n" for _ in range(5)))
    code, _, err = run_stage(*args)
    assert code == 2 and "cannot fit evidence.max_bundle_bytes 1024" in err
    # as dvc.yaml runs it: this generation's incumbent side plus a previous/ holding only its README
    params.write_text("arms: {workflow: {sessions: [{skill: work, prompt: '{prompt}'}]}}\n"
                      "skills: {evolvable: [work]}\n")
    readme_only = tmp_path / "readme-only"
    readme_only.mkdir()
    (readme_only / "README.md").write_text("# previous/\n")
    code, out, err = run_stage("--incumbent", str(prev / "bench-incumbent"), "--previous", str(readme_only),
                               *args[2:])
    assert code == 0, err
    assert out.startswith("evidence: source previous; 1 rows selected of 2 (1 excluded as infra")  # t1 held back


@pytest.mark.parametrize("split, shown", [
    ({}, "automatic"),
    ({"gate": ["t1"]}, "explicit"),
    ({"gate": ["t1"], "evidence": ["t1"], "shared": True}, "shared"),
])
def test_rows_of_the_gate_s_tasks_never_reach_the_proposer(tmp_path: Path, split, shown):
    tasks_file = tasks_fixture(tmp_path)
    prev = previous_generation(tmp_path)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"arms": {"workflow": {"sessions": [{"skill": "work", "prompt": "{prompt}"}]}},
                                      "skills": {"evolvable": ["work"]}, "tasks": split}))
    code, out, err = run_stage("--previous", str(prev), "--tasks", str(tasks_file), "--params", str(params),
                               "--out", str(tmp_path / "evidence"))
    assert code == 0, err
    tasks_seen = {row["task"] for row in json.loads((tmp_path / "evidence/rows.json").read_text())}
    considered = {json.loads(line)["task"] for side in ("bench-incumbent", "bench-candidate")
                  for line in (prev / side / "results.jsonl").read_text().splitlines()}
    assert "t1" in considered  # the only task in the tasks file, so the gate's
    assert ("t1" in tasks_seen) is (shown == "shared")
    assert tasks_seen and tasks_seen <= considered
