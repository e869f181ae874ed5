"""A whole pipeline's outputs for apply, in a throwaway git repository, each made by its real producer: skills
and a mirror committed, params.yaml, results/freeze from skillevo.freeze, the incumbent bench.json, and a
promotion.json the real gate code built."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

from skillevo import config
from skillevo.apply import ApplyPaths
from skillevo.freeze import freeze
from skillevo.gate import build_promotion, write_promotion
from tests.bench_fixtures import make_mini
from tests.gate_rows import INCUMBENT, sides, write_side
from tests.test_gate_promotion import promoting_rows

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)  # when the gate decided
APPLY_AT = NOW + timedelta(days=1)
MODEL_NAME = "claude-sonnet-4-6"  # a pinned current id: params load without a warning
MIRRORS = [".claude/skills"]
ROOTS = ["skills", *MIRRORS]
ORIGINAL = {
    "plan/SKILL.md": b"---\nname: plan\n---\n# Plan\n\nWrite a plan.\n",
    "work/SKILL.md": b"---\nname: work\n---\n# Work\n\nDo the work. Run the tests.\n",
}
OVERLAY = {
    "plan/SKILL.md": b"---\nname: plan\n---\n# Plan\n\nWrite a short plan.\n",
    "work/SKILL.md": b"---\nname: work\n---\n# Work\n\nDo the work. Run the tests once, in the foreground.\n",
}
DESTINATIONS = sorted(f"{root}/{rel}" for root in ROOTS for rel in OVERLAY)


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    result = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@invalid", *args],
                            capture_output=True, text=True, check=True, env=env)
    return result.stdout


def skill_file(destination: str) -> str:
    """`<root>/<skill>/<rest>` -> `<skill>/<rest>`."""
    root = next(r for r in ROOTS if destination.startswith(r + "/"))
    return destination.removeprefix(root + "/")


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

    def records(self) -> list[Path]:
        return sorted(self.paths.state_dir.glob("recovery-*.json"))

    def write_params(self, **changes) -> None:
        (self.repo / "params.yaml").write_text(yaml.safe_dump(params(**changes)), encoding="utf-8")

    def cli_args(self) -> list[str]:
        p = self.paths
        return ["--promotion", str(p.promotion), "--freeze", str(p.freeze), "--incumbent-bench",
                str(p.incumbent_bench), "--params", str(p.params), "--repo", str(p.repo), "--receipt", str(p.receipt),
                "--now", APPLY_AT.isoformat()]


ARMS = {INCUMBENT: {"sessions": [{"skill": "plan", "prompt": "Plan: {prompt}"},
                                  {"skill": "work", "prompt": "Work: {prompt}"}]}}


def params(*, gate=None, mirrors=MIRRORS, model=None) -> dict:
    return {
        "model": model or {"backend": "simulator", "name": MODEL_NAME, "base_url": None, "effort": "medium"},
        "skills": {"evolvable": ["plan", "work"], "paths": {"skills": "skills", "mirrors": list(mirrors)}},
        "arms": ARMS,
        "gate": gate or {},
    }


def bench_sides(rows):
    """The gate's two sides from these rows, benchmarked with MODEL_NAME (what params.yaml names)."""
    incumbent, candidate = sides([{**r, "model": MODEL_NAME, "served_models": [MODEL_NAME]} for r in rows])
    for side in (incumbent, candidate):
        side.bench["model"]["name"] = MODEL_NAME
        side.bench["served_models"] = [MODEL_NAME]
    return incumbent, candidate


def make_pipeline(tmp_path: Path, *, rows=None) -> Pipeline:
    repo = tmp_path / "repo"
    for root in ROOTS:
        for rel, data in ORIGINAL.items():
            (repo / root / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / root / rel).write_bytes(data)
    (repo / "params.yaml").write_text(yaml.safe_dump(params()), encoding="utf-8")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "skills")

    results = repo / "results"
    candidate_overlay = tmp_path / "candidate"
    for rel, data in OVERLAY.items():
        (candidate_overlay / rel).parent.mkdir(parents=True, exist_ok=True)
        (candidate_overlay / rel).write_bytes(data)
    manifest = freeze(candidate_overlay, params=config.load(repo / "params.yaml"),
                      tasks_file=make_mini(tmp_path / "bench"), repo=repo, out=results / "freeze", session=None)

    incumbent, candidate = bench_sides(rows or promoting_rows())
    candidate.bench["overlay_digest"] = manifest["overlay_digest"]
    write_side(results / "bench-incumbent", incumbent.bench, list(incumbent.rows))
    promotion = build_promotion(incumbent, candidate, manifest, config.Policy.from_dict({}), now=NOW)
    write_promotion(promotion, results / "gate" / "promotion.json")

    paths = ApplyPaths(
        promotion=results / "gate" / "promotion.json",
        freeze=results / "freeze",
        incumbent_bench=results / "bench-incumbent",
        params=repo / "params.yaml",
        repo=repo,
        receipt=results / "apply" / "receipt.json",
    )
    return Pipeline(repo, paths, manifest, promotion)
