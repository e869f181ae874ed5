"""Synthetic gate inputs: results rows, bench.json, freeze manifest and aggregates.

Rows and bench.json follow docs/formats.md and also carry the extra fields schemas/result-row and bench-run ask for.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from skillevo.core import sampling
from skillevo.core.config import SamplingParams, section
from skillevo.core.controls import order
from skillevo.core.limits import Limits
from skillevo.core.results import EXCLUDED_ERROR_KINDS, Side
from skillevo.files.digests import canonical_json, sha256_bytes
from skillevo.files.errors import BadInput

INCUMBENT, CANDIDATE = "workflow", "candidate_workflow"
OVERLAY = "a" * 64
MODEL = {"backend": "simulator", "name": "skillevo-sim-1", "base_url": None, "simulated": True}
LIMITS = Limits(processes=256, memory_mb=4096, cpu_s=3600, disk_mb=1024, tmp_mb=512, file_mb=256).enforced()
RECORDED_AT = "2025-03-01T12:00:00+00:00"  # when the gate decided (tests: NOW)
DESTINATIONS = {"skills/work/SKILL.md": "b" * 64, ".claude/skills/work/SKILL.md": "b" * 64}


def binding(task: str, cls: str = "trivial") -> dict[str, Any]:
    return {
        "id": task,
        "class": cls,
        "expensive": False,
        "timeout_s": 600,
        "target": {"kind": "dir", "path": f"tasks/targets/{task}", "tree": "c" * 64},
        "prompt_sha256": "d" * 64,
        "setup_sha256": None,
        "verify_sha256": "e" * 64,
        "oracle_command_sha256": "f" * 64,
        "oracle_files": [{"target": "tests/test_oracle.py", "sha256": "0" * 64, "size": 120}],
        "oracle_tests": ["tests.test_oracle::test_hidden"],
    }


def row(
    task: str,
    arm: str,
    run: int,
    *,
    resolved: bool | None = None,
    error_kind: str | None = None,
    cost_usd: float | None = 1.0,
    cls: str = "trivial",
    **fields: Any,
) -> dict[str, Any]:
    """A complete results row; `resolved` defaults to 'no error_kind', as the bench records it."""
    candidate = arm.startswith("candidate_")
    fields.setdefault("started_at", fields.get("recorded_at", RECORDED_AT))  # zero-length cells unless told
    if resolved is None:
        resolved = error_kind is None
    verify_passed = resolved or error_kind not in ("verify-failed", "session-error", "infra-error")
    return {
        "task": task,
        "class": cls,
        "arm": arm,
        "incumbent_arm": arm.removeprefix("candidate_"),
        "run": run,
        "side": "candidate" if candidate else "incumbent",
        "resolved": resolved,
        "ok": error_kind not in ("session-error", "infra-error"),
        "error_kind": error_kind,
        "error_detail": None if error_kind is None else f"{error_kind} in run {run}",
        "cost_usd": cost_usd,
        "input_tokens": 1000,
        "output_tokens": 200,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 500,
        "num_turns": 4,
        "duration_s": 12.5,
        "wall_s": 15.0,
        "diff_files": 1,
        "diff_insertions": 3,
        "diff_deletions": 1,
        "verify_passed": verify_passed,
        "oracle_passed": resolved,
        "verify_tail": "",
        "skill_invoked": error_kind != "skill-not-invoked",
        "skills_loaded": [[] if error_kind == "skill-not-invoked" else ["work"]],
        "session_ids": [f"{task}-{arm}-{run}"],
        "tool_uses": {"Skill": 1},
        "transcripts": [],
        "patch": None,
        "phases": {
            "workspace_s": 0.1, "setup_s": 0.0, "sessions_s": [10.0], "verify_s": 1.0, "churn_s": 0.1,
        },
        "model": MODEL["name"],
        "served_models": [MODEL["name"]],
        "backend": MODEL["backend"],
        "simulated": MODEL["simulated"],
        "effort": "medium",
        "base_commit": "4" * 40,
        "task_binding_digest": "1" * 64,
        "skills_digest": "2" * 64,
        "overlay_digest": OVERLAY if candidate else None,
        "recorded_at": RECORDED_AT,
        "slot": None,  # the candidate side's: stamp() sets it and control_for as the bench would
        "control_for": None,
        **fields,
    }


def runs(task: str, arm: str, costs: list[float | None], *, kinds: list[str | None] | None = None, **fields: Any):
    """One row per cost, run numbers from 1; `kinds` gives each run's error_kind (default: all resolved)."""
    kinds = kinds or [None] * len(costs)
    return [row(task, arm, i, cost_usd=c, error_kind=k, **fields)
            for i, (c, k) in enumerate(zip(costs, kinds, strict=True), 1)]


def bench(side: str, tasks: dict[str, str], *, arms: tuple[str, ...] = (INCUMBENT,), **fields: Any) -> dict[str, Any]:
    """bench.json of a side; a candidate side declares each candidate arm and its control (the incumbent arm)."""
    pairs = [(arm, arm) for arm in arms] if side == "incumbent" else [
        *((arm, arm) for arm in arms), *((f"candidate_{arm}", arm) for arm in arms)]
    names = [n for n, _ in pairs]
    return {
        "schema_version": 1,
        "side": side,
        "model": dict(MODEL),
        "effort": "medium",
        "runs": 3,
        "arms": [{"name": n, "incumbent_arm": a, "skills": ["work"]} for n, a in pairs],
        "controls": None if side == "incumbent" else "interleaved",
        "task_bindings": [binding(t, c) for t, c in sorted(tasks.items())],
        "task_split": {"evidence": [], "gate": sorted(tasks)},
        "skipped_tasks": [],
        "overlay_digest": None if side == "incumbent" else OVERLAY,
        "skills_digest": "2" * 64,
        "served_models": [MODEL["name"]],
        "limits": LIMITS,
        "cells": 3 * len(tasks) * len(names),
        "rows": 3 * len(tasks) * len(names),
        "simulator": {"noise": "none", "seed": 0},
        "replicate": 0,
        "results_sha256": "0" * 64,  # sides() and write_side() put the digest of the rows they write
        "mac": None,
        "design": None,  # candidate side: designed() puts the incumbent side's
        **fields,
    }


def designed(bench_json: dict[str, Any], incumbent_rows: list[dict[str, Any]], metric: str = "cost_usd"
             ) -> dict[str, Any]:
    """A candidate side's bench.json with the design the gate draws from these incumbent rows (default params)."""
    plan = section(SamplingParams, "sampling", {}, "test defaults")
    arms = sorted({a["incumbent_arm"] for a in bench_json["arms"]})
    try:
        found = sampling.designs(incumbent_rows, bench_json["task_split"]["gate"], arms, plan, metric)
    except BadInput:  # an incumbent side that cannot size one: the bench ran without (the gate refuses it)
        return {**bench_json, "design": None}
    return {**bench_json, "design": json.loads(json.dumps({a: d.to_dict() for a, d in found.items()}))}


def stamp(bench_json: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A candidate side's rows with the slot the side's seeded order gives each and, for a control, the candidate
    it ran beside (skillevo.core.controls), as the bench records them; other sides' rows as they are."""
    if bench_json["side"] != "candidate":
        return rows
    tasks = [b["id"] for b in bench_json["task_bindings"]]
    arms = [a["name"] for a in bench_json["arms"]]
    runs_ = max((r["run"] for r in rows), default=0)
    slots = {cell: i for i, cell in enumerate(order(bench_json["overlay_digest"], bench_json["replicate"], tasks, arms,
                                                    runs_))}
    return [{**r, "slot": slots.get((r["task"], r["arm"], r["run"])),
             "control_for": bench_json["overlay_digest"] if r["arm"] == r["incumbent_arm"] else None} for r in rows]


def freeze(required: tuple[str, ...] = (CANDIDATE,), **fields: Any) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "overlay_digest": OVERLAY,
        "files": [{"path": "work/SKILL.md", "sha256": "3" * 64, "size": 100, "executable": False}],
        "required_candidate_arms": list(required),
        "destinations": dict(DESTINATIONS),
        "candidate_origin": "proposer",
        "proposer_model": "skillevo-sim-proposer-1",
        "evolvable_skills": ["work"],
        "changed_lines": 1,
        "frontmatter_changes": [],
        "script_changes": [],
        **fields,
    }


def controls(incumbent_rows: list[dict[str, Any]], candidate_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The candidate side's rows as the bench writes them: each candidate row beside its control, measured in the
    same (task, run) block; the controls are `incumbent_rows` (the incumbent arm's runs) moved to the candidate
    side, as far as the candidate's blocks go."""
    blocks = {(r["task"], r["run"]) for r in candidate_rows}
    moved = [{**r, "side": "candidate", "session_ids": [f"control-{s}" for s in r["session_ids"]]}
             for r in incumbent_rows if (r["task"], r["run"]) in blocks]
    return list(candidate_rows) + moved


def sides(rows: list[dict[str, Any]], tasks: dict[str, str] | None = None) -> tuple[Side, Side]:
    """Split rows into the two sides, as the bench would have written them (digests of what it would write): the
    incumbent arm's rows are both the incumbent side's stored runs and, on the candidate side, its controls."""
    tasks = tasks or {r["task"]: r["class"] for r in rows}
    incumbent = [r for r in rows if not r["arm"].startswith("candidate_")]
    candidate = controls(incumbent, [r for r in rows if r["arm"].startswith("candidate_")])

    def side(name: str, bench_json: dict[str, Any], side_rows: list[dict[str, Any]]) -> Side:
        side_rows = stamp(bench_json, side_rows)
        bench_json["results_sha256"] = sha256_bytes(b"".join(canonical_json(r) + b"\n" for r in side_rows))
        digests = {"results_sha256": bench_json["results_sha256"],
                   "bench_sha256": sha256_bytes(canonical_json(bench_json))}
        return Side(Path(f"bench-{name}"), bench_json, tuple(side_rows), digests)

    return (side("incumbent", bench("incumbent", tasks), incumbent),
            side("candidate", designed(bench("candidate", tasks), incumbent), candidate))


def transcript(row: dict[str, Any]) -> bytes:
    """A transcript whose result event says what the row says: what the bench would have stored."""
    result = {"type": "result", "subtype": "success", "is_error": False, "session_id": row["session_ids"][0],
              "num_turns": row["num_turns"], "duration_ms": round(row["duration_s"] * 1000),
              "usage": {f: row[f] for f in ("input_tokens", "output_tokens", "cache_creation_input_tokens",
                                            "cache_read_input_tokens")}}
    if row["cost_usd"] is not None:
        result["total_cost_usd"] = row["cost_usd"]
    return canonical_json({"type": "system", "subtype": "init"}) + b"\n" + canonical_json(result) + b"\n"


def write_side(directory: Path, bench_json: dict[str, Any], rows: list[dict[str, Any]]) -> Path:
    """The side as the bench writes it: bench.json, results.jsonl, and each row's transcript, bound by sha256."""
    directory.mkdir(parents=True, exist_ok=True)
    bound = []
    for r in stamp(bench_json, rows):
        if r.get("session_ids") and not r.get("transcripts") and "cost_usd" in r:
            data = transcript(r)
            name = f"transcripts/{r['task']}-{r['arm']}-run{r['run']}.jsonl"
            (directory / "transcripts").mkdir(exist_ok=True)
            (directory / name).write_bytes(data)
            r = {**r, "transcripts": [{"path": name, "sha256": sha256_bytes(data), "bytes": len(data)}]}
        bound.append(r)
    results = "".join(json.dumps(r) + "\n" for r in bound).encode()
    (directory / "results.jsonl").write_bytes(results)
    bench_json = {**bench_json, "results_sha256": sha256_bytes(results)}
    (directory / "bench.json").write_text(json.dumps(bench_json, indent=2), encoding="utf-8")
    return directory


def agg(
    task: str,
    arm: str,
    *,
    valid: int = 3,
    resolved: int | None = None,
    excluded: int = 0,
    cost: float | None = 1.0,
    kinds: dict[str, int] | None = None,
    cls: str = "trivial",
) -> dict[str, Any]:
    """An aggregate as skillevo.gate.aggregate makes it; unresolved valid runs default to verify-failed."""
    resolved = valid if resolved is None else resolved
    kinds = dict(kinds or {})
    if excluded and not any(k in EXCLUDED_ERROR_KINDS for k in kinds):
        kinds["session-error"] = excluded
    if valid - resolved and not set(kinds) - EXCLUDED_ERROR_KINDS:
        kinds["verify-failed"] = valid - resolved
    median = None if valid == 0 else 1.0
    skipped = kinds.get("skill-not-invoked", 0)
    samples = [{"run": i, "resolved": i <= resolved, "skill_invoked": i > skipped, "cost_usd": cost,
                "duration_s": 1.0, "num_turns": 1.0, "output_tokens": 1.0} for i in range(1, valid + 1)]
    return {
        "task": task,
        "class": cls,
        "arm": arm,
        "runs": valid + excluded,
        "valid_runs": valid,
        "excluded_runs": excluded,
        "resolved": resolved,
        "error_kinds": dict(sorted(kinds.items())),
        "cost_usd": None if valid == 0 else cost,
        "input_tokens": median,
        "output_tokens": median,
        "cache_creation_input_tokens": median,
        "cache_read_input_tokens": median,
        "num_turns": median,
        "duration_s": median,
        "wall_s": median,
        "diff_files": median,
        "diff_insertions": median,
        "diff_deletions": median,
        "samples": samples,
    }


def paired(task: str, incumbent: dict[str, Any], candidate: dict[str, Any], cls: str = "trivial"):
    """Aggregates entries for one task: keyword dicts for `agg` on each side."""
    return {
        (task, INCUMBENT): agg(task, INCUMBENT, cls=cls, **incumbent),
        (task, CANDIDATE): agg(task, CANDIDATE, cls=cls, **candidate),
    }
