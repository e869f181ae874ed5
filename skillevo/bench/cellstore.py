"""The cell store: every finished cell's row and artifacts, addressed by everything that can change its outcome.

A bench serves stored cells before it pays for any and stores each finished cell the moment it ends, so a killed
bench resumes with no finished cell paid twice, and a new generation pays only for cells whose key changed
(docs/cell-store.md). A key covers the task binding, the installed family with its modes (skills and overlay
digests: every description reaches the model, so a cell depends on all of them), the arm's sessions, the run
and replicate, model and effort, the CLI version, the simulator's noise and playbooks, the cell's limits, and
the harness itself (skillevo.bench.harness: its code and the tools' versions), so that a cell measured by an older
harness is never served after the harness changes.

Only valid measurements are stored: a harness or API fault (an excluded error kind) is never served later.
Entries are untrusted on the way back in: one that does not parse, is not the key it is filed under, names
another cell, breaks a row rule (resolved without its checks passing), has artifacts that do not match its row,
has a time that does not parse, or is older than `gate.max_age_days` (or dated in the future) is not served, and
the cell is paid again and its entry replaced; nothing in an entry can make a bench refuse.

With a team key in the environment (SKILLEVO_CELL_KEY, never in a file, argv or log), every entry carries an
HMAC-SHA256 of its key and its stored bytes under that key, on the entry's first line, checked before anything is
decompressed or parsed: an entry that does not verify (forged, edited, renamed, or written without the key) is a
miss, `make pull` fetches only entries that verify, and `make push` sends only those.
Without a key the local store is trusted as far as its filesystem, and nothing is shared. Its operator commands
(ls, gc, push, pull) are skillevo.ops.cells.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hmac
import io
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tqdm import tqdm

from skillevo.bench.cell import CellResult, CellSpec
from skillevo.core import pins
from skillevo.core.results import EXCLUDED_ERROR_KINDS, check_row, check_row_transcripts
from skillevo.files import documents, safefs
from skillevo.files.digests import KEY_ENV, canonical_json, mac_of_bytes, sha256_bytes, sha256_json
from skillevo.files.errors import BadInput, BrokenEnvironment
from skillevo.files.schemas import validate

FORMAT = "skillevo-cell/2"  # an entry: `FORMAT <mac or UNKEYED>\n` then gzip-compressed canonical JSON
MAGIC = FORMAT.encode() + b" "
UNKEYED = b"-" * 64  # the MAC's place in an entry written without a team key
ENTRIES = "v1"
SUFFIX = ".json.gz"
MAX_ENTRY_BYTES = 64 << 20  # compressed, as stored
MAX_EXPANDED_BYTES = 256 << 20  # decompressed: a small file that expands without bound is refused
NOT_STORED = "not stored"  # the one miss that is not worth a word: the cell simply has not run yet
REMOTE_DIR = "skillevo-cells"  # beside DVC's own files/ and runs/ on the DVC remote
IDENTITY = ("task", "arm", "run", "side", "skills_digest", "overlay_digest", "task_binding_digest", "base_commit",
            "model", "backend", "effort", "simulated", "slot", "control_for")


@dataclass(frozen=True)
class Context:
    """What every cell of one bench shares, fixed before any cell runs."""

    harness: str  # skillevo.bench.harness.digest()
    replicate: int  # params sampling.replicate: a fresh replicate is new measurements
    simulator: Mapping[str, Any] | None  # noise profile and seed, playbooks digest; None for a real model


def material(spec: CellSpec, ctx: Context) -> dict[str, Any]:
    """Everything a cell's key covers, as plain data (kept in the entry, so a miss can be explained)."""
    model = spec.model
    return json.loads(canonical_json({
        "format": FORMAT, "task": spec.task.binding, "task_binding_digest": spec.task.binding_digest,
        "arm": {"name": spec.arm.name, "incumbent": spec.arm.incumbent,
                "sessions": [asdict(s) for s in spec.arm.sessions], "mcp": [asdict(m) for m in spec.arm.mcp],
                "comparator": None if spec.arm.comparator is None else spec.arm.comparator.describe()},
        "run": spec.run, "side": spec.side, "replicate": ctx.replicate, "control_for": spec.control_for,
        # a candidate-side cell is its slot in the side's order too: served only into the same place
        "slot": spec.slot if spec.side == "candidate" else None, "budget_usd": spec.budget_usd,
        "replaces": spec.replaces,
        "skills_digest": spec.skills_digest, "overlay_digest": spec.overlay_digest, "base_commit": spec.base_commit,
        "model": model.identity(),
        "cli": pins.CLAUDE_CODE_VERSION, "harness": ctx.harness, "simulator": ctx.simulator,
        "limits": asdict(spec.limits), "phase_timeout_s": spec.phase_timeout_s, "max_retries": spec.max_retries,
        "churn_exclude": list(spec.churn_exclude),
    }))  # as plain JSON values, so a stored entry's material compares equal (tuples become lists)


def key(spec: CellSpec, ctx: Context) -> str:
    return sha256_json(material(spec, ctx))


def storable(row: Mapping[str, Any]) -> bool:
    """A valid measurement; a harness or API fault must be paid again once the fault is gone."""
    return row["error_kind"] not in EXCLUDED_ERROR_KINDS and row["recorded_at"] is not None


def _artifact_paths(row: Mapping[str, Any]) -> set[str]:
    return {t["path"] for t in row["transcripts"]} | ({row["patch"]["path"]} if row["patch"] else set())


class Miss(Exception):
    """Why a stored entry is not served (the cell is paid again)."""


class Store:
    """A directory of entries `v1/<key[:2]>/<key>.json.gz`, each a line naming the format and the entry's MAC, then
    gzip-compressed canonical JSON, written atomically, so a reader sees a whole entry or none, whoever was killed
    while writing it. `secret` is the team key (team_key()): with it, entries are written with their HMAC and read
    only if it verifies."""

    def __init__(self, root: Path, secret: bytes | None = None) -> None:
        self.root = Path(root)
        self.secret = secret

    def path(self, k: str) -> Path:
        return self.root / ENTRIES / k[:2] / f"{k}{SUFFIX}"

    def keys(self) -> Iterator[str]:
        base = self.root / ENTRIES
        if not base.is_dir():
            return
        for shard in sorted(base.iterdir()):
            if shard.is_dir() and not shard.is_symlink():
                for entry in sorted(shard.iterdir()):
                    if entry.name.endswith(SUFFIX) and entry.name[:2] == shard.name:
                        yield entry.name.removesuffix(SUFFIX)

    def put(self, k: str, mat: Mapping[str, Any], result: CellResult, replace: bool = False) -> bool:
        """Store a finished cell unless it is not a valid measurement or a valid entry is already there (with
        `replace`, a drifted arm's new measurement replaces it: skillevo/bench/canary.py)."""
        if not storable(result.row):
            return False
        if self.path(k).exists() and not replace:
            try:
                self.read(k)
                return False  # the first measurement of a key stays, as in DVC's run-cache
            except Miss:
                pass  # a damaged entry is replaced
        arts = {rel: base64.b64encode(data).decode("ascii") for rel, data in sorted(result.artifacts.items())}
        entry = {"format": FORMAT, "key": k, "material": mat, "row": result.row, "artifacts": arts,
                 "stored_at": _now().isoformat(timespec="seconds")}
        safefs.write_atomic(self.path(k), encode(k, entry, self.secret))
        return True

    def read(self, k: str) -> dict[str, Any]:
        """An entry that is whole and is what its name says (Miss otherwise); its artifacts decoded to bytes."""
        path = self.path(k)
        if not os.path.lexists(path):
            raise Miss(NOT_STORED)
        try:
            raw = safefs.read_file(path, max_bytes=MAX_ENTRY_BYTES, what="cell store entry")
        except (BadInput, OSError) as e:
            raise Miss(str(e)) from None
        return _decode(raw, path, k, self.secret)

    def serve(self, spec: CellSpec, ctx: Context, max_age_days: float) -> CellResult:
        """The stored result of this cell, checked against it (Miss: pay for it)."""
        k = key(spec, ctx)
        entry = self.read(k)
        if entry["material"] != material(spec, ctx):
            raise Miss(f"{self.path(k)}: its key material is not this cell's (rule: content address)")
        row = entry["row"]
        expected = {"task": spec.task.id, "arm": spec.arm.name, "run": spec.run, "side": spec.side,
                    "skills_digest": spec.skills_digest, "overlay_digest": spec.overlay_digest,
                    "task_binding_digest": spec.task.binding_digest, "base_commit": spec.base_commit,
                    "model": spec.model.name, "backend": spec.model.backend, "effort": spec.model.effort,
                    "simulated": spec.model.simulated, "slot": spec.slot if spec.side == "candidate" else None,
                    "control_for": spec.control_for}
        wrong = sorted(f for f in IDENTITY if row.get(f) != expected[f])
        if wrong:
            raise Miss(f"{self.path(k)}: its row is of another cell ({', '.join(wrong)} differ) (rule: identity)")
        if not storable(row):
            raise Miss(f"{self.path(k)}: holds a {row['error_kind']} row, never served (rule: valid measurements)")
        recorded = _moment(row["recorded_at"], self.path(k))
        now = _now()
        if recorded > now + timedelta(minutes=5):
            raise Miss(f"{self.path(k)}: recorded at {row['recorded_at']}, in the future (rule: no future evidence)")
        if now - recorded > timedelta(days=max_age_days):
            raise Miss(f"{self.path(k)}: recorded at {row['recorded_at']}, older than gate.max_age_days "
                       f"{max_age_days:g} (rule: expiry)")
        return CellResult(row, entry["artifacts"])

    def gc(self, max_age_days: float, *, harness_digest: str | None = None) -> dict[str, int]:
        """Remove entries that can never be served again: damaged, expired, or (with `harness_digest`) measured by
        another harness; and temporary files a killed writer left. Nothing a live entry needs lives elsewhere."""
        counts = {"kept": 0, "damaged": 0, "expired": 0, "other_harness": 0, "temporary": 0}
        now = _now()
        for k in list(self.keys()):
            try:
                entry = self.read(k)
                recorded = _moment(entry["row"]["recorded_at"], self.path(k))
            except (Miss, BadInput):
                why: str | None = "damaged"
            else:
                why = ("expired" if now - recorded > timedelta(days=max_age_days)
                                    or recorded > now + timedelta(minutes=5)
                       else "other_harness" if harness_digest and entry["material"].get("harness") != harness_digest
                       else None)
            if why:
                self.path(k).unlink()
                counts[why] += 1
            else:
                counts["kept"] += 1
        base = self.root / ENTRIES
        if base.is_dir():
            for tmp in base.glob("*/.*.tmp"):
                if time.time() - tmp.lstat().st_mtime > 3600:  # a live writer renames within seconds
                    tmp.unlink()
                    counts["temporary"] += 1
        return counts


def _now() -> datetime:
    return datetime.now(UTC)


def _moment(text: Any, where: Path) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise Miss(f"{where}: recorded_at {str(text)[:40]!r} is not a time this harness reads (rule: entry format)"
                   ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def rel_paths(store: Store) -> list[str]:
    return [f"{ENTRIES}/{k[:2]}/{k}{SUFFIX}" for k in store.keys()]


# --- sharing through the DVC remote ------------------------------------------------------------------------------

def remote(repo: Path, name: str | None, command: str) -> tuple[Any, str]:
    """The filesystem and base path of the project's DVC remote (its credentials and config, as `dvc push` uses
    them); the store lives in `skillevo-cells/` beside DVC's own directories there."""
    from dvc.exceptions import DvcException  # noqa: PLC0415 - DVC is slow to import; only push and pull need it
    from dvc.repo import Repo  # noqa: PLC0415

    try:
        with Repo(str(repo)) as dvc_repo:
            found = dvc_repo.cloud.get_remote(name, command)
    except DvcException as e:
        raise BrokenEnvironment(f"{repo}: no usable DVC remote ({e}); `dvc remote add -d NAME URL` (rule: a remote "
                                "to share through)") from None
    return found.fs, found.fs.join(found.path, REMOTE_DIR)


def _remote_entries(fs: Any, base: str) -> set[str]:
    if not fs.exists(base):
        return set()
    names = set()
    for path in fs.find(base):
        rel = fs.relpath(path, base)
        parts = rel.split("/")
        if len(parts) == 3 and parts[0] == ENTRIES and parts[2].endswith(SUFFIX) and parts[2][:2] == parts[1]:
            names.add(rel)
    return names


def encode(k: str, entry: Mapping[str, Any], secret: bytes | None) -> bytes:
    """An entry's bytes: the format and the MAC of its key and body under `secret` on one line, then the body."""
    body = gzip.compress(canonical_json(entry), mtime=0)
    return MAGIC + (UNKEYED if secret is None else mac_of_bytes(secret, k.encode(), body).encode()) + b"\n" + body


def _body(raw: bytes, path: Path, k: str, secret: bytes | None) -> bytes:
    """The gzip body of an entry whose first line is this format's and, under `secret`, whose MAC verifies on the
    stored bytes: nothing is decompressed or parsed before (a forged entry could be built to expand or to parse
    slowly)."""
    head, _, body = raw.partition(b"\n")
    if not head.startswith(MAGIC) or len(head) != len(MAGIC) + len(UNKEYED):
        raise Miss(f"{path}: not a {FORMAT} entry (an older format, or not an entry) (rule: entry format)")
    mac = head[len(MAGIC):]
    if secret is not None and not hmac.compare_digest(mac, mac_of_bytes(secret, k.encode(), body).encode()):
        raise Miss(f"{path}: not authenticated under this team's key {KEY_ENV} (forged, edited, renamed, or written "
                   "without it) (rule: authenticated entries)")
    return body


def _decode(raw: bytes, path: Path, k: str, secret: bytes | None) -> dict[str, Any]:
    """An entry's bytes, checked whole: authenticated under `secret` when there is one (before anything is
    parsed), what it says it is, under the key it is named by (Miss otherwise)."""
    body = _body(raw, path, k, secret)
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(body)) as z:
            data = z.read(MAX_EXPANDED_BYTES + 1)
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise Miss(f"{path}: not a gzip file ({e}) (rule: entry format)") from None
    if len(data) > MAX_EXPANDED_BYTES:
        raise Miss(f"{path}: expands beyond {MAX_EXPANDED_BYTES} bytes (rule: entry size)")
    try:
        entry = documents.parse_json(data, str(path))
    except BadInput as e:
        raise Miss(str(e)) from None
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("key") != k:
        raise Miss(f"{path}: not a {FORMAT} entry for key {k} (rule: entry format)")
    if not isinstance(entry.get("material"), dict) or sha256_json(entry["material"]) != k:
        raise Miss(f"{path}: its key material does not hash to its key (rule: content address)")
    try:
        row: dict[str, Any] = validate(entry.get("row"), "result-row", f"{path}: row")  # an object, by the schema
        check_row(row, f"{path}: row")
    except BadInput as e:
        raise Miss(str(e)) from None
    _moment(row["recorded_at"], path)
    arts = entry.get("artifacts")
    if not isinstance(arts, dict) or set(arts) != _artifact_paths(row):
        raise Miss(f"{path}: its artifacts are not exactly the transcripts and patch its row names "
                   "(rule: artifacts)")
    decoded = {}
    for rel, text in arts.items():
        try:
            decoded[rel] = base64.b64decode(text, validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise Miss(f"{path}: artifact {rel} is not base64 (rule: artifacts)") from None
    metas = [*row["transcripts"], *([row["patch"]] if row["patch"] else [])]
    for meta in metas:
        data_ = decoded[meta["path"]]
        if len(data_) != meta["bytes"] or sha256_bytes(data_) != meta["sha256"]:
            raise Miss(f"{path}: artifact {meta['path']} does not match its row (rule: artifacts)")
    try:  # the same check the gate makes on a whole side, made before a row is served
        check_row_transcripts(row, path, f"{path}: row", lambda meta: decoded[meta["path"]])
    except BadInput as e:
        raise Miss(str(e)) from None
    return {**entry, "artifacts": decoded}


def push(store: Store, fs: Any, base: str, *, quiet: bool = False) -> tuple[int, int]:
    """Upload the entries the remote does not have and that verify under the team key (entries never change once
    written); without a key nothing is sent, since no teammate could vouch for it. (uploaded, held back)"""
    missing = sorted(set(rel_paths(store)) - _remote_entries(fs, base))
    sent = 0
    for rel in tqdm(missing if store.secret is not None else [], desc="cells push", unit="entry", disable=quiet,
                    file=sys.stderr):
        try:
            store.read(rel.rsplit("/", 1)[1].removesuffix(SUFFIX))
        except Miss:
            continue
        fs.makedirs(fs.parent(fs.join(base, rel)), exist_ok=True)
        fs.put_file(str(store.root / rel), fs.join(base, rel))
        sent += 1
    return sent, len(missing) - sent


def pull(store: Store, fs: Any, base: str, *, quiet: bool = False) -> tuple[int, int]:
    """Download the entries this store lacks; one that is not what its name says or does not verify under the team
    key is dropped, and without a key every one is. (fetched, dropped)"""
    have = set(rel_paths(store))
    wanted = sorted(_remote_entries(fs, base) - have)
    if store.secret is None:
        return 0, len(wanted)
    fetched = dropped = 0
    for rel in tqdm(wanted, desc="cells pull", unit="entry", disable=quiet, file=sys.stderr):
        k = rel.rsplit("/", 1)[1].removesuffix(SUFFIX)
        remote, dest = fs.join(base, rel), store.path(k)
        try:  # checked before it lands: a bench beside the pull never sees an entry that is not what it says
            if fs.size(remote) > MAX_ENTRY_BYTES:
                raise Miss(f"{rel}: larger than {MAX_ENTRY_BYTES} bytes (rule: entry size)")
            raw = fs.cat_file(remote)
            _decode(raw, dest, k, store.secret)
        except Miss as e:
            dropped += 1
            print(f"cells pull: dropped {rel}: {e}", file=sys.stderr)
            continue
        safefs.write_atomic(dest, raw)  # the project's one atomic writer, as put() uses
        fetched += 1
    return fetched, dropped
