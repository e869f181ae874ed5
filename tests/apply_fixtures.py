"""A whole pipeline's outputs for apply, in a throwaway git repository, each made by its real producer: skills
and a mirror committed, params.yaml, a real tasks directory (tests.bench_fixtures.make_mini), results/freeze
from skillevo.freeze, both bench sides as the bench writes them (rows bound to the real tasks, a transcript per
row), a promotion.json the real gate code built from those sides read back, and dvc.lock with DVC's cache
recording every output, in DVC's on-disk format (`record`)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from skillevo.apply import ApplyPaths
from skillevo.core import config, tasks
from skillevo.core.results import load_side
from skillevo.files import dvcfiles
from skillevo.freeze import freeze
from skillevo.gate import build_promotion, write_promotion
from tests.bench_fixtures import make_mini
from tests.gate_rows import CANDIDATE, INCUMBENT, bench, controls, designed, runs, write_side

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)  # when the gate decided, and when every row was recorded
APPLY_AT = NOW + timedelta(days=1)
MODEL_NAME = "claude-sonnet-4-6"  # a pinned current id: params load without a warning
MIRRORS = [".claude/skills"]
ROOTS = ["skills", *MIRRORS]
ORIGINAL = {
    "plan/SKILL.md": b"---\nname: plan\ndescription: Write a short implementation plan before any code changes.\n"
                     b"---\n# Plan\n\nWrite a plan.\n",
    "work/SKILL.md": b"---\nname: work\ndescription: Carry out a coding task in this repository.\n"
                     b"---\n# Work\n\nDo the work. Run the tests.\n",
}
OVERLAY = {
    "plan/SKILL.md": b"---\nname: plan\ndescription: Write a short implementation plan before any code changes.\n"
                     b"---\n# Plan\n\nWrite a short plan.\n",
    "work/SKILL.md": b"---\nname: work\ndescription: Carry out a coding task in this repository.\n"
                     b"---\n# Work\n\nDo the work. Run the tests once, in the foreground.\n",
}
DESTINATIONS = sorted(f"{root}/{rel}" for root in ROOTS for rel in OVERLAY)
# A candidate that also adds a reference file in a directory the skill does not have yet (params propose.allow:
# supporting-files): apply replaces four files and creates two, and the two directories they go in.
REFERENCE = "work/reference/checklist.md"
REFERENCE_BYTES = b"# Checklist\n\n- Run the tests once, in the foreground.\n- Read the failing test before editing.\n"
CREATING = {**OVERLAY, REFERENCE: REFERENCE_BYTES}
CREATED = sorted(f"{root}/{REFERENCE}" for root in ROOTS)
CREATED_DIRS = sorted(f"{root}/work/reference" for root in ROOTS)

# Per-run cost of each task (make_mini's tasks) on each side.
# Eight runs a task: the test by betting stakes a bounded part of its wealth per round, so even a halved cost
# needs some seven rounds to reach 1 / alpha (skillevo/stats/betting.py).
INCUMBENT_COSTS = {"greet": [1.0, 1.1, 0.9, 1.05] * 2, "cheat": [2.0, 2.1, 1.9, 2.0] * 2}
PROMOTING = {"greet": [0.5, 0.55, 0.45, 0.5] * 2, "cheat": [1.0, 1.05, 0.95, 1.0] * 2}
KEEPING = {"greet": [1.0, 1.1, 0.95, 1.05] * 2, "cheat": [2.0, 2.0, 2.1, 1.9] * 2}  # no improvement: keep_incumbent
# Two tasks of eight runs bound a resolution drop no tighter than 17 points (skillevo/stats), and are fewer than
# the heavy-tail minimum: the fixture's gate allows both.
GATE = {"max_resolution_drop_pct": 50, "min_total_runs": 1}

# What each stage's dvc.lock entry records (directories through the cache's `.dir` listing).
OUTPUTS = {
    "bench@incumbent": "results/bench-incumbent",
    "freeze": "results/freeze",
    "bench@candidate": "results/bench-candidate",
    "gate": "results/gate/promotion.json",
}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    result = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@invalid", *args],
                            capture_output=True, text=True, check=True, env=env)
    return result.stdout


def skill_file(destination: str) -> str:
    """`<root>/<skill>/<rest>` -> `<skill>/<rest>`."""
    root = next(r for r in ROOTS if destination.startswith(r + "/"))
    return destination.removeprefix(root + "/")


def tree_of(repo: Path) -> dict[str, object]:
    """Every entry below the skill roots, as exactly as a test can compare it: a file as (bytes, mode), a
    directory as ("dir", mode), a symlink as ("link", target)."""
    entries: dict[str, object] = {}
    for root in ROOTS:
        for path in sorted((repo / root).rglob("*")):
            rel, st = path.relative_to(repo).as_posix(), path.lstat()
            if path.is_symlink():
                entries[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                entries[rel] = ("dir", st.st_mode & 0o7777)
            else:
                entries[rel] = (path.read_bytes(), st.st_mode & 0o7777)
    return entries


def _md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _out_entry(repo: Path, rel: str) -> dict:
    """One `outs` entry as `dvc repro` writes it; a directory's listing goes to the cache as `<md5>.dir`."""
    path = repo / rel
    if not path.is_dir():
        data = path.read_bytes()
        return {"path": rel, "hash": "md5", "md5": _md5(data), "size": len(data)}
    files = sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    listing = [{"md5": _md5(p.read_bytes()), "relpath": p.relative_to(path).as_posix()} for p in files]
    text = json.dumps(sorted(listing, key=lambda e: e["relpath"])).encode()
    digest = _md5(text) + ".dir"
    cached = dvcfiles.object_path(repo, digest)
    cached.parent.mkdir(parents=True, exist_ok=True)
    if cached.exists():
        cached.chmod(0o644)
    cached.write_bytes(text)
    cached.chmod(0o444)
    return {"path": rel, "hash": "md5", "md5": digest, "size": sum(p.stat().st_size for p in files),
            "nfiles": len(files)}


def record(pipe: Pipeline) -> None:
    """Write dvc.lock and the DVC cache listings for every output as it is now, as if `dvc repro` had just
    (re-)run each stage; an output that does not exist is left out."""
    stages = {name: {"cmd": f"python -m skillevo.stages.{name.split('@')[0]}",
                     "outs": [_out_entry(pipe.repo, rel)]}
              for name, rel in OUTPUTS.items() if os.path.lexists(pipe.repo / rel)}
    (pipe.repo / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": stages}, sort_keys=False),
                                        encoding="utf-8")


@dataclass
class Pipeline:
    repo: Path
    paths: ApplyPaths
    manifest: dict
    promotion: dict

    def read(self) -> dict[str, bytes]:
        return {rel: (self.repo / rel).read_bytes() for rel in DESTINATIONS}

    def originals(self) -> dict[str, bytes]:
        return {rel: ORIGINAL[skill_file(rel)] for rel in DESTINATIONS}

    def applied(self) -> dict[str, bytes]:
        return {rel: OVERLAY[skill_file(rel)] for rel in DESTINATIONS}

    def leftovers(self) -> list[str]:
        """Temp files apply left beside a destination."""
        return sorted(str(p.relative_to(self.repo)) for root in ROOTS for p in (self.repo / root).rglob(".skillevo-*"))

    def tree(self) -> dict[str, object]:
        return tree_of(self.repo)

    def records(self) -> list[Path]:
        return sorted(self.paths.state_dir.glob("recovery-*.json"))

    def write_params(self, **changes) -> None:
        (self.repo / "params.yaml").write_text(yaml.safe_dump(params(**changes)), encoding="utf-8")

    def record(self) -> None:
        """Re-record every output in dvc.lock, as if its stage had been re-run to produce what is there now."""
        record(self)

    def cli_args(self) -> list[str]:
        p = self.paths
        return ["--promotion", str(p.promotion), "--freeze", str(p.freeze), "--incumbent-bench",
                str(p.incumbent_bench), "--candidate-bench", str(p.candidate_bench), "--tasks", str(p.tasks),
                "--params", str(p.params), "--repo", str(p.repo), "--receipt", str(p.receipt),
                "--now", APPLY_AT.isoformat()]


ARMS = {INCUMBENT: {"sessions": [{"skill": "plan", "prompt": "Plan: {prompt}"},
                                  {"skill": "work", "prompt": "Work: {prompt}"}]}}


def params(*, gate=None, mirrors=MIRRORS, model=None, allow=()) -> dict:
    return {
        "model": model or {"backend": "simulator", "name": MODEL_NAME, "base_url": None, "effort": "medium"},
        "skills": {"evolvable": ["plan", "work"], "paths": {"skills": "skills", "mirrors": list(mirrors)}},
        "propose": {"allow": list(allow)},
        "arms": ARMS,
        "gate": gate or GATE,
    }


def write_bench_sides(results: Path, tasks_file: Path, overlay_digest: str,
                      candidate_costs: dict[str, list[float]]) -> None:
    """Both sides for the real tasks, benchmarked with MODEL_NAME, as the bench writes them."""
    bound = tasks.load(tasks_file)
    classes = {task.id: task.cls for task in bound}

    def arm_rows(arm: str, costs: dict[str, list[float]], digest: str | None) -> list[dict]:
        return [r for task in bound for r in runs(
            task.id, arm, costs[task.id], cls=task.cls, model=MODEL_NAME, served_models=[MODEL_NAME],
            task_binding_digest=task.binding_digest, overlay_digest=digest, recorded_at=NOW.isoformat())]

    incumbent = arm_rows(INCUMBENT, INCUMBENT_COSTS, None)
    candidate = controls(incumbent, arm_rows(CANDIDATE, candidate_costs, overlay_digest))
    for side, rows in (("incumbent", incumbent), ("candidate", candidate)):
        digest = overlay_digest if side == "candidate" else None
        bench_json = bench(side, classes, task_bindings=[task.binding for task in bound], overlay_digest=digest,
                           served_models=[MODEL_NAME])
        bench_json["model"]["name"] = MODEL_NAME
        if side == "candidate":
            bench_json = designed(bench_json, incumbent)
        write_side(results / f"bench-{side}", bench_json, rows)


def make_pipeline(tmp_path: Path, *, candidate_costs: dict[str, list[float]] | None = None,
                  original: dict[str, bytes] | None = None, overlay: dict[str, bytes] | None = None,
                  executable: frozenset[str] = frozenset(), overlay_executable: frozenset[str] = frozenset(),
                  allow: tuple[str, ...] = ()) -> Pipeline:
    """The whole pipeline's outputs; `original`/`overlay` replace the default skills and candidate, and
    `executable`/`overlay_executable` name their files that carry an execute bit."""
    repo = tmp_path / "repo"
    for root in ROOTS:
        for rel, data in (original or ORIGINAL).items():
            (repo / root / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / root / rel).write_bytes(data)
            os.chmod(repo / root / rel, 0o755 if rel in executable else 0o644)
    (repo / "params.yaml").write_text(yaml.safe_dump(params(allow=allow)), encoding="utf-8")
    (repo / ".dvc").mkdir()  # a DVC project, as `dvc init` leaves one (its cache where DVC says, by default)
    (repo / ".dvc/config").write_text("")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "skills")

    results = repo / "results"
    candidate_overlay = tmp_path / "candidate"
    for rel, data in (overlay or OVERLAY).items():
        (candidate_overlay / rel).parent.mkdir(parents=True, exist_ok=True)
        (candidate_overlay / rel).write_bytes(data)
        os.chmod(candidate_overlay / rel, 0o755 if rel in overlay_executable else 0o644)
    tasks_file = make_mini(tmp_path / "bench")
    manifest = freeze(candidate_overlay, params=config.load(repo / "params.yaml"), tasks_file=tasks_file, repo=repo,
                      out=results / "freeze", session=None)

    write_bench_sides(results, tasks_file, manifest["overlay_digest"], candidate_costs or PROMOTING)
    incumbent = load_side(results / "bench-incumbent", "incumbent")
    candidate = load_side(results / "bench-candidate", "candidate")
    promotion = build_promotion(incumbent, candidate, manifest, config.Policy.from_dict(GATE), now=NOW)
    write_promotion(promotion, results / "gate" / "promotion.json")

    paths = ApplyPaths(
        promotion=results / "gate" / "promotion.json",
        freeze=results / "freeze",
        incumbent_bench=results / "bench-incumbent",
        params=repo / "params.yaml",
        repo=repo,
        receipt=results / "apply" / "receipt.json",
        candidate_bench=results / "bench-candidate",
        tasks=tasks_file,
    )
    pipe = Pipeline(repo, paths, manifest, promotion)
    pipe.record()
    return pipe
