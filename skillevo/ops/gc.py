"""`make gc`: free DVC's cache without leaving DVC's run-cache or the cell store pointing at missing objects.

`dvc gc -w` keeps only the objects the workspace uses and leaves every run-cache entry that points at what it
deleted: the next `dvc repro` of such a configuration finds the entry, cannot check its outputs out, and runs
the stage again, paid sessions and all. This gc keeps the objects of the workspace (dvc.lock and .dvc files)
and of every run-cache entry that can still be served — recorded within `gate.max_age_days`, since an older
result is expired for the gate anyway — removes run-cache entries that are older or already point at a missing
object, and only then deletes every other object. The cell store keeps its artifacts inside its entries, so
nothing it serves lives in DVC's cache; its own gc drops only entries that can never be served again.

    python -m skillevo.ops.gc [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillevo.bench import cellstore
from skillevo.core import layout, stage
from skillevo.files import digests, documents, dvcfiles
from skillevo.files.errors import BrokenEnvironment

DAY_S = 86400


@dataclass
class Report:
    kept_objects: int = 0
    removed_objects: int = 0
    removed_bytes: int = 0
    kept_entries: int = 0
    expired_entries: int = 0
    dangling_entries: int = 0
    cells: dict[str, int] = field(default_factory=dict)

    def summary(self, dry: bool) -> str:
        verb = "would remove" if dry else "removed"
        cells = ", ".join(f"{n} {what.replace('_', ' ')}" for what, n in self.cells.items())
        return (f"gc: kept {self.kept_objects} objects for the workspace and {self.kept_entries} run-cache entries; "
                f"{verb} {self.removed_objects} objects ({self.removed_bytes >> 20} MiB) and "
                f"{self.expired_entries + self.dangling_entries} run-cache entries ({self.expired_entries} expired, "
                f"{self.dangling_entries} pointing at missing objects); cell store: {cells}")


def _object(files: Path, md5: str) -> Path:
    return files / md5[:2] / md5[2:]


def _outs(entry: Any) -> Iterator[str]:
    """The output hashes a lock entry (a dvc.lock stage, a run-cache entry, a .dvc file) records."""
    for out in (entry or {}).get("outs") or []:
        if isinstance(out, dict) and isinstance(out.get("md5"), str):
            yield out["md5"]


def _closure(files: Path, hashes: Iterable[str]) -> tuple[set[str], bool]:
    """Every object these output hashes need (a directory's manifest and its files), and whether all are there."""
    needed, whole = set(), True
    for md5 in hashes:
        needed.add(md5)
        path = _object(files, md5)
        if not path.is_file():
            whole = False
            continue
        if md5.endswith(".dir"):
            try:
                listing = json.loads(path.read_bytes())
            except ValueError:
                whole = False
                continue
            for item in listing:
                needed.add(item["md5"])
                whole = whole and _object(files, item["md5"]).is_file()
    return needed, whole


def _lock_entries(repo: Path) -> Iterator[Any]:
    yield from (dvcfiles.lock_stages(repo) or {}).values()
    for tracked in repo.rglob("*.dvc"):
        if ".dvc" not in tracked.relative_to(repo).parts[:-1] and tracked.is_file():
            yield documents.load_yaml(tracked, what="DVC file")


def collect(repo: Path, max_age_days: float, *, dry_run: bool = False, store: Path | None = None) -> Report:
    """Collect the cache of the DVC project at `repo` (and the cell store, when given)."""
    if not (repo / ".dvc").is_dir():
        raise BrokenEnvironment(f"{repo}: not a DVC project (no .dvc/) (rule: gc runs in the project)")
    files, runs = dvcfiles.objects(repo), dvcfiles.run_cache(repo)  # cache.dir honoured: a shared cache too
    report = Report()
    keep, _ = _closure(files, (md5 for entry in _lock_entries(repo) for md5 in _outs(entry)))
    report.kept_objects = len(keep)
    now = time.time()
    for entry_file in sorted(runs.glob("*/*/*")) if runs.is_dir() else []:
        needed, whole = _closure(files, _outs(documents.load_yaml(entry_file, what="run-cache entry")))
        expired = now - entry_file.stat().st_mtime > max_age_days * DAY_S
        if whole and not expired:
            keep |= needed
            report.kept_entries += 1
            continue
        if expired:
            report.expired_entries += 1
        else:
            report.dangling_entries += 1
        if not dry_run:
            entry_file.unlink()
            for parent in (entry_file.parent, entry_file.parent.parent):
                if not any(parent.iterdir()):
                    parent.rmdir()
    for obj in sorted(files.glob("*/*")) if files.is_dir() else []:
        md5 = obj.parent.name + obj.name
        if obj.is_file() and md5 not in keep and not obj.name.startswith("."):
            report.removed_objects += 1
            report.removed_bytes += obj.stat().st_size
            if not dry_run:
                obj.unlink()
    if store is not None:
        cells = cellstore.Store(store, digests.team_key())
        report.cells = ({"entries": sum(1 for _ in cells.keys())} if dry_run else cells.gc(max_age_days))
    return report


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillevo.ops.gc", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repo", type=Path, default=Path("."), help="[%(default)s]")
    p.add_argument("--params", type=Path, default=layout.PARAMS, help="gate.max_age_days [%(default)s]")
    p.add_argument("--store", type=Path, default=layout.CELL_STORE, help="the cell store [%(default)s]")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    return p


def _run(args: argparse.Namespace) -> str:
    params = stage.load_params("gc", argparse.Namespace(params=args.params))
    return collect(args.repo, params.gate.max_age_days, dry_run=args.dry_run,
                   store=args.repo / args.store).summary(args.dry_run)


def main(argv: list[str] | None = None) -> int:
    return stage.main("gc", _parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
