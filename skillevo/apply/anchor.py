"""The trust anchor of a promotion: what DVC recorded for the pipeline's outputs, in dvc.lock and its cache.

Before apply re-reads anything, each output it depends on (promotion.json, the freeze, both bench sides) must
hold exactly the bytes `dvc repro` recorded: a file by its md5 in dvc.lock, a directory file by file through the
`.dir` listing in the DVC cache. A hand-edited promotion.json, a forged row or transcript, or a side copied in
from elsewhere no longer matches. What this does not stop: someone who rewrites dvc.lock, the cache and every
output together (docs/security.md).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from skillevo.apply.common import ApplyRefused
from skillevo.files import documents, dvcfiles, safefs
from skillevo.files.errors import BadInput

LOCK = dvcfiles.LOCK
MAX_OUTPUT_BYTES = 1 << 30
_RULE = "(rule: outputs match dvc.lock)"


def _md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _recorded(repo: Path) -> dict[str, str]:
    """Every output path dvc.lock records, with its md5 (`<md5>.dir` for a directory)."""
    lock = repo / LOCK
    try:
        stages = dvcfiles.lock_stages(repo)
    except BadInput as e:
        raise ApplyRefused(f"{str(e).removesuffix(' (rule: DVC lock format)')} {_RULE}") from None
    if stages is None:
        raise ApplyRefused(f"{lock}: missing; apply checks the pipeline's outputs against what DVC recorded for them "
                           f"(run `dvc repro`; commit dvc.lock) {_RULE}")
    outs: dict[str, str] = {}
    for stage in stages.values():
        for out in (stage.get("outs") or []) if isinstance(stage, dict) else []:
            if isinstance(out, dict) and isinstance(out.get("path"), str) and isinstance(out.get("md5"), str):
                outs[out["path"]] = out["md5"]
    return outs


def _listing(repo: Path, digest: str, where: str) -> dict[str, str]:
    path = dvcfiles.object_path(repo, digest)
    try:
        entries: Any = documents.load_json(path, what="DVC directory listing")
    except ApplyRefused:
        raise
    except Exception as e:  # noqa: BLE001 - any failure to read the anchor is a refusal with the reason
        raise ApplyRefused(f"{where}: DVC's listing {path} cannot be read ({e}); run `dvc pull` or `dvc repro` "
                           f"{_RULE}") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and {"md5", "relpath"} <= set(e) for e in entries):
        raise ApplyRefused(f"{path}: not a DVC directory listing {_RULE}")
    return {e["relpath"]: e["md5"] for e in entries}


def check(repo: Path, outputs: list[Path]) -> None:
    """Refuse unless each output (a file or a directory below `repo`) holds what dvc.lock recorded for it."""
    recorded = _recorded(repo)
    for output in outputs:
        rel = Path(os.path.relpath(output, repo)).as_posix()
        where = f"{output}"
        if rel not in recorded:
            raise ApplyRefused(f"{where}: dvc.lock records no output {rel} {_RULE}")
        digest = recorded[rel]
        if digest.endswith(".dir"):
            files = safefs.read_tree(output, max_file_bytes=MAX_OUTPUT_BYTES, max_total_bytes=MAX_OUTPUT_BYTES)
            now = {name: _md5(data) for name, data in files.items()}
            then = _listing(repo, digest, where)
            for name in sorted(set(now) | set(then)):
                if now.get(name) != then.get(name):
                    state = "is new" if name not in then else "is missing" if name not in now else "changed"
                    raise ApplyRefused(f"{output / name}: {state} since `dvc repro` recorded {rel} in dvc.lock {_RULE}")
        else:
            data = safefs.read_file(output, max_bytes=MAX_OUTPUT_BYTES, what="pipeline output")
            if _md5(data) != digest:
                raise ApplyRefused(f"{where}: changed since `dvc repro` recorded it in dvc.lock {_RULE}")
