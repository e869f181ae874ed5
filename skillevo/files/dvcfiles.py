"""Where DVC keeps what skillevo reads of it: the cache (its content-addressed objects and its run-cache) and the
lock file. The cache's place is DVC's to say: `cache.dir` may be set in .dvc/config, config.local, or the user's
or the system's DVC config (a cache shared between checkouts), so it is asked of DVC itself."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from skillevo.files import documents
from skillevo.files.errors import BadInput

LOCK = "dvc.lock"


def dvc_root(start: Path) -> Path:
    """The DVC project `start` is in: the nearest directory at or above it holding .dvc/ (a pipeline may live in a
    folder of the repository, its dvc.yaml and dvc.lock there, .dvc/ at the top)."""
    for candidate in (start, *Path(start).resolve().parents):
        if (Path(candidate) / ".dvc").is_dir():
            return Path(candidate)
    raise FileNotFoundError(f"{start}: not in a DVC project (no .dvc/ here or above)")


def cache_dir(repo: Path) -> Path:
    """The cache directory DVC uses for the project `repo` is in."""
    root = dvc_root(repo)
    from dvc.repo import Repo  # DVC's import costs about a second: only the stages that read its cache pay it

    with Repo(str(root), uninitialized=True) as project:  # uninitialized: no git needed to say where the cache is
        return Path(project.cache.local_cache_dir)


def objects(repo: Path) -> Path:
    """The directory of content-addressed objects (DVC 3: `files/md5` below the cache)."""
    return cache_dir(repo) / "files" / "md5"


def object_path(repo: Path, md5: str) -> Path:
    """An object's file; a directory's `<md5>.dir` is its JSON listing."""
    return objects(repo) / md5[:2] / md5[2:]


def run_cache(repo: Path) -> Path:
    return cache_dir(repo) / "runs"


def lock_stages(repo: Path) -> dict[str, Any] | None:
    """dvc.lock's stages by name; None when there is no lock file. BadInput when it is not a lock file."""
    lock = repo / LOCK
    if not os.path.lexists(lock):
        return None
    doc = documents.load_yaml(lock, what="DVC lock file")
    stages = doc.get("stages") if isinstance(doc, dict) else None
    if not isinstance(stages, dict):
        raise BadInput(f"{lock}: not a DVC lock file (no stages) (rule: DVC lock format)")
    return stages
