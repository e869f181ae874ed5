"""Reading a bench side back: its rows and provenance, checked, and what they add up to per (task, arm).

The gate, the evidence stage and the bench report all read sides through this module, and the error-kind
classes come from schemas/result-row.schema.json, so what counts as a harness fault is decided in one
place. Nothing here is a gate rule: the bench depends on this module, and editing the gate never
invalidates a paid bench.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import datetime
from pathlib import Path
from typing import Any

from skillevo.core import models
from skillevo.core.events import STOPPED, USAGE_FIELDS
from skillevo.core.layout import candidate_arm
from skillevo.files import documents, safefs
from skillevo.files.digests import sha256_bytes
from skillevo.files.errors import BadInput
from skillevo.files.schemas import load_schema, validate

_ROW_DEFS = load_schema("result-row")["$defs"]


def _kinds(definition: Mapping[str, Any]) -> frozenset[str]:
    """The error kinds a `$defs` entry of the row schema allows: its enum, or the union of its anyOf's."""
    if "$ref" in definition:
        return _kinds(_ROW_DEFS[definition["$ref"].removeprefix("#/$defs/")])
    if "anyOf" in definition:
        return frozenset().union(*(_kinds(d) for d in definition["anyOf"]))
    return frozenset(definition["enum"])


# What the harness can show the run did not cause (an API failure, its own fault, a stopped bench): excluded from
# the statistics.
EXCLUDED_ERROR_KINDS = _kinds(_ROW_DEFS["excluded_error_kind"])
# the excluded kinds that say the API or the harness is down, not that one cell was unlucky or stopped
SYSTEMIC_ERROR_KINDS = _kinds(_ROW_DEFS["systemic_error_kind"])
# Anything the agent's actions can cause: valid but unresolved measurements, with the cost they ran up.
MEASURED_ERROR_KINDS = _kinds(_ROW_DEFS["measured_error_kind"])
CHURN_FIELDS = ("diff_files", "diff_insertions", "diff_deletions")
MEDIAN_FIELDS = ("cost_usd", *USAGE_FIELDS, "num_turns", "duration_s", "wall_s", *CHURN_FIELDS)
# What a gate may decide on (params' gate.metric); each valid run's value is kept in its aggregate's samples so
# that promotion.json carries what the decision's statistics need.
GATE_METRICS = tuple(load_schema("params")["$defs"]["gate"]["properties"]["metric"]["enum"])
SIDES = ("incumbent", "candidate")
RESULTS_FILE = "results.jsonl"
BENCH_FILE = "bench.json"
MAX_ARTIFACT_BYTES = 64 << 20
MISMATCH = "does not match its row (size or sha256 differs) (rule: transcripts match rows)"


class ArtifactMismatch(BadInput):
    """A stored transcript or patch is not the one its row describes; `reason` says how, without the path."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.reason = reason


@dataclass(frozen=True)
class Side:
    """One bench side as read from disk: its provenance (bench.json) and its validated rows."""

    directory: Path
    bench: dict[str, Any]
    rows: tuple[dict[str, Any], ...]
    digests: dict[str, str] = dataclass_field(default_factory=dict)  # results.jsonl and bench.json sha256, as read

    @property
    def oldest_recorded_at(self) -> str | None:
        return min((row["recorded_at"] for row in self.rows), default=None, key=_moment)


@dataclass(frozen=True)
class Sequential:
    """A candidate side that ran in looks (bench.json `sequential`, written by skillevo.core.sampling.record)."""

    looks: tuple[int, ...]  # candidate runs per (task, arm) at each planned look
    stopped_at_look: int  # 1-based
    reason: str  # promote | futility | max

    @property
    def runs(self) -> int:
        return self.looks[self.stopped_at_look - 1]

    @property
    def last(self) -> bool:
        return self.stopped_at_look == len(self.looks)

    def to_dict(self) -> dict[str, Any]:
        return {"looks": list(self.looks), "stopped_at_look": self.stopped_at_look, "reason": self.reason}


def sequential_record(side: Side) -> Sequential | None:
    """The look a side stopped at, checked against its own bench.json and rows; None for the fixed design.

    The gate's level depends on the look, so a record that claims a later look than its rows reached (a
    laxer level for fewer runs), or rows past the stopped look, is refused: the rows must reach exactly the
    stopped look's runs, and the planned looks must end at the side's `runs`.
    """
    where = f"{side.directory / BENCH_FILE}: $.sequential"
    found = side.bench.get("sequential")
    if found is None:
        return None
    if side.bench["side"] != "candidate":
        raise BadInput(f"{where}: only the candidate side runs in looks (rule: sequential sampling)")
    looks = tuple(found["looks"])
    if any(b <= a for a, b in zip(looks, looks[1:], strict=False)) or looks[-1] != side.bench["runs"]:
        raise BadInput(f"{where}.looks: {list(looks)} must increase and end at the side's runs "
                       f"{side.bench['runs']} (rule: planned looks)")
    record = Sequential(looks, found["stopped_at_look"], found["reason"])
    if record.stopped_at_look > len(looks) or (record.reason == "max" and not record.last):
        raise BadInput(f"{where}: stopped at look {record.stopped_at_look} of {len(looks)} for {record.reason!r}; "
                       "a side stops at a planned look, for 'max' at the last one only (rule: planned looks)")
    reached = max((row["run"] for row in side.rows if row.get("replaces") is None), default=None)  # re-runs:
    # numbered past the schedule, they stand in a block of the look that spoiled it (skillevo.core.controls)
    if reached is not None and reached != record.runs:
        raise BadInput(f"{where}: look {record.stopped_at_look} is {record.runs} runs per cell but the rows reach "
                       f"run {reached} (rule: the rows stop at the stopped look)")
    return record


def _moment(text: str) -> datetime:
    return datetime.fromisoformat(text)


def is_excluded(row: Mapping[str, Any]) -> bool:
    return row["error_kind"] in EXCLUDED_ERROR_KINDS


def cell_name(row: Mapping[str, Any]) -> str:
    return f"{row['task']}/{row['arm']}/run{row['run']}"


def read_artifact(meta: Mapping[str, Any], directory: Path) -> bytes:
    """An artifact's bytes, if and only if they match its row's size and sha256 (the size is checked before a
    byte is read, so a grown file is never read whole)."""
    where = f"{directory}/{meta['path']}"
    try:
        data = safefs.read_below(directory, meta["path"], max_bytes=min(meta["bytes"], MAX_ARTIFACT_BYTES),
                                 what="artifact")
    except safefs.TooLarge:
        raise ArtifactMismatch(where, MISMATCH) from None
    except BadInput as e:
        raise ArtifactMismatch(where, str(e).removeprefix(f"{where}: ")) from None
    if len(data) != meta["bytes"] or sha256_bytes(data) != meta["sha256"]:
        raise ArtifactMismatch(where, MISMATCH)
    return data


def check_row(row: Mapping[str, Any], where: str) -> None:
    """Rules a schema cannot state within one row."""
    if row["resolved"] and not (row["verify_passed"] and row["oracle_passed"] and row["error_kind"] is None):
        raise BadInput(f"{where}: resolved without verify and oracle passing, or with an error_kind (rule: resolved)")
    if not row["resolved"] and row["error_kind"] is None:
        raise BadInput(f"{where}: unresolved but no error_kind (rule: unresolved run names its failure)")
    if row["incumbent_arm"] != row["arm"] and row["arm"] != candidate_arm(row["incumbent_arm"]):
        raise BadInput(f"{where}: arm {row['arm']!r} is neither its incumbent_arm nor "
                       f"{candidate_arm(row['incumbent_arm'])!r} (rule: arm pairing)")


def read_rows(directory: Path, side: str | None = None) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    """(`(file:line, row)` for every row of `<directory>/results.jsonl`, the file's sha256).

    Each row must match result-row.schema.json and the rules above, name `side` when one is given, and be the
    only row of its cell.
    """
    path = directory / RESULTS_FILE
    if directory.is_symlink():
        raise BadInput(f"{directory}: a bench side directory must not be a symlink (rule: no symlinks)")
    data = safefs.read_file(path, max_bytes=documents.MAX_JSON_BYTES, what="results")
    rows, seen = [], set()
    for number, line in enumerate(documents.jsonl_lines(safefs.decode(data, str(path), "results")), start=1):
        where = f"{path}:{number}"
        row = documents.parse_json(line, where)
        validate(row, "result-row", where)
        check_row(row, where)
        if side is not None and row["side"] != side:
            raise BadInput(f"{where}: $.side: is {row['side']!r}, but the row is in the {side} side (rule: side)")
        cell = (row["task"], row["arm"], row["run"])
        if cell in seen:
            raise BadInput(f"{where}: task {cell[0]!r}, arm {cell[1]!r}, run {cell[2]} appears twice "
                           "(rule: one row per cell)")
        seen.add(cell)
        rows.append((where, row))
    return rows, sha256_bytes(data)




def _result_events(data: bytes, where: str) -> dict[str, Any]:
    """The one account of a stored transcript's session: the CLI's `result` event, or the harness's
    `skillevo_stopped` event for a session stopped before the CLI could report (the tokens the relay counted)."""
    found = []
    for number, line in enumerate(documents.jsonl_lines(data), start=1):
        if line.strip():
            event = documents.parse_json(line, f"{where}:{number}")
            if isinstance(event, dict) and event.get("type") in ("result", STOPPED):
                found.append(event)
    if len(found) != 1 or not isinstance(found[0].get("usage"), dict):
        raise BadInput(f"{where}: a transcript holds exactly one result (or skillevo_stopped) event with usage "
                       f"(found {len(found)}) (rule: transcript)")
    return found[0]


def transcript_totals(row: Mapping[str, Any], directory: Path,
                      read: Callable[[Mapping[str, Any]], bytes] | None = None) -> dict[str, Any]:
    """A row's cost, tokens, turns and duration as its sha256-bound transcripts say them, summed as the bench
    sums them; cost is unmeasured (None) when a session that ran left no transcript or reported no cost.
    `read(meta)` gives a transcript's checked bytes from elsewhere than `directory` (the cell store)."""
    totals: dict[str, Any] = {field: 0 for field in (*USAGE_FIELDS, "num_turns")}
    duration, costs = 0.0, []
    for meta in row["transcripts"]:
        data = read(meta) if read is not None else read_artifact(meta, directory)
        result = _result_events(data, f"{directory}/{meta['path']}")
        if result.get("session_id") not in row["session_ids"]:
            raise BadInput(f"{directory}/{meta['path']}: its session is not one of its row's session_ids "
                           "(rule: transcript)")
        for field in USAGE_FIELDS:
            totals[field] += result["usage"].get(field, 0)
        totals["num_turns"] += result.get("num_turns", 0)
        duration = round(duration + round(result.get("duration_ms", 0) / 1000, 3), 3)
        prices = row.get("prices")
        costs.append(models.session_cost(result, tuple(prices) if prices is not None else None))
    ran = len(row["phases"]["sessions_s"])
    totals["duration_s"] = duration
    measured = [c for c in costs if c is not None]
    totals["cost_usd"] = None if len(measured) < ran or len(measured) < len(costs) or not costs \
        else round(sum(measured), 6)
    return totals


def check_row_transcripts(row: Mapping[str, Any], directory: Path, where: str,
                          read: Callable[[Mapping[str, Any]], bytes] | None = None) -> None:
    """One row's cost, tokens, turns and duration must be what its transcripts say (BadInput naming the row and
    the field)."""
    for field, value in transcript_totals(row, directory, read).items():
        if row[field] != value:
            raise BadInput(f"{where}: {field} is {row[field]!r} but its transcripts say {value!r} "
                           "(rule: rows match their transcripts)")


def check_transcripts(side: Side) -> None:
    """Every row of a side must match its transcripts: a row edited after the bench, say every candidate cost
    set to 0.01, is refused."""
    for row in side.rows:
        check_row_transcripts(row, side.directory, f"{side.directory / RESULTS_FILE}: row {cell_name(row)}")


def load_side(directory: Path, side: str) -> Side:
    """Read and check `<directory>/bench.json` and its rows for the named side: each row against bench.json, and
    each row's numbers against its sha256-bound transcripts (check_transcripts)."""
    bench_path = directory / BENCH_FILE
    bench_bytes = safefs.read_file(bench_path, max_bytes=documents.MAX_JSON_BYTES, what="bench provenance")
    bench = validate(documents.parse_json(safefs.decode(bench_bytes, str(bench_path), "bench provenance"),
                                          str(bench_path)), "bench-run", bench_path)
    if bench["side"] != side:
        raise BadInput(f"{bench_path}: $.side: is {bench['side']!r}, expected {side!r} (rule: side)")
    if (bench["overlay_digest"] is None) != (side == "incumbent"):
        raise BadInput(f"{bench_path}: $.overlay_digest: the candidate side carries the overlay digest and only it "
                       "(rule: overlay_digest)")
    arms: dict[str, str] = {}
    for i, arm in enumerate(bench["arms"]):
        allowed = {arm["incumbent_arm"]} if side == "incumbent" else {candidate_arm(arm["incumbent_arm"]),
                                                                       arm["incumbent_arm"]}
        if arm["name"] not in allowed or arm["name"] in arms:
            raise BadInput(f"{bench_path}: $.arms[{i}]: a {side} arm pairing {arm['incumbent_arm']!r} must be named "
                           f"{' or '.join(repr(a) for a in sorted(allowed))} and declared once (rule: arm naming)")
        arms[arm["name"]] = arm["incumbent_arm"]
    controls = {name for name, incumbent in arms.items() if side == "candidate" and name == incumbent}
    paired = {incumbent for name, incumbent in arms.items() if name not in controls}
    if side == "candidate" and (controls != paired or bench.get("controls") != "interleaved"):
        raise BadInput(f"{bench_path}: $.arms: a candidate side runs each candidate arm beside its control and no "
                       f"other arm (controls {sorted(controls)} for candidate arms of {sorted(paired)}; $.controls "
                       f"{bench.get('controls')!r}) (rule: contemporaneous controls)")
    classes: dict[str, str] = {}
    for i, binding in enumerate(bench["task_bindings"]):
        if binding["id"] in classes:
            raise BadInput(f"{bench_path}: $.task_bindings[{i}]: task {binding['id']!r} is bound twice "
                           "(rule: unique tasks)")
        classes[binding["id"]] = binding["class"]
    rows, results_sha256 = read_rows(directory, side)
    for where, row in rows:
        problem = (
            f"arm {row['arm']!r} is not declared in {bench_path} (rule: declared arm)" if row["arm"] not in arms else
            f"task {row['task']!r} is not bound in {bench_path} (rule: bound task)" if row["task"] not in classes else
            f"class {row['class']!r} differs from the binding's {classes[row['task']]!r} (rule: task class)"
            if row["class"] != classes[row["task"]] else
            f"overlay_digest differs from {bench_path} (rule: a row carries the overlay its arm installed: the side's "
            "for a candidate arm, none for a control)"
            if row["overlay_digest"] != (None if row["arm"] in controls else bench["overlay_digest"]) else
            f"skills_digest differs from {bench_path} (rule: a row carries its side's skills digest)"
            if row["skills_digest"] != bench["skills_digest"] else
            f"prices {row.get('prices')!r} differ from {bench_path}'s model (rule: a row is priced as its bench)"
            if row.get("prices") != bench["model"].get("prices") else None)
        if problem:
            raise BadInput(f"{where}: {problem}")
    loaded = Side(directory, bench, tuple(row for _, row in rows),
                  {"results_sha256": results_sha256, "bench_sha256": sha256_bytes(bench_bytes)})
    check_transcripts(loaded)
    sequential_record(loaded)
    check_blocks(loaded)
    return loaded


def check_blocks(side: Side) -> None:
    """On a candidate side every block (task, run) holds a row of every candidate arm and of its control, or of
    neither: a control measured alone, or a candidate run whose control is gone (a row removed after the bench,
    say the control's cheapest), would make the comparison one-sided (rule: contemporaneous controls)."""
    if side.bench["side"] != "candidate":
        return
    arms = sorted(arm["name"] for arm in side.bench["arms"])
    blocks: dict[tuple[str, int], set[str]] = defaultdict(set)
    for row in side.rows:
        blocks[(row["task"], row["run"])].add(row["arm"])
    for (task, run), present in sorted(blocks.items()):
        if sorted(present) != arms:
            raise BadInput(f"{side.directory / RESULTS_FILE}: task {task!r} run {run} has rows for "
                           f"{sorted(present)}, not every arm of its block {arms} (rule: contemporaneous controls)")


def aggregate(
    rows: Iterable[Mapping[str, Any]], task_classes: Mapping[str, str], arms: Iterable[str]
) -> dict[tuple[str, str], dict[str, Any]]:
    """One aggregate per (task, arm) pair, also for pairs without rows: a missing arm reads as zero runs."""
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    arms = sorted(set(arms))
    for row in rows:
        if row["task"] not in task_classes or row["arm"] not in arms:
            raise BadInput(f"row for task {row['task']!r}, arm {row['arm']!r} is outside the bound tasks and arms")
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
        cell[field] = median([row[field] for row in valid])
    cell["samples"] = [
        {"run": row["run"], "resolved": row["resolved"], "skill_invoked": row["skill_invoked"],
         **{field: None if row[field] is None else float(row[field]) for field in GATE_METRICS}}
        for row in sorted(valid, key=lambda r: r["run"])
    ]
    return cell


def median(values: Sequence[float | None]) -> float | None:
    """None without valid runs, and None when any is unmeasured: an unmeasured cost is never 0.

    Always a float, so the same runs in any order give the same bytes in promotion.json.
    """
    measured = [v for v in values if v is not None]
    if not values or len(measured) < len(values):
        return None
    return float(statistics.median(measured))


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


def served_models(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every model id the API said it served across these rows (a side should have exactly one)."""
    return sorted({m for row in rows for m in row["served_models"]})
