"""Stage `freeze`: validate the candidate overlay, copy it read-only, and bind it by digest.

    python -m skillevo.stages.freeze                                      # the proposer's overlay
    python -m skillevo.stages.freeze --overlay my-overlay --hand-written  # a hand-written candidate

Writes <out>/overlay/ (files 0444) and <out>/manifest.json: the overlay digest, the candidate arms it
requires, and the committed sha256 of every file an apply would replace (the canonical skills and every
mirror); when the proposer declined (its proposal.md headed `# No proposal`, no overlay), an empty overlay and a
manifest with candidate_origin `declined` and its reason. An overlay whose normalised diff equals a candidate the
gate rejected for futility against the same incumbent (<previous>/rejected.json, which `make evolve` hands on) is
refused. Exit 2 when the overlay breaks a
rule (the message names the file and the rule).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skillevo import propose
from skillevo.core import layout, memory, stage
from skillevo.core.declared import Declared
from skillevo.freeze import freeze, freeze_declined

# the params this stage reads: `tracked` is its dvc.yaml entry's `params:` (tests/test_declared_params.py)
PARAMS = Declared(("arms", "propose.max_changed_lines", "propose.allow", "skills", "tasks"))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillevo.stages.freeze", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--overlay", type=Path, default=layout.PROPOSAL / "overlay", help="[%(default)s]")
    p.add_argument("--session", type=Path, default=layout.PROPOSAL / "session.json",
                   help="the proposer's session record, for its model [%(default)s]")
    p.add_argument("--hand-written", action="store_true", help="the overlay was written by a person (no --session)")
    p.add_argument("--tasks", type=Path, default=layout.TASKS_FILE,
                   help="tasks, whose hidden oracles no overlay may carry [%(default)s]")
    p.add_argument("--params", type=Path, default=layout.PARAMS, help="[%(default)s]")
    p.add_argument("--previous", type=Path, default=layout.MEMORY,
                   help="what the last generations handed on: its rejected.json lists the candidates rejected before "
                        "(missing = none yet) [%(default)s]")
    stage.family_options(p)
    p.add_argument("--repo", type=Path, default=None, help="repository holding the skills [params skills.root]")
    p.add_argument("--out", type=Path, default=layout.FREEZE, help="[%(default)s]")
    return p


def run(args: argparse.Namespace) -> str:
    params = stage.load_params("freeze", args, PARAMS)
    reason = None if args.hand_written else propose.declined(args.overlay.parent)
    if reason is not None:
        freeze_declined(reason, params=params, out=args.out, session=args.session)
        return f"freeze: no proposal this generation ({reason[:200]}): nothing to measure, nothing to apply"
    manifest = freeze(args.overlay, params=params, tasks_file=args.tasks, repo=stage.repo_dir(args, params),
                      out=args.out, session=None if args.hand_written else args.session,
                      rejected=args.previous / memory.REJECTED_FILE,
                      predicted=None if args.hand_written else propose.predicted(args.overlay.parent))
    return (f"freeze: overlay {manifest['overlay_digest'][:12]} ({len(manifest['files'])} file(s), "
            f"{manifest['changed_lines']} changed lines) -> {', '.join(manifest['required_candidate_arms'])}")


def main(argv: list[str] | None = None) -> int:
    return stage.main("freeze", parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
