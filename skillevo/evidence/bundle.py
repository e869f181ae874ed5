"""Build the evidence bundle: select rows, check their artifacts, redact, guard, compact, and fit the budget.

Selection: rows whose error kind is a harness fault (skillevo.core.results.EXCLUDED_ERROR_KINDS) teach nothing about
a skill and are left out; then unresolved rows by (task, arm, run), then resolved rows by cost, highest first
(unmeasured cost last); the first max_rows whose artifacts verify are taken. A row whose transcript or
patch does not match the size and sha256 recorded in it is refused: the row is left out, the next one
takes its place, and the manifest says why (its provenance is broken, so none of it is evidence).

Rejected candidates (skillevo.core.memory): those measured against this generation's incumbent, newest first, at most
max_rejected, each diff cut to a quarter of max_file_bytes, so that the proposer sees every change tried before
and its verdict.

Every file is redacted, cut to max_file_bytes and checked by the hidden-oracle guard. Then the bundle is fit
into max_bundle_bytes by dropping the lowest-priority row, then the prior proposal, then the oldest rejected
candidate; if it still does not fit, the stage fails. Nothing here writes; the same inputs give the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from skillevo.core import prediction
from skillevo.core.config import EvidenceParams, evidence_limits
from skillevo.core.memory import REJECTED_FILE
from skillevo.core.oracle_guard import OracleGuard
from skillevo.core.redact import leaks, redact_obj, redact_text
from skillevo.core.results import ArtifactMismatch, is_excluded, read_artifact
from skillevo.evidence.compact import compact_jsonl, compact_text, redact_jsonl
from skillevo.evidence.inputs import (
    LEARNING_KEYS,
    EvidenceError,
    Inputs,
    SourceRow,
    priority_key,
)
from skillevo.files import documents
from skillevo.files.digests import sha256_bytes
from skillevo.files.errors import BadInput
from skillevo.files.schemas import validate

MANIFEST = "manifest.json"


def order_rows(rows: Iterable[SourceRow]) -> tuple[list[SourceRow], int]:
    """(eligible rows in priority order, number excluded as harness trouble)."""
    rows = list(rows)
    eligible = [r for r in rows if not is_excluded(r.row)]
    return sorted(eligible, key=lambda r: priority_key(r.row)), len(rows) - len(eligible)


@dataclass
class Bundle:
    files: dict[str, bytes]  # bundle path -> bytes, manifest excluded
    manifest: dict[str, Any]

    @property
    def manifest_bytes(self) -> bytes:
        return documents.dump_json(self.manifest)

    @property
    def total_bytes(self) -> int:
        return sum(len(b) for b in self.files.values())


@dataclass
class _Row:
    compact: dict[str, Any]
    files: dict[str, bytes]
    cell: str


class _Builder:
    def __init__(self, guard: OracleGuard, limits: EvidenceParams, secrets: tuple[str, ...]):
        self.guard, self.limits, self.secrets = guard, limits, secrets
        self.dropped: list[dict[str, str]] = []

    def drop(self, what: str, reason: str) -> None:
        self.dropped.append({"what": what, "reason": reason})

    def _artifact(self, src: SourceRow, meta: dict[str, Any], kind: str) -> bytes:
        """The artifact's bytes if they are exactly what the row records (size checked before reading)."""
        if meta["path"].partition("/")[0] != kind:
            raise BadInput(f"{meta['path']}: a {kind[:-1]} must be a file directly under {kind}/")
        try:
            return read_artifact(meta, src.directory)
        except ArtifactMismatch as e:
            raise BadInput(f"{src.origin}/{meta['path']}: {e.reason}") from None

    def row(self, src: SourceRow, index: int) -> _Row | None:
        """The row's compact form and files, or None (with the reason recorded) if it is refused."""
        row, lim = src.row, self.limits
        what = f"row {src.cell} ({src.where})"
        try:
            transcripts = [self._artifact(src, m, "transcripts") for m in row["transcripts"]]
            patch = self._artifact(src, row["patch"], "patches") if row["patch"] else None
            keep = transcripts[-lim.max_transcripts_per_row:] if lim.max_transcripts_per_row else []
            redacted = [redact_jsonl(data, self.secrets) for data in keep]
        except BadInput as e:
            self.drop(what, f"refused: {e}")
            return None

        files, notes = {}, []
        skipped = len(transcripts) - len(keep)
        if skipped:
            notes.append(f"{skipped} earlier transcript(s) of this row left out "
                         f"(evidence.max_transcripts_per_row {lim.max_transcripts_per_row})")
        names = []
        for j, data in enumerate(redacted, start=1):
            name = f"transcripts/row{index}-{j}.jsonl"
            data, omitted = compact_jsonl(data, lim.max_file_bytes)
            if self._admit(name, data, notes):
                names.append(name)
                files[name] = data
                if omitted:
                    notes.append(f"{name}: compacted, {omitted} bytes of earlier events omitted")
                    self.drop(f"{name} (earlier events)", f"compacted to evidence.max_file_bytes "
                                                          f"{lim.max_file_bytes}: {omitted} bytes omitted")
        patch_name = None
        if patch is not None:
            name = f"patches/row{index}.diff"
            text, omitted = compact_text(redact_text(patch.decode("utf-8", errors="replace"), self.secrets),
                                         lim.max_file_bytes)
            data = text.encode()
            if self._admit(name, data, notes):
                patch_name, files[name] = name, data
                if omitted:
                    notes.append(f"{name}: compacted, {omitted} bytes omitted from the middle")
                    self.drop(f"{name} (middle)", f"compacted to evidence.max_file_bytes "
                                                  f"{lim.max_file_bytes}: {omitted} bytes omitted")

        # Redact the whole tail before cutting it: a cut could leave half a key no pattern recognises.
        tail: str | None  # None: withheld
        tail = redact_text(row["verify_tail"], self.secrets)
        tail = tail[-lim.verify_tail_chars:] if lim.verify_tail_chars else ""
        reason = self.guard.check_text(tail)
        if reason:
            self.drop(f"row {index} verify_tail", f"withheld: {reason}")
            notes.append("verify_tail withheld: it carries hidden-oracle content")
            tail = None
        compact = redact_obj({
            "row": index,
            "side": row["side"],
            "task": row["task"],
            "class": row["class"],
            "arm": row["arm"],
            "run": row["run"],
            "resolved": row["resolved"],
            "error_kind": row["error_kind"],
            "cost_usd": row["cost_usd"],
            "num_turns": row["num_turns"],
            "output_tokens": row["output_tokens"],
            "churn": {"files": row["diff_files"], "insertions": row["diff_insertions"],
                      "deletions": row["diff_deletions"]},
            "session_ids": list(row["session_ids"]),
            "verify_tail": tail,
            "transcripts": names,
            "patch": patch_name,
            "notes": notes,
        }, self.secrets)
        reason = self.guard.check_value(compact)
        if reason:
            self.drop(what, f"refused: its row {reason}")
            return None
        return _Row(compact, files, src.cell)

    def _admit(self, name: str, data: bytes, notes: list[str]) -> bool:
        reason = self.guard.check_file(name, data)
        if reason is None and leaks(data, self.secrets):
            reason = "carries a credential that survived redaction"
            notes.append(f"{name} withheld: it carries a credential")
            self.drop(name, f"withheld: {reason}")
            return False
        if reason:
            self.drop(name, f"withheld: {reason}")
            notes.append(f"{name} withheld: it carries hidden-oracle content")
            return False
        return True


def build_bundle(
    inputs: Inputs,
    *,
    guard: OracleGuard,
    limits: EvidenceParams | None = None,
    skills: Iterable[str] = (),
    learnings: Iterable[dict[str, Any]] = (),
    learnings_digest: str | None = None,
    secrets: Iterable[str] = (),
) -> Bundle:
    """Select, compact, redact, guard and budget the evidence; nothing is written here.

    `learnings` are what load_learnings returned (each with its source `line`); `secrets` are literal
    credentials to redact besides the patterns (env_secrets()).
    """
    secrets = tuple(sorted(set(secrets)))
    limits = limits or evidence_limits()
    b = _Builder(guard, limits, secrets)
    b.dropped.extend(dict(d) for d in inputs.dropped)
    ordered, excluded = order_rows(inputs.rows)
    counts = {"considered": len(inputs.rows), "excluded_infra": excluded, "refused": 0, "over_cap": 0,
              "dropped_for_budget": 0, "selected": 0}
    rows: list[_Row] = []
    for src in ordered:
        if len(rows) >= limits.max_rows:
            counts["over_cap"] += 1
            continue
        built = b.row(src, len(rows) + 1)
        if built is None:
            counts["refused"] += 1
        else:
            rows.append(built)

    fixed: dict[str, bytes] = {}
    fixed["learnings.json"] = _learnings_file(b, learnings)
    fixed["gate-summary.json"] = _gate_file(b, inputs.promotion)
    rejected, rejected_counts = _rejected(b, inputs)
    proposal = None
    if inputs.proposal is not None:
        text, omitted = compact_text(redact_text(inputs.proposal, secrets), limits.max_file_bytes)
        data = text.encode()
        reason = guard.check_file("prior-proposal.md", data)
        if reason:
            b.drop("prior-proposal.md", f"withheld: {reason}")
        else:
            proposal = data
            if omitted:
                b.drop("prior-proposal.md (middle)", f"compacted to evidence.max_file_bytes {limits.max_file_bytes}: "
                                                     f"{omitted} bytes omitted")

    # Fit the total: the lowest-priority row first, then the prior proposal, then the oldest rejected candidate.
    while True:
        rows_json = documents.dump_json([r.compact for r in rows])
        files = dict(fixed)
        files["rows.json"] = rows_json
        files[REJECTED_FILE] = documents.dump_json([entry for _, entry in rejected])
        if proposal is not None:
            files["prior-proposal.md"] = proposal
        for r in rows:
            files.update(r.files)
        total = sum(len(v) for v in files.values())
        if len(rows_json) > limits.max_file_bytes and rows:
            reason = f"rows.json is {len(rows_json)} bytes, over evidence.max_file_bytes {limits.max_file_bytes}"
        elif total > limits.max_bundle_bytes:
            reason = f"bundle is {total} bytes, over evidence.max_bundle_bytes {limits.max_bundle_bytes}"
        else:
            break
        if rows:
            last = rows.pop()
            counts["dropped_for_budget"] += 1
            b.drop(f"row {last.compact['row']} ({last.cell})", f"lowest priority left; {reason}")
        elif proposal is not None:
            proposal = None
            b.drop("prior-proposal.md", f"no row left to drop; {reason}")
        elif rejected:
            label, _ = rejected.pop()
            b.drop(label, f"no row or proposal left to drop; {reason}")
        else:
            sizes = ", ".join(f"{p} {len(v)}" for p, v in sorted(files.items()))
            raise EvidenceError(f"evidence bundle cannot fit evidence.max_bundle_bytes {limits.max_bundle_bytes}: "
                                f"{total} bytes with every row, the prior proposal and every rejected candidate "
                                f"dropped ({sizes})")
    counts["selected"] = len(rows)
    rejected_counts["selected"] = len(rejected)
    rejected_counts["dropped"] = (rejected_counts["considered"] - rejected_counts["other_incumbent"]
                                  - rejected_counts["over_cap"] - len(rejected))

    for path, data in sorted(files.items()):
        # Defence in depth: whatever the steps above did, nothing leaves with a secret or oracle bytes.
        if leaks(data, secrets):
            raise EvidenceError(f"{path}: still carries a credential after redaction (refusing to write it)")
        if guard.check_file(path, data):
            raise EvidenceError(f"{path}: still carries hidden-oracle content (refusing to write it)")

    manifest = {
        "schema_version": 1,
        "source": inputs.source,
        "inputs": dict(sorted({**inputs.digests, **({"learnings": learnings_digest} if learnings_digest else {})}
                              .items())),
        "limits": asdict(limits),
        "evolvable_skills": sorted(set(skills)),
        "files": [{"path": p, "sha256": sha256_bytes(v), "bytes": len(v)} for p, v in sorted(files.items())],
        "rows": counts,
        "rejected": rejected_counts,
        "dropped": b.dropped,
    }
    validate(manifest, "evidence-manifest", MANIFEST)
    return Bundle(files, manifest)


def _guarded_entries(b: _Builder, name: str, entries: Iterable[tuple[str, Any]], *, drop_oldest: bool
                     ) -> list[tuple[str, Any]]:
    """The (label, entry) pairs of a JSON list file: entries the oracle guard refuses are withheld, then entries are
    dropped (the oldest first, or the last) until the file fits evidence.max_file_bytes."""
    kept = []
    for label, entry in entries:
        reason = b.guard.check_value(entry)
        if reason:
            b.drop(label, f"withheld: {reason}")
        else:
            kept.append((label, entry))
    while len(documents.dump_json([entry for _, entry in kept])) > b.limits.max_file_bytes and kept:
        label, _ = kept.pop(0 if drop_oldest else -1)
        b.drop(label, f"{name} over evidence.max_file_bytes {b.limits.max_file_bytes}")
    return kept


def _guarded_list(b: _Builder, name: str, entries: Iterable[tuple[str, Any]], *, drop_oldest: bool) -> bytes:
    return documents.dump_json([entry for _, entry in _guarded_entries(b, name, entries, drop_oldest=drop_oldest)])


def _rejected(b: _Builder, inputs: Inputs) -> tuple[list[tuple[str, Any]], dict[str, int]]:
    """Rejected candidates of this generation's incumbent, newest first: generation, diff, verdict per arm."""
    counts = {"considered": len(inputs.rejected), "other_incumbent": 0, "over_cap": 0, "dropped": 0, "selected": 0}
    shown: list[tuple[str, Any]] = []
    cut = max(b.limits.max_file_bytes // 4, 1)
    for candidate in inputs.rejected:
        label = f"rejected candidate of generation {candidate['generation']}"
        if inputs.incumbent_digest is not None and candidate["incumbent_digest"] != inputs.incumbent_digest:
            counts["other_incumbent"] += 1
            b.drop(label, "left out: measured against another incumbent than this generation's")
            continue
        if len(shown) >= b.limits.max_rejected:
            counts["over_cap"] += 1
            b.drop(label, f"over evidence.max_rejected {b.limits.max_rejected}")
            continue
        diff, omitted = compact_text(redact_text(candidate["diff"], b.secrets), cut)
        if omitted:
            b.drop(f"{label} (middle of its diff)", f"compacted to a quarter of evidence.max_file_bytes: "
                                                    f"{omitted} bytes omitted")
        shown.append((label, redact_obj({
            "generation": candidate["generation"],
            "diff": diff,
            "decisions": [{"candidate_arm": d["candidate_arm"], "decision": d["decision"], "reasons": d["reasons"][:3]}
                          for d in candidate["decisions"]],
        }, b.secrets)))
    return _guarded_entries(b, REJECTED_FILE, shown, drop_oldest=False), counts


def _learnings_file(b: _Builder, learnings: Iterable[dict[str, Any]]) -> bytes:
    entries = ((f"learning at line {item.get('line')}", redact_obj({k: item[k] for k in sorted(LEARNING_KEYS)},
                                                                   b.secrets)) for item in learnings)
    return _guarded_list(b, "learnings.json", entries, drop_oldest=True)


def gate_summary(promotion: Mapping[str, Any] | None) -> list[str]:
    """One line per prior decision: '<candidate arm>: <decision> — <first 3 reasons>', then how the proposer's
    prediction fared (skillevo.core.prediction), so the next proposer sees its own record."""
    if not promotion:
        return []
    lines = [f"{d['candidate_arm']}: {d['decision']} — {'; '.join(d['reasons'][:3])}" for d in promotion["decisions"]]
    if promotion.get("candidate_origin") == "proposer" and promotion["decisions"]:
        lines.append(f"prediction: {prediction.line(promotion.get('prediction'))}")
    return lines


def _gate_file(b: _Builder, promotion: Mapping[str, Any] | None) -> bytes:
    lines = (redact_text(line, b.secrets) for line in gate_summary(promotion))
    entries = ((f"gate summary of {line.split(':', 1)[0]}", line) for line in lines)
    return _guarded_list(b, "gate-summary.json", entries, drop_oldest=False)


