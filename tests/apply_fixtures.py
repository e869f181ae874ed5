"""A whole pipeline's outputs for apply, in a throwaway git repository: skills, a mirror, a frozen overlay with
its manifest, the incumbent bench.json, params.yaml and a promotion.json the real gate code built."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

from skillevo.apply import ApplyPaths
from skillevo.digests import framed_digest, sha256_bytes
from skillevo.gate import Policy, build_promotion, write_promotion
from tests.gate_rows import CANDIDATE, MODEL, sides, write_side
from tests.test_gate_promotion import promoting_rows

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)  # when the gate decided
APPLY_AT = NOW + timedelta(days=1)
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


def params(*, gate=None, mirrors=MIRRORS, model=None) -> dict:
    return {
        "model": model or {"backend": MODEL["backend"], "name": MODEL["name"], "base_url": None, "effort": "medium"},
        "skills": {"dir": "skills", "mirrors": list(mirrors), "evolvable": ["plan", "work"]},
        "gate": gate or {},
    }


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
    freeze = results / "freeze"
    for rel, data in OVERLAY.items():
        (freeze / "overlay" / rel).parent.mkdir(parents=True, exist_ok=True)
        (freeze / "overlay" / rel).write_bytes(data)
        (freeze / "overlay" / rel).chmod(0o444)
    manifest = {
        "schema_version": 1,
        "overlay_digest": framed_digest(OVERLAY.items()),
        "files": [{"path": rel, "sha256": sha256_bytes(data), "size": len(data)}
                  for rel, data in sorted(OVERLAY.items())],
        "required_candidate_arms": [CANDIDATE],
        "destinations": {f"{root}/{rel}": sha256_bytes(data) for root in ROOTS for rel, data in ORIGINAL.items()},
        "candidate_origin": "proposer",
        "proposer_model": "skillevo-sim-proposer-1",
        "evolvable_skills": ["plan", "work"],
        "changed_lines": 2,
    }
    (freeze / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")

    incumbent, candidate = sides(rows or promoting_rows())
    candidate.bench["overlay_digest"] = manifest["overlay_digest"]
    write_side(results / "bench-incumbent", incumbent.bench, list(incumbent.rows))
    promotion = build_promotion(incumbent, candidate, manifest, Policy(), now=NOW)
    write_promotion(promotion, results / "gate" / "promotion.json")

    paths = ApplyPaths(
        promotion=results / "gate" / "promotion.json",
        freeze=freeze,
        incumbent_bench=results / "bench-incumbent",
        params=repo / "params.yaml",
        repo=repo,
        receipt=results / "apply" / "receipt.json",
    )
    return Pipeline(repo, paths, manifest, promotion)
