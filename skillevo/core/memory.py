"""The generations' memory of rejected candidates: previous/memory/rejected.json, its normal form, and the match.

Every candidate the gate did not promote against the current incumbent is one entry (newest first): the
generation that measured it, the incumbent family's digest, the overlay's files and their unified diff against
that incumbent, and the gate's decision per arm with its reasons. `make evolve` writes it (skillevo.ops.generations
rebuilds it from generations/ at the start of each generation); the evidence stage hands it to the proposer;
freeze refuses an overlay whose normalised diff equals one rejected for futility (`keep_incumbent` on any arm)
against the same incumbent. The normal form is docs/formats.md, "Rejected candidates": it is what decides that
two overlays are the same change, so one reformatted byte cannot pass a rejected change off as a new one.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from skillevo.core import layout
from skillevo.files import documents, safefs
from skillevo.files.digests import sha256_bytes
from skillevo.files.schemas import validate

SCHEMA = "rejected"
REJECTED_FILE = "rejected.json"  # in previous/memory/ and in the evidence bundle
FUTILE = "keep_incumbent"  # the gate measured the candidate and found it no better: it may not come back
MAX_MEMORY_BYTES = 32 << 20

# Characters that render as nothing: format characters (zero-width space and joiners, BOM, soft hyphen, bidi
# controls), variation selectors, the combining grapheme joiner and the Hangul fillers.
_INVISIBLE_EXTRA = frozenset("\u034f\u115f\u1160\u3164\uffa0") | frozenset(map(chr, range(0xFE00, 0xFE10))) \
    | frozenset(map(chr, range(0xE0100, 0xE01F0)))
_BULLET = re.compile(r"^(?:[-*+\u2022\u2023\u2043\u2219\u25e6]|\d{1,9}[.)])\s+")
_EMPHASIS = re.compile(r"(?<![^\W_])[*_]+|[*_]+(?![^\W_])")  # runs of * or _ not between two letters/digits
_TRAILING_PUNCT = re.compile(r"[.,;:!]+$")


def _visible(ch: str) -> bool:
    if ch in _INVISIBLE_EXTRA:
        return False
    category = unicodedata.category(ch)
    return category != "Cf" and (category != "Cc" or ch.isspace())


def normal_lines(data: bytes | str) -> list[str]:
    """The text's normal form, one entry per non-blank line (docs/formats.md, "Rejected candidates")."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    text = "".join(ch for ch in unicodedata.normalize("NFKC", text) if _visible(ch))
    text = unicodedata.normalize("NFKC", text.casefold())
    out = []
    for line in text.splitlines():  # \n, \r\n, \r and the Unicode line and paragraph separators
        line = " ".join(line.split())
        line = _BULLET.sub("- ", line)
        marker, body = ("- ", line[2:]) if line.startswith("- ") else ("", line)
        body = _TRAILING_PUNCT.sub("", " ".join(_EMPHASIS.sub("", body).split()))
        if body or marker:
            out.append(marker + body if body else "-")
    return out


def normalised_diff(family: Mapping[str, bytes], family_executables: Collection[str], files: Mapping[str, bytes],
                    executables: Collection[str]) -> list[Any]:
    """What the overlay changes once both sides are in normal form: per changed file, its path, whether its execute
    bit flips, and each changed block as (start, end in the incumbent's normal lines, old lines, new lines)."""
    out: list[Any] = []
    for rel in sorted(files):
        a, b = normal_lines(family.get(rel, b"")), normal_lines(files[rel])
        blocks = [[i1, i2, a[i1:i2], b[j1:j2]]
                  for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
                  if op != "equal"]
        flips = (rel in family_executables) != (rel in executables)
        if blocks or flips:
            out.append([rel, flips, blocks])
    return out


def unified_diff(family: Mapping[str, bytes], files: Mapping[str, bytes], family_executables: Collection[str] = (),
                 executables: Collection[str] = ()) -> str:
    """The overlay as `git diff` would show it against the incumbent (3 lines of context)."""
    parts = []
    for rel in sorted(files):
        old = family.get(rel, b"").decode("utf-8", errors="replace").splitlines(keepends=True)
        new = files[rel].decode("utf-8", errors="replace").splitlines(keepends=True)
        was, now = rel in family_executables, rel in executables
        if was != now:
            parts.append(f"diff --git a/{rel} b/{rel}\nold mode {layout.mode_of(rel, family_executables)}\n"
                         f"new mode {layout.mode_of(rel, executables)}\n")
        for line in difflib.unified_diff(old, new, f"a/{rel}", f"b/{rel}", n=3):
            parts.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(parts)


def entry(generation: int, incumbent_digest: str, family: Mapping[str, bytes], family_executables: Collection[str],
          files: Mapping[str, bytes], executables: Collection[str], decisions: Iterable[Mapping[str, Any]]
          ) -> dict[str, Any]:
    """One rejected candidate, as rejected.json records it."""
    return {
        "generation": generation,
        "incumbent_digest": incumbent_digest,
        "overlay_digest": layout.tree_digest(files, executables),
        "files": [{"path": rel, "text": safefs.decode(data, rel, "overlay file", allow_nul=False),
                   "executable": rel in executables} for rel, data in sorted(files.items())],
        "diff": unified_diff(family, files, family_executables, executables),
        "decisions": [{"candidate_arm": d["candidate_arm"], "decision": d["decision"], "reasons": list(d["reasons"])}
                      for d in decisions],
    }


def dump(entries: Iterable[dict[str, Any]], source: str = "rejected.json") -> bytes:
    """The file, newest first; validated before it is written so a reader never meets a file we refuse."""
    doc = {"schema_version": 1, "candidates": sorted(entries, key=lambda e: -e["generation"])}
    return documents.dump_json(validate(doc, SCHEMA, source))


def load(path: str | Path) -> tuple[list[dict[str, Any]], str] | None:
    """(entries newest first, the file's sha256), or None when there is no memory yet (a cold start)."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return None
    data = safefs.read_file(path, max_bytes=MAX_MEMORY_BYTES, what="rejected candidates")
    doc = validate(documents.parse_json(safefs.decode(data, str(path), "rejected candidates"), str(path)), SCHEMA, path)
    return sorted(doc["candidates"], key=lambda e: -e["generation"]), sha256_bytes(data)


def futile(candidate: Mapping[str, Any]) -> bool:
    """Rejected because the gate found it no better on some arm, not merely for want of evidence."""
    return any(d["decision"] == FUTILE for d in candidate["decisions"])


def overlay_of(candidate: Mapping[str, Any]) -> tuple[dict[str, bytes], set[str]]:
    return ({f["path"]: f["text"].encode() for f in candidate["files"]},
            {f["path"] for f in candidate["files"] if f["executable"]})


def futile_match(family: Mapping[str, bytes], family_executables: Collection[str], files: Mapping[str, bytes],
                 executables: Collection[str], candidates: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The newest candidate rejected for futility against this very incumbent whose normalised diff is the
    overlay's, or None. Both diffs are taken against the incumbent in hand, which the digest proves is the one
    the earlier candidate was measured against."""
    digest = layout.tree_digest(family, family_executables)
    mine = normalised_diff(family, family_executables, files, executables)
    for candidate in candidates:
        if candidate["incumbent_digest"] != digest or not futile(candidate):
            continue
        theirs, their_executables = overlay_of(candidate)
        if normalised_diff(family, family_executables, theirs, their_executables) == mine:
            return candidate
    return None
