"""The evidence bundle: what the proposer may read about the previous generation.

From the previous generation's bench outputs (both sides; the incumbent side may instead be this
generation's, as dvc.yaml passes it), its gate decision and its proposal, or from a seed results
directory, or from nothing (cold start), build a small directory the proposer session gets read-only:

    manifest.json        every file with its sha256; inputs, limits, counts, and everything left out
    rows.json            compacted results rows in priority order, each naming its files below
    transcripts/row<i>-<j>.jsonl   the row's session transcripts (the last max_transcripts_per_row)
    patches/row<i>.diff  the row's patch
    learnings.json       the last max_learnings one-line learnings about evolvable skills
    gate-summary.json    one line per prior gate decision
    prior-proposal.md    the previous generation's proposal

Selection: rows whose error kind is harness trouble (EXCLUDED_ERROR_KINDS) teach nothing about a skill
and are left out; then unresolved rows by (task, arm, run), then resolved rows by cost, highest first
(unmeasured cost last); the first max_rows whose artifacts verify are taken. A row whose transcript or
patch does not match the size and sha256 recorded in it is refused: the row is left out, the next one
takes its place, and the manifest says why (its provenance is broken, so none of it is evidence).

Every file is redacted (skillevo.redact plus the literal values of ANTHROPIC_API_KEY/ANTHROPIC_AUTH_TOKEN),
cut to max_file_bytes (transcripts keep whole trailing events, text keeps head and tail), and checked
against every hidden oracle file: a file carrying an oracle canary or any oracle line longer than 20
characters is withheld. Then the bundle is fit into max_bundle_bytes by dropping the lowest-priority row,
then the prior proposal; if it still does not fit, the stage fails. The same inputs give the same bytes.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from skillevo import params as params_mod
from skillevo import tasks as tasks_mod
from skillevo.agent.transcript import TranscriptMismatch, verify
from skillevo.digests import canonical_json, sha256_bytes
from skillevo.redact import redact_obj, redact_text
from skillevo.schemas import InvalidDocument, validate

EXCLUDED_ERROR_KINDS = frozenset({"infra-error", "session-error", "evidence-unverified", "cleanup-failure"})
SECRET_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
CANARY_MARK = "skillevo-oracle-canary"
ORACLE_LINE_MIN = 20  # lines longer than this (whitespace stripped) must not appear verbatim
MAX_SOURCE_BYTES = 64 << 20  # refuse to even read an input larger than this
ELIDE_STRING_CHARS = 4096  # in an over-long transcript, longer strings keep only head and tail
LEARNING_KEYS = frozenset({"skill", "date", "task", "friction", "suggestion"})
SIDES = ("incumbent", "candidate")
MANIFEST = "manifest.json"
BUNDLE_ENTRIES = frozenset({MANIFEST, "rows.json", "learnings.json", "gate-summary.json", "prior-proposal.md",
                            "transcripts", "patches"})
_HEX_TOKEN = re.compile(r"[0-9a-fA-F]{16,}")


class EvidenceError(ValueError):
    """Bad input, or a bundle that cannot fit its budget; the message says which file or limit."""


# ---------------------------------------------------------------------------------------------- params


@dataclass(frozen=True)
class Limits:
    """params.yaml `evidence:` (every key optional)."""

    max_rows: int = 12
    max_transcripts_per_row: int = 2
    max_file_bytes: int = 262144
    max_bundle_bytes: int = 2097152
    max_learnings: int = 40
    verify_tail_chars: int = 600

    _MINIMUM = {"max_file_bytes": 1024, "max_bundle_bytes": 1024}

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Limits:
        section = params_mod.section(dict(params), "evidence")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(section) - known)
        if unknown:
            raise params_mod.ParamsError(f"params.yaml: evidence: unknown key(s) {', '.join(unknown)} "
                                         f"(known: {', '.join(sorted(known))})")
        values = {}
        for name in sorted(known):
            if name not in section:
                continue
            value, minimum = section[name], cls._MINIMUM.get(name, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise params_mod.ParamsError(f"params.yaml: evidence.{name}: must be an integer >= {minimum}, "
                                             f"got {value!r}")
            values[name] = value
        return cls(**values)

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def evolvable_skills(params: Mapping[str, Any]) -> tuple[str, ...]:
    """params.yaml skills.evolvable (missing = none)."""
    value = params_mod.section(dict(params), "skills").get("evolvable", [])
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise params_mod.ParamsError("params.yaml: skills.evolvable: must be a list of skill names")
    return tuple(sorted(set(value)))


def env_secrets(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Literal credentials to redact wherever they appear: the model keys, if set."""
    environ = os.environ if environ is None else environ
    return tuple(sorted({environ[k] for k in SECRET_ENV if environ.get(k)}))


# ------------------------------------------------------------------------------------------ oracle guard


def visible_texts(task: tasks_mod.Task) -> Iterable[bytes]:
    """What the agent of a task can see: its prompt, setup and verify commands, its pinned target tree."""
    for text in (task.prompt, task.setup or "", task.verify):
        yield text.encode()
    if task.target_kind == "dir":
        for _, data in tasks_mod.dir_entries(task.target_dir):
            yield data
        return
    out = subprocess.run(["git", "-C", str(task.target_dir), "archive", "--format=tar", task.tree],
                         capture_output=True)
    if out.returncode != 0:
        raise EvidenceError(f"task {task.id}: cannot read its target tree {task.tree}: "
                            f"{out.stderr.decode(errors='replace').strip()[-300:]}")
    with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
        for member in tar:
            if member.isfile():
                f = tar.extractfile(member)
                if f is not None:
                    yield f.read()


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


class OracleGuard:
    """Refuses text that carries hidden-oracle bytes: a canary, or any long line of an oracle file.

    The proposer must never see the hidden tests, or it could write a skill that teaches to the test.
    An oracle line (surrounding whitespace stripped) longer than 20 characters may not occur anywhere in
    the text, not even inside a longer line; shorter lines are too common (`import pytest`) to mean
    anything. JSON files are also checked string by string, so a line inside an escaped JSON string is
    found too.
    """

    def __init__(self, oracle_files: Iterable[bytes], visible: Iterable[bytes] = ()):
        """`visible`: texts the agent sees anyway (prompts, the pinned target trees); oracle lines that
        also occur in them are not hidden and are exempt. Canaries are never exempt."""
        self.lines: set[str] = set()
        self.canaries: set[str] = set()
        for data in oracle_files:
            for line in data.decode("utf-8", errors="replace").splitlines():
                text = line.strip()
                if CANARY_MARK in text:
                    self.canaries.add(text)
                    self.canaries.update(_HEX_TOKEN.findall(text))
                if len(text) > ORACLE_LINE_MIN:
                    self.lines.add(text)
        for data in visible:
            if not self.lines:
                break
            self.lines.difference_update(line.strip() for line in data.decode("utf-8", errors="replace").splitlines())
        self._ordered = sorted(self.lines)

    @classmethod
    def from_tasks(cls, path: str | Path, *, exempt_visible: bool = False) -> OracleGuard:
        """The guard for every oracle file of every task in `path`.

        exempt_visible=False: every oracle line over 20 characters counts, even one the agent also sees
        in the target (`from decimal import Decimal`). True (what the stage uses): lines that also occur
        in a task's prompt, setup, verify command or pinned target tree are exempt, since they are not
        hidden; canaries never are. Oracle authors keep evidence rich by making their own lines
        distinctive (the demo oracles tag their imports with a comment).
        """
        tasks = tasks_mod.load(path)
        oracle = [data for task in tasks for _, data in task.oracle_files]
        if not exempt_visible:
            return cls(oracle)
        return cls(oracle, (data for task in tasks for data in visible_texts(task)))

    def check_text(self, text: str) -> str | None:
        """None if the text is clean, else why it is not (never quoting the oracle)."""
        if CANARY_MARK in text or any(c in text for c in self.canaries):
            return "carries a hidden oracle's canary"
        # A substring test, not line equality: a copied line keeps its bytes behind a diff marker (`+`),
        # a Read tool's line number or a pytest `E   ` prefix.
        if any(line in text for line in self._ordered):
            return "carries a line of a hidden oracle file"
        return None

    def check_value(self, value: Any) -> str | None:
        for text in _strings(value):
            reason = self.check_text(text)
            if reason:
                return reason
        return None

    def check_file(self, path: str, data: bytes) -> str | None:
        text = data.decode("utf-8", errors="replace")
        reason = self.check_text(text)
        if reason:
            return reason
        if path.endswith(".jsonl"):
            docs = text.splitlines()
        elif path.endswith(".json"):
            docs = [text]
        else:
            return None
        for doc in docs:
            try:
                value = json.loads(doc)
            except ValueError:
                continue  # its raw lines were checked above
            reason = self.check_value(value)
            if reason:
                return reason
        return None


# ------------------------------------------------------------------------------------- inputs and rows


@dataclass(frozen=True)
class SourceRow:
    row: dict[str, Any]
    origin: str  # bench-incumbent | bench-candidate | seed: where its artifacts live
    directory: Path
    where: str  # results.jsonl line, relative to the source

    @property
    def cell(self) -> str:
        r = self.row
        return f"{r['task']}/{r['arm']}/run{r['run']}"


@dataclass
class Inputs:
    source: str  # previous | seed | cold-start
    rows: list[SourceRow] = field(default_factory=list)
    promotion: dict[str, Any] | None = None
    proposal: str | None = None
    digests: dict[str, str] = field(default_factory=dict)
    dropped: list[dict[str, str]] = field(default_factory=list)  # inputs ignored, for the manifest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(text: str | bytes) -> Any:
    """json.loads without NaN/Infinity, which no file of this pipeline may hold."""
    return json.loads(text, parse_constant=_no_constant)


def _read_bytes(path: Path, what: str) -> bytes:
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            raise EvidenceError(f"{path}: {what} must be a regular file (not a symlink or directory)")
        if st.st_size > MAX_SOURCE_BYTES:
            raise EvidenceError(f"{path}: {what} is {st.st_size} bytes, more than {MAX_SOURCE_BYTES} (refused)")
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            return f.read(MAX_SOURCE_BYTES + 1)
    except OSError as e:
        raise EvidenceError(f"{path}: cannot read {what}: {e.strerror or e}") from None


def _decode(data: bytes, path: Path, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise EvidenceError(f"{path}: {what} is not UTF-8: {e}") from None


def read_results(directory: Path, label: str, side: str | None) -> tuple[list[SourceRow], str]:
    """Rows of `<directory>/results.jsonl`, each valid against result-row.schema.json; and the file's sha256."""
    path = directory / "results.jsonl"
    if directory.is_symlink():
        raise EvidenceError(f"{directory}: a results directory must not be a symlink")
    data = _read_bytes(path, "results")
    # Not splitlines(): JSON strings may hold U+2028 and friends unescaped.
    lines = _decode(data, path, "results").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    rows, seen = [], set()
    for number, line in enumerate(lines, start=1):
        where = f"{path}:{number}"
        try:
            row = loads(line)
        except ValueError as e:
            raise EvidenceError(f"{where}: not a JSON object: {e}") from None
        try:
            validate(row, "result-row.schema.json", where)
        except InvalidDocument as e:
            raise EvidenceError(str(e)) from None
        if side is not None and row["side"] != side:
            raise EvidenceError(f"{where}: $.side: is {row['side']!r}, but the row is in {label}/ (rule: side)")
        cell = (row["task"], row["arm"], row["run"])
        if cell in seen:
            raise EvidenceError(f"{where}: task {cell[0]!r}, arm {cell[1]!r}, run {cell[2]} appears twice")
        seen.add(cell)
        rows.append(SourceRow(row, label, directory, f"{label}:{number}"))
    return rows, sha256_bytes(data)


PREVIOUS_ENTRIES = ("bench-incumbent", "bench-candidate", "gate", "proposal.md")


def load_previous(directory: str | Path | None, incumbent: str | Path | None = None) -> Inputs:
    """The previous generation's outputs, and optionally this generation's incumbent side.

    `directory` may hold any of bench-incumbent/, bench-candidate/, gate/promotion.json, proposal.md;
    anything else in it (a README.md, dotfiles) is ignored, other entries are listed in the manifest as
    ignored. `incumbent` (dvc.yaml passes results/bench-incumbent) is a bench side directory that takes
    the place of <directory>/bench-incumbent. No input at all is a cold start.
    """
    inputs, ignored = Inputs("previous"), []
    sides: dict[str, Path] = {}
    directory = Path(directory) if directory is not None else None
    if directory is not None and (directory.exists() or directory.is_symlink()):
        if directory.is_symlink() or not directory.is_dir():
            raise EvidenceError(f"{directory}: --previous must be a directory (not a symlink)")
        for name in sorted(p.name for p in directory.iterdir()):
            if name not in PREVIOUS_ENTRIES and not name.startswith(".") and name != "README.md":
                ignored.append(name)
        for side in SIDES:
            if (directory / f"bench-{side}").exists() or (directory / f"bench-{side}").is_symlink():
                sides[side] = directory / f"bench-{side}"
    if incumbent is not None:
        incumbent = Path(incumbent)
        if not incumbent.is_dir() or incumbent.is_symlink():
            raise EvidenceError(f"{incumbent}: --incumbent must be a bench side directory (not a symlink)")
        if "incumbent" in sides:
            inputs.dropped.append({"what": "previous bench-incumbent/",
                                   "reason": "ignored: --incumbent gives this generation's incumbent side"})
        sides["incumbent"] = incumbent
    for name in ignored:
        inputs.dropped.append({"what": f"previous {name}", "reason": "ignored: not an evidence input"})
    for side in SIDES:
        if side in sides:
            label = f"bench-{side}"
            rows, digest = read_results(sides[side], label, side)
            inputs.rows.extend(rows)
            inputs.digests[f"{label}/results.jsonl"] = digest
    if directory is None:
        return inputs if inputs.digests else Inputs("cold-start", dropped=inputs.dropped)
    promotion = directory / "gate" / "promotion.json"
    if promotion.exists() or promotion.is_symlink():
        if (directory / "gate").is_symlink():
            raise EvidenceError(f"{directory / 'gate'}: must not be a symlink")
        data = _read_bytes(promotion, "promotion")
        try:
            doc = loads(_decode(data, promotion, "promotion"))
            inputs.promotion = validate(doc, "promotion.schema.json", promotion)
        except InvalidDocument as e:
            raise EvidenceError(str(e)) from None
        except ValueError as e:
            raise EvidenceError(f"{promotion}: not JSON: {e}") from None
        inputs.digests["gate/promotion.json"] = sha256_bytes(data)
    proposal = directory / "proposal.md"
    if proposal.exists() or proposal.is_symlink():
        data = _read_bytes(proposal, "proposal")
        inputs.proposal = data.decode("utf-8", errors="replace")
        inputs.digests["proposal.md"] = sha256_bytes(data)
    if not inputs.digests:
        return Inputs("cold-start", dropped=inputs.dropped)
    return inputs


def load_seed(directory: str | Path) -> Inputs:
    """A seed results directory (results.jsonl, transcripts/, patches/), rows of either side."""
    directory = Path(directory)
    if directory.is_symlink() or not directory.is_dir():
        raise EvidenceError(f"{directory}: --seed must be a results directory (not a symlink)")
    rows, digest = read_results(directory, "seed", None)
    return Inputs("seed", rows=rows, digests={"results.jsonl": digest})


def load_learnings(path: str | Path, skills: Iterable[str], limit: int) -> tuple[list[dict[str, Any]], str]:
    """The last `limit` learnings about `skills`, in file order, and the file's sha256.

    Each non-blank line is one JSON object with exactly the keys skill, date, task, friction, suggestion
    (skill, friction, suggestion strings; date and task strings or null). Anything else fails naming the line.
    """
    path = Path(path)
    data = _read_bytes(path, "learnings")
    wanted, picked = set(skills), []
    for number, line in enumerate(_decode(data, path, "learnings").split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            item = loads(line)
        except ValueError as e:
            raise EvidenceError(f"{where}: not a JSON object: {e}") from None
        if not isinstance(item, dict) or set(item) != LEARNING_KEYS:
            keys = sorted(item) if isinstance(item, dict) else type(item).__name__
            raise EvidenceError(f"{where}: a learning is an object with exactly the keys "
                                f"{', '.join(sorted(LEARNING_KEYS))} (got {keys})")
        for key in ("skill", "friction", "suggestion"):
            if not isinstance(item[key], str) or not item[key]:
                raise EvidenceError(f"{where}: {key}: must be a non-empty string")
        for key in ("date", "task"):
            if item[key] is not None and not isinstance(item[key], str):
                raise EvidenceError(f"{where}: {key}: must be a string or null")
        if item["skill"] in wanted:
            picked.append((number, item))
    picked = picked[-limit:] if limit else []
    return [dict(item, line=number) for number, item in picked], sha256_bytes(data)


def priority_key(row: Mapping[str, Any]) -> tuple:
    """Unresolved first by (task, arm, run); then resolved by cost, highest first, unmeasured last."""
    if not row["resolved"]:
        return (0, False, 0.0, row["task"], row["arm"], row["run"])
    cost = row["cost_usd"]
    return (1, cost is None, -(cost or 0.0), row["task"], row["arm"], row["run"])


def order_rows(rows: Iterable[SourceRow]) -> tuple[list[SourceRow], int]:
    """(eligible rows in priority order, number excluded as harness trouble)."""
    rows = list(rows)
    eligible = [r for r in rows if r.row["error_kind"] not in EXCLUDED_ERROR_KINDS]
    return sorted(eligible, key=lambda r: priority_key(r.row)), len(rows) - len(eligible)


# -------------------------------------------------------------------------------- redaction, compaction


def render_json(value: Any) -> bytes:
    """The bundle's JSON form: sorted keys, indent 1, UTF-8, trailing newline."""
    return (json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False) + "\n").encode()


def redact(value: Any, secrets: Iterable[str] = ()) -> Any:
    """redact_obj, and dictionary keys too (redact_obj leaves keys as they are)."""
    secrets = tuple(secrets)
    value = redact_obj(value, secrets)

    def keys(v: Any) -> Any:
        if isinstance(v, dict):
            return {redact_text(str(k), secrets) if isinstance(k, str) else k: keys(x) for k, x in v.items()}
        if isinstance(v, list):
            return [keys(x) for x in v]
        return v

    return keys(value)


def redact_jsonl(data: bytes, secrets: tuple[str, ...]) -> bytes:
    """Each event parsed, redacted and re-rendered canonically; ValueError if a line is not JSON."""
    out = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            event = loads(line)
        except ValueError as e:
            raise ValueError(f"line {number} is not JSON: {e}") from None
        out.append(canonical_json(redact(event, secrets)) + b"\n")
    return b"".join(out)


def _elide(value: Any) -> Any:
    if isinstance(value, str) and len(value) > ELIDE_STRING_CHARS:
        head, tail = ELIDE_STRING_CHARS // 2, ELIDE_STRING_CHARS // 4
        return f"{value[:head]}…[skillevo: {len(value) - head - tail} chars elided]…{value[-tail:]}"
    if isinstance(value, dict):
        return {k: _elide(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_elide(v) for v in value]
    return value


def compaction_marker(omitted: int) -> bytes:
    return canonical_json({"type": "skillevo_compacted", "omitted_bytes": omitted}) + b"\n"


def compact_jsonl(data: bytes, limit: int) -> tuple[bytes, int]:
    """(at most `limit` bytes of whole trailing events, bytes omitted); never cuts an event.

    Over the limit, strings longer than ELIDE_STRING_CHARS keep only head and tail (so one huge tool
    result does not push every earlier event out), then the most recent events that fit are kept
    behind a first line {"type":"skillevo_compacted","omitted_bytes":N}.
    """
    if len(data) <= limit:
        return data, 0
    events = [canonical_json(_elide(json.loads(line))) + b"\n" for line in data.split(b"\n") if line.strip()]
    size, kept = len(compaction_marker(len(data))), []
    for event in reversed(events):
        if size + len(event) > limit:
            break
        kept.append(event)
        size += len(event)
    body = b"".join(reversed(kept))
    omitted = len(data) - len(body)
    return compaction_marker(omitted) + body, omitted


def compact_text(text: str, limit: int) -> tuple[str, int]:
    """(head and tail of `text` in at most `limit` UTF-8 bytes with a marker line between, bytes omitted)."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text, 0
    reserve = len(f"\n[skillevo: {len(data)} bytes omitted from the middle of this file]\n".encode())
    room = max(limit - reserve, 0)
    head, tail = data[: room // 2], data[len(data) - (room - room // 2):]
    if b"\n" in head:
        head = head[: head.rindex(b"\n") + 1]
    if b"\n" in tail:
        tail = tail[tail.index(b"\n") + 1:]
    head_text = head.decode("utf-8", errors="ignore")
    tail_text = tail.decode("utf-8", errors="ignore")
    omitted = len(data) - len(head_text.encode()) - len(tail_text.encode())
    sep = "" if not head_text or head_text.endswith("\n") else "\n"
    return f"{head_text}{sep}[skillevo: {omitted} bytes omitted from the middle of this file]\n{tail_text}", omitted


# --------------------------------------------------------------------------------------------- bundle


@dataclass
class Bundle:
    files: dict[str, bytes]  # bundle path -> bytes, manifest excluded
    manifest: dict[str, Any]

    @property
    def manifest_bytes(self) -> bytes:
        return render_json(self.manifest)

    @property
    def total_bytes(self) -> int:
        return sum(len(b) for b in self.files.values())


@dataclass
class _Row:
    compact: dict[str, Any]
    files: dict[str, bytes]
    cell: str


class _Builder:
    def __init__(self, guard: OracleGuard, limits: Limits, secrets: tuple[str, ...]):
        self.guard, self.limits, self.secrets = guard, limits, secrets
        self.dropped: list[dict[str, str]] = []

    def drop(self, what: str, reason: str) -> None:
        self.dropped.append({"what": what, "reason": reason})

    def _artifact(self, src: SourceRow, meta: dict[str, Any], kind: str) -> bytes:
        """The artifact's bytes if they are exactly what the row records; ValueError otherwise."""
        rel = meta["path"]
        folder, _, name = rel.partition("/")
        if folder != kind or name in ("", ".", ".."):
            raise ValueError(f"{rel}: a {kind[:-1]} must be a file directly under {kind}/")
        if (src.directory / folder).is_symlink():
            raise ValueError(f"{src.origin}/{folder}: is a symlink")
        try:
            st = os.lstat(src.directory / rel)
        except OSError:
            raise ValueError(f"{src.origin}/{rel}: missing") from None
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{src.origin}/{rel}: not a regular file (symlinks are refused)")
        mismatch = f"{src.origin}/{rel}: does not match its row (size or sha256 differs)"
        if st.st_size != meta["bytes"] or st.st_size > MAX_SOURCE_BYTES:
            raise ValueError(mismatch)  # checked before reading, so a huge file is never read
        try:
            return verify(meta, src.directory)
        except TranscriptMismatch:
            raise ValueError(mismatch) from None
        except OSError as e:
            raise ValueError(f"{src.origin}/{rel}: cannot read: {e.strerror or e}") from None

    def row(self, src: SourceRow, index: int) -> _Row | None:
        """The row's compact form and files, or None (with the reason recorded) if it is refused."""
        row, lim = src.row, self.limits
        what = f"row {src.cell} ({src.where})"
        try:
            transcripts = [self._artifact(src, m, "transcripts") for m in row["transcripts"]]
            patch = self._artifact(src, row["patch"], "patches") if row["patch"] else None
            keep = transcripts[-lim.max_transcripts_per_row:] if lim.max_transcripts_per_row else []
            redacted = [redact_jsonl(data, self.secrets) for data in keep]
        except ValueError as e:
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
        tail = redact_text(row["verify_tail"], self.secrets)
        tail = tail[-lim.verify_tail_chars:] if lim.verify_tail_chars else ""
        reason = self.guard.check_text(tail)
        if reason:
            self.drop(f"row {index} verify_tail", f"withheld: {reason}")
            notes.append("verify_tail withheld: it carries hidden-oracle content")
            tail = None
        compact = redact({
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
        if reason is None and _leaks(data, self.secrets):
            reason = "carries a credential that survived redaction"
            notes.append(f"{name} withheld: it carries a credential")
            self.drop(name, f"withheld: {reason}")
            return False
        if reason:
            self.drop(name, f"withheld: {reason}")
            notes.append(f"{name} withheld: it carries hidden-oracle content")
            return False
        return True


def _leaks(data: bytes, secrets: tuple[str, ...]) -> bool:
    text = data.decode("utf-8", errors="replace")
    return any(s in text for s in secrets if len(s) >= 4) or re.search(r"sk-ant-[A-Za-z0-9_\-]{8,}", text) is not None


def build_bundle(
    inputs: Inputs,
    *,
    guard: OracleGuard,
    limits: Limits = Limits(),
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
    fixed["learnings.json"] = _learnings_file(b, learnings, limits)
    fixed["gate-summary.json"] = _gate_file(b, inputs.promotion, limits)
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

    # Fit the total: the lowest-priority row first, then the prior proposal, then give up.
    while True:
        rows_json = render_json([r.compact for r in rows])
        files = dict(fixed)
        files["rows.json"] = rows_json
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
        else:
            sizes = ", ".join(f"{p} {len(v)}" for p, v in sorted(files.items()))
            raise EvidenceError(f"evidence bundle cannot fit evidence.max_bundle_bytes {limits.max_bundle_bytes}: "
                                f"{total} bytes with every row and the prior proposal dropped ({sizes})")
    counts["selected"] = len(rows)

    for path, data in sorted(files.items()):
        # Defence in depth: whatever the steps above did, nothing leaves with a secret or oracle bytes.
        if _leaks(data, secrets):
            raise EvidenceError(f"{path}: still carries a credential after redaction (refusing to write it)")
        if guard.check_file(path, data):
            raise EvidenceError(f"{path}: still carries hidden-oracle content (refusing to write it)")

    manifest = {
        "schema_version": 1,
        "source": inputs.source,
        "inputs": dict(sorted({**inputs.digests, **({"learnings": learnings_digest} if learnings_digest else {})}
                              .items())),
        "limits": limits.as_dict(),
        "evolvable_skills": sorted(set(skills)),
        "files": [{"path": p, "sha256": sha256_bytes(v), "bytes": len(v)} for p, v in sorted(files.items())],
        "rows": counts,
        "dropped": b.dropped,
    }
    validate(manifest, "evidence-manifest.schema.json", MANIFEST)
    return Bundle(files, manifest)


def _learnings_file(b: _Builder, learnings: Iterable[dict[str, Any]], limits: Limits) -> bytes:
    kept = []
    for item in learnings:
        line = item.get("line")
        entry = redact({k: item[k] for k in sorted(LEARNING_KEYS)}, b.secrets)
        reason = b.guard.check_value(entry)
        if reason:
            b.drop(f"learning at line {line}", f"withheld: {reason}")
        else:
            kept.append(entry)
    data = render_json(kept)
    while len(data) > limits.max_file_bytes and kept:
        kept.pop(0)
        b.drop("oldest learning", f"learnings.json over evidence.max_file_bytes {limits.max_file_bytes}")
        data = render_json(kept)
    return data


def gate_summary(promotion: Mapping[str, Any] | None) -> list[str]:
    """One line per prior decision: '<candidate arm>: <decision> — <first 3 reasons>'."""
    if not promotion:
        return []
    return [f"{d['candidate_arm']}: {d['decision']} — {'; '.join(d['reasons'][:3])}" for d in promotion["decisions"]]


def _gate_file(b: _Builder, promotion: Mapping[str, Any] | None, limits: Limits) -> bytes:
    kept = []
    for line in gate_summary(promotion):
        line = redact_text(line, b.secrets)
        reason = b.guard.check_text(line)
        if reason:
            b.drop(f"gate summary of {line.split(':', 1)[0]}", f"withheld: {reason}")
        else:
            kept.append(line)
    data = render_json(kept)
    while len(data) > limits.max_file_bytes and kept:
        gone = kept.pop()
        b.drop(f"gate summary of {gone.split(':', 1)[0]}",
               f"gate-summary.json over evidence.max_file_bytes {limits.max_file_bytes}")
        data = render_json(kept)
    return data


# ---------------------------------------------------------------------------------------------- write


def _write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o644)
        f.write(data)


def write_bundle(bundle: Bundle, out: str | Path) -> Path:
    """Write the bundle fresh at `out` (files 0644, directories 0755).

    An existing `out` is replaced only if it is empty or holds nothing but a previous bundle (a
    manifest.json and bundle files); anything else is refused, so a mistyped --out never deletes work.
    """
    out = Path(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise EvidenceError(f"{out}: --out must be a directory (not a symlink or file)")
    if out.exists():
        names = {p.name for p in out.iterdir()}
        if names and (MANIFEST not in names or names - BUNDLE_ENTRIES):
            raise EvidenceError(f"{out}: not empty and not a previous evidence bundle "
                                f"(found: {', '.join(sorted(names)[:8])}); refusing to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        os.chmod(tmp, 0o755)
        for sub in ("transcripts", "patches"):
            (tmp / sub).mkdir(mode=0o755)
            os.chmod(tmp / sub, 0o755)
        for path, data in sorted(bundle.files.items()):
            _write_file(tmp / path, data)
        _write_file(tmp / MANIFEST, bundle.manifest_bytes)
        if out.exists():
            shutil.rmtree(out)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def make_bundle(
    *,
    previous: str | Path | None,
    seed: str | Path | None = None,
    incumbent: str | Path | None = None,
    learnings: str | Path | None = None,
    tasks: str | Path = "tasks/tasks.yaml",
    params: str | Path = "params.yaml",
    environ: Mapping[str, str] | None = None,
) -> Bundle:
    """Everything the stage does short of writing: read params, tasks, inputs and learnings; build."""
    doc = params_mod.load(params)
    limits, skills = Limits.from_params(doc), evolvable_skills(doc)
    guard = OracleGuard.from_tasks(tasks, exempt_visible=True)
    if seed is not None:
        if incumbent is not None:
            raise EvidenceError("--seed is used instead of --previous and --incumbent; give one or the other")
        inputs = load_seed(seed)
    else:
        inputs = load_previous(previous, incumbent)
    items, digest = ([], None)
    if learnings is not None:
        items, digest = load_learnings(learnings, skills, limits.max_learnings)
    return build_bundle(inputs, guard=guard, limits=limits, skills=skills, learnings=items,
                        learnings_digest=digest, secrets=env_secrets(environ))
