"""DVC stage `evidence`: build the bounded, redacted, content-hashed evidence bundle the proposer reads.

    python -m stages.evidence                        # from results/previous (or a cold start)
    python -m stages.evidence --seed path/to/results # from a seed results directory instead
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skillevo.evidence import Limits, make_bundle, write_bundle

_DEFAULTS = Limits()

EPILOG = f"""\
inputs:
  <previous>/bench-incumbent/, <previous>/bench-candidate/
                      results.jsonl (schemas/result-row.schema.json), transcripts/, patches/ of each side;
                      any subset may be present. A missing or empty <previous> is a cold start.
  <previous>/gate/promotion.json   prior gate decisions (schemas/promotion.schema.json)
  <previous>/proposal.md           the previous generation's proposal
                      Anything else in <previous> is ignored (README.md silently, the rest listed in
                      the manifest). No input at all is a cold start: an empty bundle whose manifest
                      says source "cold-start" (learnings are still included).
  <incumbent>         optional: this generation's incumbent side (results.jsonl, transcripts/, patches/);
                      takes the place of <previous>/bench-incumbent
  <seed>              instead of <previous>: results.jsonl + transcripts/ + patches/ (rows of either side)
  <learnings>         optional JSONL, one object per line: {{skill, date, task, friction, suggestion}};
                      a malformed line fails naming file:line. Default learnings.jsonl if it exists.
  <tasks>             read ONLY to know the hidden oracle files, whose bytes must never reach the bundle
  <params>            `evidence:` max_rows [{_DEFAULTS.max_rows}], max_transcripts_per_row \
[{_DEFAULTS.max_transcripts_per_row}],
                      max_file_bytes [{_DEFAULTS.max_file_bytes}], max_bundle_bytes [{_DEFAULTS.max_bundle_bytes}], \
max_learnings [{_DEFAULTS.max_learnings}],
                      verify_tail_chars [{_DEFAULTS.verify_tail_chars}]; `skills.evolvable` (learnings of \
other skills are left out)
selection:
  rows with error_kind infra-error, session-error, evidence-unverified or cleanup-failure are left out;
  then unresolved rows by (task, arm, run), then resolved rows by cost (highest first); the first
  max_rows whose transcripts and patch match the size and sha256 in their row (others are refused and
  listed in the manifest, and the next row takes their place).
outputs (under <out>, replaced only if it is empty or holds a previous bundle):
  manifest.json       every file with sha256 and size; inputs, limits, row counts, what was left out and
                      why (schemas/evidence-manifest.schema.json; same inputs -> same bytes)
  rows.json           compact rows in priority order, each naming its files below
  transcripts/row<i>-<j>.jsonl, patches/row<i>.diff
  learnings.json, gate-summary.json, prior-proposal.md
  Every file is redacted (also the values of ANTHROPIC_API_KEY / ANTHROPIC_AUTH_TOKEN, if set) and cut to
  max_file_bytes; a file carrying a hidden oracle's canary or any oracle line over 20 characters is
  withheld. Over max_bundle_bytes: the lowest-priority rows are dropped, then the prior proposal.
exit status: 0 on success (a cold start too); 2 on bad input or a bundle that cannot fit its budget.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stages.evidence",
        description="Build the evidence bundle for the proposer from the previous generation's outputs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--previous", type=Path, default=None,
                        help="previous generation's outputs; missing or empty = cold start [results/previous]")
    parser.add_argument("--incumbent", type=Path, default=None,
                        help="this generation's incumbent side, in place of <previous>/bench-incumbent [none]")
    parser.add_argument("--seed", type=Path, default=None,
                        help="a seed results directory, used instead of --previous and --incumbent [none]")
    parser.add_argument("--learnings", type=Path, default=None,
                        help="learnings queue, JSONL [learnings.jsonl, if it exists]")
    parser.add_argument("--tasks", type=Path, default=Path("tasks/tasks.yaml"),
                        help="tasks file, for the hidden oracle files only [%(default)s]")
    parser.add_argument("--params", type=Path, default=Path("params.yaml"),
                        help="params file: evidence: and skills.evolvable [%(default)s]")
    parser.add_argument("--out", type=Path, default=Path("results/evidence"), help="output directory [%(default)s]")
    args = parser.parse_args(argv)
    if args.seed is not None and (args.previous is not None or args.incumbent is not None):
        parser.error("--seed is used instead of --previous and --incumbent; give one or the other")

    learnings = args.learnings
    if learnings is None and Path("learnings.jsonl").exists():
        learnings = Path("learnings.jsonl")
    try:
        bundle = make_bundle(previous=args.previous or Path("results/previous"), seed=args.seed,
                             incumbent=args.incumbent, learnings=learnings, tasks=args.tasks, params=args.params)
        write_bundle(bundle, args.out)
    except (ValueError, OSError) as e:
        print(f"evidence: {e}", file=sys.stderr)
        return 2
    m = bundle.manifest
    rows = m["rows"]
    print(f"evidence: source {m['source']}; {rows['selected']} rows selected of {rows['considered']} "
          f"({rows['excluded_infra']} excluded as infra, {rows['refused']} refused, {rows['over_cap']} over "
          f"max_rows, {rows['dropped_for_budget']} dropped for budget); {len(m['files'])} files, "
          f"{bundle.total_bytes} bytes -> {args.out}")
    for item in m["dropped"]:
        print(f"evidence: left out {item['what']}: {item['reason']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
