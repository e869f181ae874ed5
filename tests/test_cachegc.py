"""`make gc` against a real DVC project: it frees what nothing can serve, and never leaves the run-cache pointing at
a deleted object, which `dvc gc -w` does (the next repro of that configuration then runs, and pays, again)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skillevo.ops import gc as cachegc

DVC = str(Path(sys.executable).with_name("dvc"))
# the stage's command is one line: the backslash continues the string, it adds no newline to the YAML
STAGE = """stages:
  make:
    cmd: python3 -c "import yaml; x = yaml.safe_load(open('params.yaml'))['x']; \
open('out.txt', 'w').write(str(x) * 1000)" && echo ran >> ran.log
    params: [x]
    outs: [out.txt]
"""


def _dvc(repo: Path, *args: str) -> str:
    done = subprocess.run([DVC, *args], cwd=repo, capture_output=True, text=True, env={**os.environ,
                                                                                        "DVC_NO_ANALYTICS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def _runs(repo: Path) -> int:
    log = repo / "ran.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def _project(tmp_path: Path, *, shared_cache: Path | None = None) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    _dvc(repo, "init", "-q")
    if shared_cache:
        _dvc(repo, "cache", "dir", str(shared_cache))
    (repo / "dvc.yaml").write_text(STAGE)
    for x in (1, 2, 1):
        (repo / "params.yaml").write_text(f"x: {x}\n")
        _dvc(repo, "repro")
    assert _runs(repo) == 2
    return repo


@pytest.fixture
def project(tmp_path) -> Path:
    """A DVC project whose one stage ran for x=1, then x=2, then x=1 again (served by the run-cache)."""
    return _project(tmp_path)


def _switch_and_repro(repo: Path, x: int) -> int:
    before = _runs(repo)
    (repo / "params.yaml").write_text(f"x: {x}\n")
    _dvc(repo, "repro")
    return _runs(repo) - before


def test_dvc_gc_alone_makes_the_next_repro_pay_again(project):
    """The failure `make gc` exists for: shown on the same project, so the test below could fail."""
    _dvc(project, "gc", "-w", "-f")
    assert _switch_and_repro(project, 2) == 1


def test_gc_keeps_what_the_run_cache_can_serve(project):
    (project / ".dvc/cache/files/md5/ff").mkdir(parents=True)
    (project / ".dvc/cache/files/md5/ff" / ("0" * 30)).write_bytes(b"an object nothing uses")
    report = cachegc.collect(project, 90)
    assert (report.removed_objects, report.kept_entries, report.dangling_entries) == (1, 2, 0)
    assert _switch_and_repro(project, 2) == 0  # served by the run-cache: its objects are still there
    assert _switch_and_repro(project, 1) == 0


def test_gc_removes_run_cache_entries_that_point_at_missing_objects_or_expired(project):
    entries = sorted((project / ".dvc/cache/runs").glob("*/*/*"))
    assert len(entries) == 2
    old = time.time() - 91 * 86400
    os.utime(entries[0], (old, old))
    report = cachegc.collect(project, 90)
    assert report.expired_entries == 1 and report.kept_entries == 1
    assert not entries[0].exists() and entries[1].exists()
    # the expired configuration's output is gone with its entry; the workspace's stays
    assert report.removed_objects == 1
    # an entry whose object vanished another way is removed rather than left to fail a repro
    for obj in (project / ".dvc/cache/files/md5").glob("*/*"):
        obj.unlink()
    assert cachegc.collect(project, 90).dangling_entries == 1
    assert list((project / ".dvc/cache/runs").glob("*/*/*")) == []


def test_dry_run_removes_nothing(project):
    before = sorted(p for p in (project / ".dvc/cache").rglob("*"))
    (project / ".dvc/cache/files/md5/ff").mkdir(parents=True)
    stray = project / ".dvc/cache/files/md5/ff" / ("1" * 30)
    stray.write_bytes(b"x")
    report = cachegc.collect(project, 90, dry_run=True)
    assert report.removed_objects == 1 and stray.exists()
    assert sorted(p for p in (project / ".dvc/cache").rglob("*")) == sorted([*before, stray.parent, stray])


def test_gc_frees_a_cache_shared_through_cache_dir(tmp_path):
    """`dvc cache dir` outside the project (a cache shared by checkouts): gc collects there, where DVC keeps it."""
    shared = tmp_path / "shared-cache"
    repo = _project(tmp_path, shared_cache=shared)
    assert not (repo / ".dvc/cache/files").exists() and (shared / "runs").is_dir()
    stray = shared / "files/md5/ff" / ("2" * 30)
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_bytes(b"an object nothing uses")
    report = cachegc.collect(repo, 90)
    assert (report.removed_objects, report.kept_entries) == (1, 2) and not stray.exists()
    assert _switch_and_repro(repo, 2) == 0  # what the run-cache serves stayed
