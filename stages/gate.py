"""DVC stage `gate`: decide each required candidate arm from the two bench sides and write promotion.json.

The decision is data: the stage exits 0 whatever it decides, and non-zero only on bad input.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path

from skillevo.gate import (
    GateInputError,
    build_promotion,
    load_freeze,
    load_policy,
    load_side,
    write_outputs,
    write_promotion,
)

EPILOG = """\
inputs:
  <incumbent>/results.jsonl, <incumbent>/bench.json   the incumbent side (docs/formats.md)
  <candidate>/results.jsonl, <candidate>/bench.json   the candidate side; same task bindings, model and effort
  <freeze>                                             freeze manifest: overlay digest, required candidate arms,
                                                       destination digests, candidate origin, proposer model
  <params> `gate:` section                             metric, min_runs, min_improvement_pct,
                                                       max_task_regression_pct, max_failed_task_regression_pct,
                                                       min_gated_task_ratio, resolution_margin, max_age_days,
                                                       bootstrap_seed, bootstrap_resamples (missing = default)
outputs (under <out>):
  promotion.json     decisions with every binding, schema schemas/promotion.schema.json
  report.md          the decision, a table per task, the reasons
  metrics.json       flat numbers for `dvc metrics show`
  plots/tasks.csv    task, arm, incumbent/candidate metric, improvement_pct for `dvc plots show`
exit status: 0 whatever the decision (promote, keep_incumbent, insufficient_evidence); 2 on bad input.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stages.gate",
        description="Decide promote / keep_incumbent / insufficient_evidence per required candidate arm.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    options = (
        ("--incumbent", "results/bench-incumbent", "incumbent side directory"),
        ("--candidate", "results/bench-candidate", "candidate side directory"),
        ("--freeze", "results/freeze/manifest.json", "freeze manifest"),
        ("--params", "params.yaml", "params file with a gate: section"),
        ("--out", "results/gate", "output directory"),
    )
    for flag, default, help_text in options:
        parser.add_argument(flag, type=Path, default=Path(default), help=f"{help_text} [%(default)s]")
    args = parser.parse_args(argv)

    try:
        policy = load_policy(args.params)
        incumbent = load_side(args.incumbent, "incumbent")
        candidate = load_side(args.candidate, "candidate")
        freeze = load_freeze(args.freeze)
        promotion = build_promotion(incumbent, candidate, freeze, policy, now=datetime.now(timezone.utc))
    except GateInputError as e:
        print(f"gate: bad input: {e}", file=sys.stderr)
        return 2
    if policy.metric_warning:
        print(f"gate: warning: metric {policy.metric}: {policy.metric_warning}", file=sys.stderr)
    write_promotion(promotion, args.out / "promotion.json")
    for line in write_outputs(args.out, promotion, incumbent, candidate):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
