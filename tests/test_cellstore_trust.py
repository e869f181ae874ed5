"""What the cell store serves, it can vouch for: under a team key (SKILLEVO_CELL_KEY) every entry carries an HMAC
of its key and stored bytes, checked before anything is decompressed or parsed, and an entry that is forged,
edited, written without the key, breaks a row rule or holds a time this harness cannot read is a miss (paid again
and replaced), never a refusal of the bench."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime

import pytest

from skillevo.bench import CellResult, cellstore
from skillevo.files import digests
from skillevo.files.digests import canonical_json, sha256_bytes, sha256_json
from skillevo.files.errors import BrokenEnvironment
from tests import gate_rows

SECRET = b"team-secret-0123456789abcdef"


def _cell(run: int = 1, **fields) -> tuple[str, dict, CellResult]:
    """A whole, valid cell as the bench stores it: its key, key material and result."""
    row = gate_rows.row("greet", "work", run, recorded_at=datetime.now(UTC).isoformat(timespec="seconds"), **fields)
    data = gate_rows.transcript(row)
    row["transcripts"] = [{"path": f"transcripts/greet-{run}.jsonl", "sha256": sha256_bytes(data), "bytes": len(data)}]
    mat = {"cell": f"greet/work/{run}"}
    return sha256_json(mat), mat, CellResult(row, {row["transcripts"][0]["path"]: data})


def _raw(store: cellstore.Store, k: str) -> dict:
    """A stored entry's JSON: the body after its first line (the format and the MAC)."""
    return json.loads(gzip.decompress(store.path(k).read_bytes().partition(b"\n")[2]))


def _rewrite(store: cellstore.Store, k: str, entry: dict) -> None:
    """The entry's body replaced under its old first line: an edit made without the key."""
    head = store.path(k).read_bytes().partition(b"\n")[0]
    store.path(k).write_bytes(head + b"\n" + gzip.compress(canonical_json(entry)))


def test_a_keyed_store_serves_only_entries_that_verify_under_its_key(tmp_path):
    store = cellstore.Store(tmp_path / "store", SECRET)
    k, mat, result = _cell()
    assert store.put(k, mat, result) is True
    assert store.read(k)["row"]["resolved"] is True and store.path(k).read_bytes().startswith(cellstore.MAGIC)
    flipped = _raw(store, k)  # the resolution flipped, consistently with every other field and the rules
    flipped["row"].update(resolved=False, oracle_passed=False, error_kind="oracle-failed", error_detail="x")
    _rewrite(store, k, flipped)
    with pytest.raises(cellstore.Miss, match=r"not authenticated under this team's key SKILLEVO_CELL_KEY .*"
                                             r"\(rule: authenticated entries\)"):
        store.read(k)
    for secret in (None, b"another-team-secret-0123"):  # written without the key, or under another team's
        other = cellstore.Store(tmp_path / f"other-{secret is None}", secret)
        other.put(k, mat, result)
        store.path(k).write_bytes(other.path(k).read_bytes())
        with pytest.raises(cellstore.Miss, match="rule: authenticated entries"):
            store.read(k)
    assert store.put(k, mat, result) is True  # a miss is replaced by the cell paid again
    assert store.read(k)["row"]["resolved"] is True


@pytest.mark.parametrize("how, rule", [
    ("resolved without its checks", "rule: resolved"),
    ("a time Python cannot read", "rule: entry format"),
])
def test_an_entry_that_breaks_a_row_rule_is_a_miss_not_a_refusal(tmp_path, how, rule):
    """Both were served (and the side refused later at load, on every run) or made every bench refuse (exit 2)."""
    store = cellstore.Store(tmp_path / "store")
    k, mat, result = _cell()
    store.put(k, mat, result)
    entry = _raw(store, k)
    if how == "resolved without its checks":
        entry["row"]["verify_passed"] = False
    else:
        entry["row"]["recorded_at"] = "2026-12-01t10:00:00z"  # valid RFC 3339, refused by fromisoformat
    _rewrite(store, k, entry)
    with pytest.raises(cellstore.Miss, match=rule):
        store.read(k)
    assert store.gc(90)["damaged"] == 1 and list(store.keys()) == []


@pytest.mark.parametrize("how", ["forged", "renamed", "an older format"])
def test_an_entry_is_authenticated_on_its_bytes_before_anything_is_decompressed_or_parsed(tmp_path, monkeypatch,
                                                                                           how):
    """A remote entry was parsed before its MAC was checked: 32 MiB of forged JSON took 892 MB to refuse. Now the
    MAC of the entry's key and stored bytes is checked first, so a forged, renamed or old-format entry is refused
    with the gzip reader and the JSON parser never called."""
    store = cellstore.Store(tmp_path / "store", SECRET)
    k, mat, result = _cell()
    k2, mat2, result2 = _cell(run=2)
    store.put(k, mat, result)
    store.put(k2, mat2, result2)
    raw = store.path(k).read_bytes()
    if how == "forged":  # a body that would expand to 512 MiB under the old first line
        bomb = gzip.compress(b" " * (512 << 20), compresslevel=9)
        store.path(k).write_bytes(raw.partition(b"\n")[0] + b"\n" + bomb)
    elif how == "renamed":  # another cell's entry, whole and authentic, filed under this key
        store.path(k).write_bytes(store.path(k2).read_bytes())
    else:  # the format before this one: gzip JSON with the MAC inside, which had to be parsed to be checked
        store.path(k).write_bytes(raw.partition(b"\n")[2])

    def never(*args, **kwargs):
        raise AssertionError("decompressed or parsed before the MAC was checked")
    monkeypatch.setattr(cellstore.gzip, "GzipFile", never)
    monkeypatch.setattr(cellstore.documents, "parse_json", never)
    rule = "rule: entry format" if how == "an older format" else "rule: authenticated entries"
    with pytest.raises(cellstore.Miss, match=rule):
        store.read(k)
    monkeypatch.undo()
    assert store.read(k2)["row"]["run"] == 2  # an authentic entry still reads


def test_the_team_key_comes_from_the_environment_and_a_short_one_is_refused_unechoed(monkeypatch):
    monkeypatch.delenv(cellstore.KEY_ENV, raising=False)
    assert digests.team_key() is None
    monkeypatch.setenv(cellstore.KEY_ENV, "short-value")
    with pytest.raises(BrokenEnvironment, match="shorter than 16 characters") as refused:
        digests.team_key()
    assert "short-value" not in str(refused.value)
    monkeypatch.setenv(cellstore.KEY_ENV, SECRET.decode())
    assert digests.team_key() == SECRET
