"""What people and DVC read from a gate run: report.md, metrics.json (`dvc metrics`), plots/tasks.csv (`dvc plots`).

All of it is derived from promotion.json plus the raw rows (for totals and the bootstrap); none of it feeds back
into the decision.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skillevo import documents, safefs
from skillevo.gate.bootstrap import median_improvement_interval
from skillevo.gate.policy import INSUFFICIENT_EVIDENCE, KEEP_INCUMBENT, PROMOTE
from skillevo.results import Side, side_totals, valid_samples

# Ordered so that `dvc metrics diff` reads up as better: promote > keep > insufficient.
DECISION_CODES = {PROMOTE: 1, KEEP_INCUMBENT: 0, INSUFFICIENT_EVIDENCE: -1}
PLOT_COLUMNS = ("task", "arm", "incumbent_metric", "candidate_metric", "improvement_pct")
SIMULATED_NOTICE = (
    "**Simulated:** these results come from the offline simulator, a deterministic stand-in for a model. "
    "They exercise the pipeline; they say nothing about how a real model behaves with these skills."
)

Interval = tuple[float, float] | None


def write_outputs(out_dir: Path, promotion: Mapping[str, Any], incumbent: Side, candidate: Side) -> list[str]:
    """Write report.md, metrics.json and plots/tasks.csv under out_dir; return one line per decision."""
    policy = promotion["policy"]
    samples = valid_samples([*incumbent.rows, *candidate.rows], policy["metric"])
    intervals = {
        decision["candidate_arm"]: median_improvement_interval(
            samples, decision, seed=policy["bootstrap_seed"], resamples=policy["bootstrap_resamples"]
        )
        for decision in promotion["decisions"]
    }
    totals = {"incumbent": side_totals(incumbent.rows), "candidate": side_totals(candidate.rows)}
    _write(out_dir / "report.md", render_report(promotion, intervals, totals))
    safefs.write_atomic(out_dir / "metrics.json", documents.dump_json(metrics(promotion, intervals, totals)))
    _write(out_dir / "plots" / "tasks.csv", render_tasks_csv(promotion))
    return [summary_line(decision, intervals[decision["candidate_arm"]]) for decision in promotion["decisions"]]


def metrics(
    promotion: Mapping[str, Any], intervals: Mapping[str, Interval], totals: Mapping[str, Mapping[str, float | int]]
) -> dict[str, float | int]:
    """Flat numbers only ('<arm>.<name>', '<side>.<name>'); a figure that does not exist is left out, not nulled."""
    flat: dict[str, float | int] = {}
    for decision in promotion["decisions"]:
        arm = decision["candidate_arm"]
        flat[f"{arm}.decision_code"] = DECISION_CODES[decision["decision"]]
        flat[f"{arm}.resolution_margin"] = decision["resolution_margin"]
        flat[f"{arm}.gated_tasks"] = len(decision["gated_tasks"])
        flat[f"{arm}.ungated_tasks"] = len(decision["ungated_tasks"])
        if decision["median_improvement_pct"] is not None:
            flat[f"{arm}.median_improvement_pct"] = decision["median_improvement_pct"]
        interval = intervals[arm]
        if interval is not None:
            flat[f"{arm}.median_improvement_ci90_low"], flat[f"{arm}.median_improvement_ci90_high"] = interval
    for side, figures in totals.items():
        for name, value in figures.items():
            flat[f"{side}.{name}"] = value
    return flat


def render_tasks_csv(promotion: Mapping[str, Any]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(PLOT_COLUMNS)
    rows = [
        (row["task"], d["candidate_arm"], row["incumbent_metric"], row["candidate_metric"], row["improvement_pct"])
        for d in promotion["decisions"]
        for row in d["tasks"]
    ]
    for row in sorted(rows, key=lambda r: (r[0], r[1])):
        writer.writerow(["" if value is None else value for value in row])
    return buffer.getvalue()


def summary_line(decision: Mapping[str, Any], interval: Interval) -> str:
    tasks = len(decision["tasks"])
    return (
        f"{decision['candidate_arm']}: {decision['decision']} (median {decision['metric']} improvement "
        f"{_median_with_interval(decision['median_improvement_pct'], interval)}, resolution margin "
        f"{decision['resolution_margin']:+d}, {len(decision['gated_tasks'])}/{tasks} tasks gated)"
    )


def render_report(
    promotion: Mapping[str, Any], intervals: Mapping[str, Interval], totals: Mapping[str, Mapping[str, float | int]]
) -> str:
    """The decision first, then per arm the task table and the reasons, then what the evidence is bound to."""
    backend = promotion["backend"]
    lines = ["# Gate decision", ""]
    if backend["simulated"]:
        lines += [SIMULATED_NOTICE, ""]
    lines += [f"- {summary_line(d, intervals[d['candidate_arm']])}" for d in promotion["decisions"]]
    for decision in promotion["decisions"]:
        lines += ["", *_decision_section(decision, intervals[decision["candidate_arm"]])]
    policy = promotion["policy"]
    lines += [
        "",
        "## Provenance",
        "",
        f"- benchmark model: `{promotion['benchmark_model']}` (backend `{backend['backend']}`"
        + (f", base URL `{backend['base_url']}`" if backend["base_url"] else "")
        + f"; simulated: {'yes' if backend['simulated'] else 'no'}), effort: `{promotion['effort']}`",
        f"- candidate: {promotion['candidate_origin']}, proposer model: `{promotion['proposer_model']}`, "
        f"overlay digest `{promotion['overlay_digest']}`",
        f"- generated {promotion['generated_at']}, evidence expires {promotion['evidence_expires_at']}",
        "- policy: " + ", ".join(f"{key}={policy[key]}" for key in sorted(policy)),
        f"- bootstrap: {policy['bootstrap_resamples']} resamples of the runs within each task and arm, seed "
        f"{policy['bootstrap_seed']}; reported only, never used by the decision",
    ]
    for side, figures in totals.items():
        lines.append(
            f"- {side} side: {figures['runs']} runs, {figures['sessions']} sessions, ${figures['total_cost_usd']:.4f} "
            f"measured ({figures['unmeasured_cost_runs']} runs unmeasured)"
        )
    return "\n".join(lines) + "\n"


def _decision_section(decision: Mapping[str, Any], interval: Interval) -> list[str]:
    metric = decision["metric"]
    lines = [
        f"## {decision['candidate_arm']} vs {decision['incumbent_arm']}: {decision['decision']}",
        "",
        f"Median {metric} improvement over gated tasks: "
        f"{_median_with_interval(decision['median_improvement_pct'], interval)}; "
        f"resolution margin {decision['resolution_margin']:+d} runs.",
        "",
        f"| task | class | gated | incumbent resolved | candidate resolved | incumbent {metric} | candidate {metric} "
        "| improvement % | quality floor |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in decision["tasks"]:
        floor = "n/a" if not row["quality_floor_applied"] else ("met" if row["quality_floor_met"] else "failed")
        lines.append(
            f"| {row['task']} | {row['class']} | {'yes' if row['gated'] else 'no'} | {_resolved(row['incumbent'])} "
            f"| {_resolved(row['candidate'])} | {_number(row['incumbent_metric'])} "
            f"| {_number(row['candidate_metric'])} | {_pct(row['improvement_pct'])} | {floor} |"
        )
    if decision["metric_warning"]:
        lines += ["", f"Warning: {decision['metric_warning']}."]
    lines += ["", "Reasons:", "", *(f"- {reason}" for reason in decision["reasons"])]
    return lines


def _resolved(agg: Mapping[str, Any]) -> str:
    text = f"{agg['resolved']}/{agg['valid_runs']}"
    return f"{text} ({agg['excluded_runs']} excluded)" if agg["excluded_runs"] else text


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.6g}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def _median_with_interval(median: float | None, interval: Interval) -> str:
    if median is None:
        return "n/a"
    if interval is None:
        return f"{median:.1f}%"
    return f"{median:.1f}% (90% bootstrap interval {interval[0]:.1f}% to {interval[1]:.1f}%)"


def _write(path: Path, text: str) -> None:
    safefs.write_atomic(path, text.encode())
