"""From a bench side's results.jsonl to one aggregate per (task, arm): counts over all runs, medians over valid ones.

Rows are untrusted input: each is checked against the fields the gate reads and against its side's bench.json
before it can count, and a bad row stops the gate with the file, the line and the rule.
"""

from __future__ import annotations

import functools
import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

from skillevo.gate._schema import GateInputError, first_error, view_validator
from skillevo.gate.policy import CANDIDATE_PREFIX

# Infrastructure failures: the run measured nothing about the skill, so it is excluded from the statistics.
EXCLUDED_ERROR_KINDS = frozenset({"session-error", "infra-error", "evidence-unverified", "cleanup-failure"})
# Valid but unresolved measurements.
MEASURED_ERROR_KINDS = frozenset({"skill-not-invoked", "verify-failed", "oracle-failed"})
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
CHURN_FIELDS = ("diff_files", "diff_insertions", "diff_deletions")
MEDIAN_FIELDS = ("cost_usd", *TOKEN_FIELDS, "num_turns", "duration_s", "wall_s", *CHURN_FIELDS)
SIDES = ("incumbent", "candidate")

_COUNT = {"$ref": "#/$defs/count"}
_SECONDS = {"type": "number", "minimum": 0}
_ROW_VIEW = {
    "type": "object",
    "required": [
        "task", "class", "arm", "incumbent_arm", "run", "resolved", "error_kind", "cost_usd", *TOKEN_FIELDS,
        "num_turns", "duration_s", "wall_s", *CHURN_FIELDS, "verify_passed", "oracle_passed", "session_ids",
        "overlay_digest",
    ],
    "properties": {
        "task": {"$ref": "#/$defs/task_id"},
        "class": {"type": "string"},
        "arm": {"$ref": "#/$defs/arm"},
        "incumbent_arm": {"$ref": "#/$defs/arm"},
        "run": {"type": "integer", "minimum": 1},
        "resolved": {"type": "boolean"},
        "error_kind": {"enum": [None, *sorted(EXCLUDED_ERROR_KINDS | MEASURED_ERROR_KINDS)]},
        "cost_usd": {"type": ["number", "null"], "minimum": 0},
        **{field: _COUNT for field in (*TOKEN_FIELDS, "num_turns", *CHURN_FIELDS)},
        "duration_s": _SECONDS,
        "wall_s": _SECONDS,
        "verify_passed": {"type": "boolean"},
        "oracle_passed": {"type": "boolean"},
        "session_ids": {"type": "array", "items": {"type": "string"}},
        "overlay_digest": {"oneOf": [{"$ref": "#/$defs/sha256"}, {"type": "null"}]},
    },
}
_BENCH_VIEW = {
    "type": "object",
    "required": ["schema_version", "side", "model", "effort", "arms", "task_bindings", "overlay_digest"],
    "properties": {
        "schema_version": {"const": 1},
        "side": {"enum": list(SIDES)},
        "model": {"$ref": "#/$defs/backend"},
        "effort": {"type": ["string", "null"]},
        "arms": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "incumbent_arm"],
                "properties": {"name": {"$ref": "#/$defs/arm"}, "incumbent_arm": {"$ref": "#/$defs/arm"}},
            },
        },
        "task_bindings": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/task_binding"}},
        "overlay_digest": {"oneOf": [{"$ref": "#/$defs/sha256"}, {"type": "null"}]},
    },
}


@dataclass(frozen=True)
class Side:
    """One bench side as read from disk: its provenance (bench.json) and its validated rows."""

    directory: Path
    bench: dict[str, Any]
    rows: tuple[dict[str, Any], ...]


def is_excluded(row: Mapping[str, Any]) -> bool:
    return row["error_kind"] in EXCLUDED_ERROR_KINDS


def aggregate(
    rows: Iterable[Mapping[str, Any]], task_classes: Mapping[str, str], arms: Iterable[str]
) -> dict[tuple[str, str], dict[str, Any]]:
    """One aggregate per (task, arm) pair, also for pairs without rows: a missing arm reads as zero runs."""
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    arms = sorted(set(arms))
    for row in rows:
        if row["task"] not in task_classes or row["arm"] not in arms:
            raise ValueError(f"row for task {row['task']!r}, arm {row['arm']!r} is outside the bound tasks and arms")
        grouped[(row["task"], row["arm"])].append(row)
    return {
        (task, arm): _aggregate_cell(task, cls, arm, grouped[(task, arm)])
        for task, cls in sorted(task_classes.items())
        for arm in arms
    }


def _aggregate_cell(task: str, cls: str, arm: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    valid = [row for row in rows if not is_excluded(row)]
    kinds = Counter(row["error_kind"] for row in rows if row["error_kind"] is not None)
    cell: dict[str, Any] = {
        "task": task,
        "class": cls,
        "arm": arm,
        "runs": len(rows),
        "valid_runs": len(valid),
        "excluded_runs": len(rows) - len(valid),
        "resolved": sum(1 for row in valid if row["resolved"]),
        "error_kinds": dict(sorted(kinds.items())),
    }
    for field in MEDIAN_FIELDS:
        cell[field] = _median([row[field] for row in valid])
    return cell


def _median(values: Sequence[float | None]) -> float | None:
    """None without valid runs, and None when any is unmeasured: an unmeasured cost is never 0.

    Always a float, so the same runs in any order give the same bytes in promotion.json.
    """
    if not values or any(v is None for v in values):
        return None
    return float(statistics.median(values))


def valid_samples(rows: Iterable[Mapping[str, Any]], metric: str) -> dict[tuple[str, str], list[float | None]]:
    """The metric of every valid run per (task, arm), sorted so that row order cannot reach the bootstrap."""
    samples: dict[tuple[str, str], list[float | None]] = defaultdict(list)
    for row in rows:
        if not is_excluded(row):
            samples[(row["task"], row["arm"])].append(row[metric])
    return {key: sorted(values, key=lambda v: (v is None, v or 0)) for key, values in samples.items()}


def load_side(directory: Path, side: str) -> Side:
    """Read and check `<directory>/bench.json` and `<directory>/results.jsonl` for the named side."""
    bench_path = directory / "bench.json"
    bench = _read_json(bench_path)
    _check(bench, _bench_validator(), str(bench_path))
    if bench["side"] != side:
        raise GateInputError(f"{bench_path}: $.side: is {bench['side']!r}, expected {side!r} (rule: side)")
    arms = _declared_arms(bench, bench_path)
    classes = _bound_tasks(bench, bench_path)

    results_path = directory / "results.jsonl"
    try:
        # Not splitlines(): it also splits at U+2028 and friends, which JSON strings may hold unescaped.
        lines = results_path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise GateInputError(f"{results_path}: cannot read results: {e}") from e
    if lines[-1] == "":
        lines.pop()
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, str, int]] = set()
    for number, line in enumerate(lines, start=1):
        where = f"{results_path}:{number}"
        row = _parse_row(line, where)
        _check(row, _row_validator(), where)
        _check_row(row, bench, arms, classes, where, bench_path)
        cell = (row["task"], row["arm"], row["run"])
        if cell in seen:
            raise GateInputError(
                f"{where}: task {cell[0]!r}, arm {cell[1]!r}, run {cell[2]} appears twice (rule: one row per cell)"
            )
        seen.add(cell)
        rows.append(row)
    return Side(directory, bench, tuple(rows))


def side_totals(rows: Iterable[Mapping[str, Any]]) -> dict[str, float | int]:
    """What a side cost to produce, excluded runs included: they were paid for too."""
    rows = list(rows)
    measured = [row["cost_usd"] for row in rows if row["cost_usd"] is not None]
    return {
        "runs": len(rows),
        "sessions": sum(len(row["session_ids"]) for row in rows),
        "total_cost_usd": round(sum(sorted(measured)), 6),
        "unmeasured_cost_runs": len(rows) - len(measured),
    }


@functools.cache
def _row_validator() -> jsonschema.Draft202012Validator:
    return view_validator(_ROW_VIEW)


@functools.cache
def _bench_validator() -> jsonschema.Draft202012Validator:
    return view_validator(_BENCH_VIEW)


def _check(document: Any, validator: jsonschema.Draft202012Validator, where: str) -> None:
    error = first_error(document, validator)
    if error:
        raise GateInputError(f"{where}: {error}")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise GateInputError(f"{path}: cannot read JSON: {e}") from e


def _parse_row(line: str, where: str) -> Any:
    try:
        return json.loads(line, parse_constant=_reject_constant)
    except ValueError as e:
        raise GateInputError(f"{where}: not a JSON value: {e} (rule: one JSON object per line)") from e


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")


def _declared_arms(bench: Mapping[str, Any], bench_path: Path) -> dict[str, str]:
    """Arm name -> paired incumbent arm, checked against the naming rule of the side."""
    arms: dict[str, str] = {}
    for i, arm in enumerate(bench["arms"]):
        name, incumbent = arm["name"], arm["incumbent_arm"]
        expected = incumbent if bench["side"] == "incumbent" else CANDIDATE_PREFIX + incumbent
        if name != expected:
            raise GateInputError(
                f"{bench_path}: $.arms[{i}]: a {bench['side']} arm pairing {incumbent!r} must be named {expected!r}, "
                f"not {name!r} (rule: arm naming)"
            )
        if name in arms:
            raise GateInputError(f"{bench_path}: $.arms[{i}]: arm {name!r} is declared twice (rule: unique arms)")
        arms[name] = incumbent
    if (bench["overlay_digest"] is None) != (bench["side"] == "incumbent"):
        raise GateInputError(
            f"{bench_path}: $.overlay_digest: the candidate side carries the overlay digest and only it "
            "(rule: overlay_digest)"
        )
    return arms


def _bound_tasks(bench: Mapping[str, Any], bench_path: Path) -> dict[str, str]:
    classes: dict[str, str] = {}
    for i, binding in enumerate(bench["task_bindings"]):
        if binding["id"] in classes:
            raise GateInputError(
                f"{bench_path}: $.task_bindings[{i}]: task {binding['id']!r} is bound twice (rule: unique tasks)"
            )
        classes[binding["id"]] = binding["class"]
    return classes


def _check_row(
    row: Mapping[str, Any],
    bench: Mapping[str, Any],
    arms: Mapping[str, str],
    classes: Mapping[str, str],
    where: str,
    bench_path: Path,
) -> None:
    """Cross-field and cross-file rules a schema cannot state."""
    problems = [
        (row["arm"] not in arms, f"arm {row['arm']!r} is not declared in {bench_path} (rule: declared arm)"),
        (
            row["arm"] in arms and row["incumbent_arm"] != arms[row["arm"]],
            f"incumbent_arm {row['incumbent_arm']!r} is not the pairing {bench_path} declares for {row['arm']!r} "
            "(rule: arm pairing)",
        ),
        (row["task"] not in classes, f"task {row['task']!r} is not bound in {bench_path} (rule: bound task)"),
        (
            row["task"] in classes and row["class"] != classes[row["task"]],
            f"class {row['class']!r} differs from the binding's {classes.get(row['task'])!r} (rule: task class)",
        ),
        (
            row["overlay_digest"] != bench["overlay_digest"],
            f"overlay_digest differs from {bench_path} (rule: a row carries its side's overlay digest)",
        ),
        (
            row["resolved"]
            and not (row["verify_passed"] and row["oracle_passed"] and row["error_kind"] not in MEASURED_ERROR_KINDS),
            "resolved without verify and oracle passing, or with a measurement failure (rule: resolved)",
        ),
        (
            not row["resolved"] and row["error_kind"] is None,
            "unresolved but no error_kind (rule: unresolved run names its failure)",
        ),
    ]
    for failed, message in problems:
        if failed:
            raise GateInputError(f"{where}: {message}")
