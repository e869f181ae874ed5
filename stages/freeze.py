"""Freeze stage: validate the candidate overlay, copy it read-only, and bind it by digest.

    python -m stages.freeze                                   # the proposer's overlay
    python -m stages.freeze --overlay my-overlay --hand-written  # a hand-written candidate

Writes results/freeze/overlay/ (files 0444) and results/freeze/manifest.json: the overlay digest, the
candidate arms it requires, and the committed sha256 of every file an apply would replace (canonical
skills and every mirror in params skills.mirrors).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from skillevo import arms, overlay, params as params_mod, tasks
from skillevo.digests import sha256_bytes
from skillevo.schemas import validate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stages.freeze", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--overlay", type=Path, default=Path("results/proposal/overlay"), help="[%(default)s]")
    parser.add_argument("--session", type=Path, default=Path("results/proposal/session.json"),
                        help="the proposer's session record, for its model [%(default)s]")
    parser.add_argument("--hand-written", action="store_true", help="the overlay was written by a person")
    parser.add_argument("--tasks", type=Path, default=Path("tasks/tasks.yaml"),
                        help="tasks, whose hidden oracles no overlay may carry [%(default)s]")
    parser.add_argument("--params", type=Path, default=Path("params.yaml"), help="[%(default)s]")
    parser.add_argument("--repo", type=Path, default=Path("."), help="repository holding the skills [%(default)s]")
    parser.add_argument("--out", type=Path, default=Path("results/freeze"), help="[%(default)s]")
    args = parser.parse_args(argv)
    try:
        manifest = freeze(args)
    except (ValueError, OSError) as e:
        print(f"freeze: refused: {e}", file=sys.stderr)
        return 2
    print(f"freeze: overlay {manifest['overlay_digest'][:12]} ({len(manifest['files'])} file(s), "
          f"{manifest['changed_lines']} changed lines) -> {', '.join(manifest['required_candidate_arms'])}")
    return 0


def freeze(args: argparse.Namespace) -> dict:
    params = params_mod.load(args.params)
    skills_cfg = params_mod.section(params, "skills")
    skills_dir = args.repo / skills_cfg.get("dir", "skills")
    evolvable = set(skills_cfg.get("evolvable") or [])
    limits = overlay.Limits.from_params(params)
    files = overlay.read_overlay(args.overlay.absolute(), limits)
    oracle_bytes = [data for t in tasks.load(args.tasks) for _, data in t.oracle_files]
    changed = overlay.validate(files, skills_dir, evolvable, oracle_bytes, limits)
    known = {p.name for p in skills_dir.iterdir() if (p / "SKILL.md").is_file()}
    required = arms.required_candidate_arms({rel.split("/")[0] for rel in files}, arms.parse(params.get("arms"), known))
    if not required:
        raise ValueError("no arm uses the skills this overlay touches")
    dests = overlay.destinations(files, skills_cfg.get("dir", "skills"), list(skills_cfg.get("mirrors") or []))
    proposer_model = None
    if not args.hand_written:
        proposer_model = json.loads(args.session.read_text())["model"]
    committed = overlay.committed_digests(args.repo, dests)
    overlay.remove_frozen(args.out)
    digest = overlay.freeze(files, args.out / "overlay")
    manifest = {
        "schema_version": 1,
        "overlay_digest": digest,
        "files": [{"path": rel, "sha256": sha256_bytes(data), "size": len(data)} for rel, data in sorted(files.items())],
        "required_candidate_arms": [a.name for a in required],
        "destinations": committed,
        "candidate_origin": "hand-written" if args.hand_written else "proposer",
        "proposer_model": proposer_model,
        "evolvable_skills": sorted(evolvable),
        "changed_lines": changed,
    }
    validate(manifest, "freeze-manifest.schema.json", args.out / "manifest.json")
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


if __name__ == "__main__":
    raise SystemExit(main())
