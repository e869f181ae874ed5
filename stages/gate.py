"""Stage `gate`: decide each required candidate arm from the two bench sides and write promotion.json.

inputs:  <incumbent>/ and <candidate>/ (results.jsonl + bench.json: same task bindings, model, effort and
         served models), the freeze manifest (overlay digest, required arms, destination digests), and params
         `gate:` (metric, min_runs, min_improvement_pct, ...: schemas/params.schema.json gives each default);
         for the page alone, never the decision: proposal.md, the frozen overlay and the incumbent skills.
outputs: promotion.json (schemas/promotion.schema.json), report.md, metrics.json (`dvc metrics show`: each
         arm's decision and improvement, the sessions' cost), figures.json (every figure), plots/tasks.csv
         (`dvc plots show`), plots/improvement.svg and index.html (one static page, offline: the decision, the
         effects per task, the cost, the proposal and its diff, every cell's transcript).
exit status: 0 whatever the decision (promote, keep_incumbent, insufficient_evidence); 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from skillevo.core import layout, stage
from skillevo.core.declared import Declared
from skillevo.core.results import load_side
from skillevo.gate import build_promotion, load_freeze, write_outputs, write_promotion
from skillevo.gate.page import load_candidate
from skillevo.gate.policy import metric_warning

# the params this stage reads: `tracked` is its dvc.yaml entry's `params:` (tests/test_declared_params.py)
PARAMS = Declared(("gate", "sampling.prior_cv", "sampling.plan_saving_pct", "sampling.cost_cap"))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillevo.stages.gate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--incumbent", type=Path, default=layout.BENCH["incumbent"], help="incumbent side [%(default)s]")
    p.add_argument("--candidate", type=Path, default=layout.BENCH["candidate"], help="candidate side [%(default)s]")
    p.add_argument("--freeze", type=Path, default=layout.FREEZE_MANIFEST, help="freeze manifest [%(default)s]")
    p.add_argument("--params", type=Path, default=layout.PARAMS, help="params file; reads gate: [%(default)s]")
    p.add_argument("--proposal", type=Path, help="proposal.md, shown on the page [none]")
    p.add_argument("--overlay", type=Path, help="the frozen overlay, diffed on the page against --skills [none]")
    p.add_argument("--skills", type=Path, help="the incumbent family, for that diff [none]")
    p.add_argument("--out", type=Path, default=layout.GATE, help="output directory [%(default)s]")
    return p


def run(args: argparse.Namespace) -> str:
    params = stage.load_params("gate", args, PARAMS)
    policy = params.gate
    incumbent, candidate = load_side(args.incumbent, "incumbent"), load_side(args.candidate, "candidate")
    manifest = load_freeze(args.freeze)
    promotion = build_promotion(incumbent, candidate, manifest, policy, now=datetime.now(UTC), plan=params.sampling)
    stage.warn("gate", [f"metric {policy.metric}: {w}" for w in [metric_warning(policy)] if w])
    write_promotion(promotion, args.out / "promotion.json")
    # the proposer's text describes its own candidate only: a hand-written one frozen after it says nothing of it
    proposal, diff = load_candidate(args.proposal if manifest["candidate_origin"] != "hand-written" else None,
                                    args.overlay, args.skills)
    return "\n".join(write_outputs(args.out, promotion, incumbent, candidate, manifest, proposal=proposal,
                                   overlay_diff=diff))


def main(argv: list[str] | None = None) -> int:
    return stage.main("gate", parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
