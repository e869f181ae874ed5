"""What the evidence stage reads: the previous generation (or a seed, or nothing), and the learnings queue.

Every input is untrusted: results go through the one bench-side reader (skillevo.core.results), JSON and text
through the bounded loaders, and anything unreadable fails naming its file and line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillevo.core import memory
from skillevo.core.results import BENCH_FILE, SIDES, cell_name, read_rows
from skillevo.files import documents, safefs
from skillevo.files.digests import sha256_bytes
from skillevo.files.errors import BadInput
from skillevo.files.schemas import validate

MAX_SOURCE_BYTES = 64 << 20  # refuse to even read an input larger than this
LEARNING_KEYS = frozenset({"skill", "date", "task", "friction", "suggestion"})
PREVIOUS_ENTRIES = ("bench-incumbent", "bench-candidate", "gate", "proposal.md", "rejected.json")


class EvidenceError(BadInput):
    """Bad input, or a bundle that cannot fit its budget; the message says which file or limit."""


@dataclass(frozen=True)
class SourceRow:
    row: dict[str, Any]
    origin: str  # bench-incumbent | bench-candidate | seed: where its artifacts live
    directory: Path
    where: str  # results.jsonl line, relative to the source

    @property
    def cell(self) -> str:
        return cell_name(self.row)


@dataclass
class Inputs:
    source: str  # previous | seed | cold-start
    rows: list[SourceRow] = field(default_factory=list)
    promotion: dict[str, Any] | None = None
    proposal: str | None = None
    rejected: list[dict[str, Any]] = field(default_factory=list)  # skillevo.core.memory entries, newest first
    incumbent_digest: str | None = None  # this generation's incumbent family (its bench.json), when known
    digests: dict[str, str] = field(default_factory=dict)
    dropped: list[dict[str, str]] = field(default_factory=list)  # inputs ignored, for the manifest


def _side_rows(directory: Path, label: str, side: str | None) -> tuple[list[SourceRow], str]:
    rows, digest = read_rows(directory, side)
    return [SourceRow(row, label, directory, f"{label}:{where.rsplit(':', 1)[1]}") for where, row in rows], digest


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def load_previous(directory: str | Path | None, incumbent: str | Path | None = None) -> Inputs:
    """The previous generation's outputs, and optionally this generation's incumbent side.

    `directory` may hold any of bench-incumbent/, bench-candidate/, gate/promotion.json, proposal.md,
    rejected.json (skillevo.core.memory); anything else in it (a README.md, dotfiles) is ignored, other entries are
    listed in the manifest as ignored. `incumbent` (dvc.yaml passes results/bench-incumbent) is a bench side
    directory that takes the place of <directory>/bench-incumbent; its bench.json names the incumbent, whose
    rejected candidates alone the proposer sees. No input at all is a cold start.
    """
    inputs, ignored = Inputs("previous"), []
    sides: dict[str, Path] = {}
    directory = Path(directory) if directory is not None else None
    if directory is not None and _exists(directory):
        if directory.is_symlink() or not directory.is_dir():
            raise EvidenceError(f"{directory}: --previous must be a directory (not a symlink) (rule: no symlinks)")
        for name in sorted(p.name for p in directory.iterdir()):
            if name not in PREVIOUS_ENTRIES and not name.startswith(".") and name != "README.md":
                ignored.append(name)
        for side in SIDES:
            if _exists(directory / f"bench-{side}"):
                sides[side] = directory / f"bench-{side}"
    if incumbent is not None:
        incumbent = Path(incumbent)
        if not incumbent.is_dir() or incumbent.is_symlink():
            raise EvidenceError(f"{incumbent}: --incumbent must be a bench side directory (not a symlink)")
        if "incumbent" in sides:
            inputs.dropped.append({"what": "previous bench-incumbent/",
                                   "reason": "ignored: --incumbent gives this generation's incumbent side"})
        sides["incumbent"] = incumbent
        inputs.incumbent_digest = _skills_digest(incumbent)
    for name in ignored:
        inputs.dropped.append({"what": f"previous {name}", "reason": "ignored: not an evidence input"})
    for side in SIDES:
        if side in sides:
            label = f"bench-{side}"
            rows, digest = _side_rows(sides[side], label, side)
            inputs.rows.extend(rows)
            inputs.digests[f"{label}/results.jsonl"] = digest
    if directory is None:
        return inputs if inputs.digests else Inputs("cold-start", dropped=inputs.dropped)
    promotion = directory / "gate" / "promotion.json"
    if _exists(promotion):
        if (directory / "gate").is_symlink():
            raise EvidenceError(f"{directory / 'gate'}: must not be a symlink (rule: no symlinks)")
        data = safefs.read_file(promotion, max_bytes=MAX_SOURCE_BYTES, what="promotion")
        doc = documents.parse_json(safefs.decode(data, str(promotion), "promotion"), str(promotion))
        inputs.promotion = validate(doc, "promotion", promotion)
        inputs.digests["gate/promotion.json"] = sha256_bytes(data)
    proposal = directory / "proposal.md"
    if _exists(proposal):
        data = safefs.read_file(proposal, max_bytes=MAX_SOURCE_BYTES, what="proposal")
        inputs.proposal = data.decode("utf-8", errors="replace")
        inputs.digests["proposal.md"] = sha256_bytes(data)
    loaded = memory.load(directory / memory.REJECTED_FILE)
    if loaded is not None:
        inputs.rejected, inputs.digests[memory.REJECTED_FILE] = loaded
    if not inputs.digests:
        return Inputs("cold-start", dropped=inputs.dropped)
    return inputs


def _skills_digest(side: Path) -> str | None:
    """The incumbent family a bench side measured (bench.json skills_digest); None before its bench.json exists."""
    path = side / BENCH_FILE
    if not _exists(path):
        return None
    return validate(documents.load_json(path, what="bench run"), "bench-run", path)["skills_digest"]


def load_seed(directory: str | Path) -> Inputs:
    """A seed results directory (results.jsonl, transcripts/, patches/), rows of either side."""
    directory = Path(directory)
    if directory.is_symlink() or not directory.is_dir():
        raise EvidenceError(f"{directory}: --seed must be a results directory (not a symlink)")
    rows, digest = _side_rows(directory, "seed", None)
    return Inputs("seed", rows=rows, digests={"results.jsonl": digest})


def load_learnings(path: str | Path, skills: Iterable[str], limit: int) -> tuple[list[dict[str, Any]], str]:
    """The last `limit` learnings about `skills`, in file order, and the file's sha256.

    Each non-blank line is one JSON object with exactly the keys skill, date, task, friction, suggestion
    (skill, friction, suggestion strings; date and task strings or null). Anything else fails naming the line.
    """
    path = Path(path)
    data = safefs.read_file(path, max_bytes=MAX_SOURCE_BYTES, what="learnings")
    wanted, picked = set(skills), []
    for number, line in enumerate(documents.jsonl_lines(safefs.decode(data, str(path), "learnings")), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        item = documents.parse_json(line, where)
        if not isinstance(item, dict) or set(item) != LEARNING_KEYS:
            keys = sorted(item) if isinstance(item, dict) else type(item).__name__
            raise EvidenceError(f"{where}: a learning is an object with exactly the keys "
                                f"{', '.join(sorted(LEARNING_KEYS))} (got {keys}) (rule: learning shape)")
        for key in ("skill", "friction", "suggestion"):
            if not isinstance(item[key], str) or not item[key]:
                raise EvidenceError(f"{where}: {key}: must be a non-empty string (rule: learning shape)")
        for key in ("date", "task"):
            if item[key] is not None and not isinstance(item[key], str):
                raise EvidenceError(f"{where}: {key}: must be a string or null (rule: learning shape)")
        if item["skill"] in wanted:
            picked.append((number, item))
    picked = picked[-limit:] if limit else []
    return [dict(item, line=number) for number, item in picked], sha256_bytes(data)


def priority_key(row: dict[str, Any]) -> tuple:
    """Unresolved first by (task, arm, run); then resolved by cost, highest first, unmeasured last."""
    if not row["resolved"]:
        return (0, False, 0.0, row["task"], row["arm"], row["run"])
    cost = row["cost_usd"]
    return (1, cost is None, -(cost or 0.0), row["task"], row["arm"], row["run"])
