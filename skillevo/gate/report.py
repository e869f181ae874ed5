"""What people and DVC read from a gate run: report.md, metrics.json (`dvc metrics`: a summary that fits a
terminal), figures.json (every figure), plots/tasks.csv (`dvc plots`), plots/improvement.svg (a static picture
beside report.md) and index.html (the page a person opens: skillevo.gate.page).

All of it is derived from promotion.json plus the raw rows (for what each side cost); none of it feeds back
into the decision. The report leads with the decision, the estimated improvement and its interval.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skillevo.core import prediction
from skillevo.core.results import Side, side_totals
from skillevo.files import documents, safefs
from skillevo.gate import figures
from skillevo.gate.verdict import INSUFFICIENT_EVIDENCE, KEEP_INCUMBENT, PROMOTE
from skillevo.stats import bound_text, improvement_text, p_text

# Ordered so that `dvc metrics diff` reads up as better: promote > keep > insufficient.
DECISION_CODES = {PROMOTE: 1, KEEP_INCUMBENT: 0, INSUFFICIENT_EVIDENCE: -1}
PLOT_COLUMNS = ("label", "task", "arm", "improvement_pct", "interval_low_pct", "interval_high_pct")
ESTIMAND = (
    "**What cheaper means.** The gate promotes a candidate arm when it costs less per resolved task: over the gate's "
    "tasks, each attempted equally often, the metric it spends (failed runs included) divided by the tasks it "
    "resolves, relative to its control, the incumbent arm measured beside it in the same moment (docs/gate.md). "
    "Arithmetic means, so a task weighs in by what it costs; a one-sided test must reject 'not cheaper' at the "
    "stated level, and resolution may not fall."
)
NO_PROPOSAL_LINE = ("the proposer found nothing in the evidence to change, so no candidate was frozen, measured or "
                    "decided; nothing can be applied")
SIMULATED_NOTICE = (
    "**Simulated:** these results come from the offline simulator, a stand-in for a model with declared noise "
    "(bench.json says which). They exercise the pipeline and the statistics; they say nothing about how a real "
    "model behaves with these skills."
)


def write_outputs(out_dir: Path, promotion: Mapping[str, Any], incumbent: Side, candidate: Side,
                  manifest: Mapping[str, Any] | None = None, *, proposal: str | None = None,
                  overlay_diff: str | None = None) -> list[str]:
    """Write report.md, metrics.json (the few figures `dvc metrics show` prints), figures.json (every figure),
    plots/tasks.csv, plots/improvement.svg and index.html (the page: skillevo.gate.page, with the proposal's text
    and its overlay diff when given); return one line per decision."""
    from skillevo.gate import page  # it reads this module's helpers: imported here, not in a cycle

    totals = {"incumbent": side_totals(incumbent.rows), "candidate": side_totals(candidate.rows)}
    _write(out_dir / "report.md", render_report(promotion, totals, manifest))
    every = metrics(promotion, totals)
    safefs.write_atomic(out_dir / "metrics.json", documents.dump_json(summary(promotion, every)))
    safefs.write_atomic(out_dir / "figures.json", documents.dump_json(every))
    _write(out_dir / "plots" / "tasks.csv", render_tasks_csv(promotion))
    svg = figures.improvement_svg(promotion)
    _write(out_dir / "plots" / "improvement.svg", svg)
    _write(out_dir / page.PAGE, page.render(promotion, (incumbent, candidate), manifest, svg=svg, proposal=proposal,
                                            overlay_diff=overlay_diff))
    if promotion.get("no_proposal"):
        return [f"no_proposal: {NO_PROPOSAL_LINE} ({promotion['no_proposal']})"]
    return [summary_line(decision) for decision in promotion["decisions"]]


def metrics(promotion: Mapping[str, Any], totals: Mapping[str, Mapping[str, float | int]]) -> dict[str, float | int]:
    """Flat numbers only ('<arm>.<name>', '<side>.<name>'); a figure that does not exist is left out, not nulled."""
    flat: dict[str, float | int] = {}
    for decision in promotion["decisions"]:
        arm = decision["candidate_arm"]
        flat[f"{arm}.decision_code"] = DECISION_CODES[decision["decision"]]
        estimate, quality, protocol = decision["estimate"], decision["quality"], decision["per_protocol"]
        if estimate:
            flat[f"{arm}.improvement_pct"] = estimate["improvement_pct"]
            for side, bound in zip(("low", "high"), estimate["interval_pct"], strict=True):
                if bound is not None:  # unbounded: no figure rather than a made-up one
                    flat[f"{arm}.interval_{side}_pct"] = bound
            flat[f"{arm}.p_value"] = estimate["p_value"]
            if estimate["per_resolved"]:
                flat[f"{arm}.control_per_resolved"] = estimate["per_resolved"]["incumbent"]
                flat[f"{arm}.candidate_per_resolved"] = estimate["per_resolved"]["candidate"]
        if quality:
            flat[f"{arm}.resolution_drop_pct"] = quality["drop_pct"]
            flat[f"{arm}.resolution_drop_upper_pct"] = quality["drop_upper_pct"]
        if protocol:
            flat[f"{arm}.per_protocol_improvement_pct"] = protocol["improvement_pct"]
        if decision["seed"] and decision["seed"]["median_improvement_pct"] is not None:
            flat[f"{arm}.seed_median_improvement_pct"] = decision["seed"]["median_improvement_pct"]
    for side, figures_ in totals.items():
        for name, value in figures_.items():
            flat[f"{side}.{name}"] = value
    return flat


def summary(promotion: Mapping[str, Any], every: Mapping[str, float | int]) -> dict[str, Any]:
    """What `dvc metrics show` and `dvc metrics diff` print, nested by arm so it fits a terminal: each arm's
    decision code and estimated improvement, and what the generation's sessions cost (figures.json has the rest)."""
    out: dict[str, Any] = {}
    for decision in promotion["decisions"]:
        arm = decision["candidate_arm"]
        out[arm] = {name: every[f"{arm}.{name}"] for name in ("decision_code", "improvement_pct")
                    if f"{arm}.{name}" in every}
    out["sessions"] = sum(every.get(f"{side}.sessions", 0) for side in ("incumbent", "candidate"))
    out["cost_usd"] = round(sum(every.get(f"{side}.total_cost_usd", 0.0) for side in ("incumbent", "candidate")), 6)
    return out


def render_tasks_csv(promotion: Mapping[str, Any]) -> str:
    """One row per (task, candidate arm), labelled with both so that `dvc plots show` tells arms apart."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(PLOT_COLUMNS)
    rows = []
    for decision in promotion["decisions"]:
        for row in decision["tasks"]:
            low, high = row["interval_pct"] or (None, None)
            rows.append((f"{row['task']} ({decision['candidate_arm']})", row["task"], decision["candidate_arm"],
                         row["improvement_pct"], low, high))
    for row in sorted(rows, key=lambda r: (r[1], r[2])):
        writer.writerow(["" if value is None else value for value in row])
    return buffer.getvalue()


def summary_line(decision: Mapping[str, Any]) -> str:
    return f"{decision['candidate_arm']}: {decision['decision']} ({_headline(decision)})"


def _headline(decision: Mapping[str, Any]) -> str:
    estimate, quality = decision["estimate"], decision["quality"]
    parts = [f"{decision['metric']} {_per(estimate)}{_estimate(estimate)}" if estimate else
             f"{decision['metric']}: no estimate"]
    if quality:
        parts.append(f"resolved {quality['incumbent']['resolved']}/{quality['incumbent']['valid_runs']} -> "
                     f"{quality['candidate']['resolved']}/{quality['candidate']['valid_runs']}")
    return ", ".join(parts)


def _per(estimate: Mapping[str, Any]) -> str:
    return "per resolved task " if estimate["estimand"] == "per_resolved" else "per run (geometric mean) "


def _estimate(estimate: Mapping[str, Any]) -> str:
    low, high = estimate["interval_pct"]
    return (f"{improvement_text(estimate)} cheaper ({100 * estimate['confidence']:g}% interval "
            f"{bound_text(low)} to {bound_text(high)}, {p_text(estimate)})")


def render_report(promotion: Mapping[str, Any], totals: Mapping[str, Mapping[str, float | int]],
                  manifest: Mapping[str, Any] | None = None) -> str:
    """The decision first, then per arm the estimate per task and the reasons, what the overlay changes (with
    every frontmatter change spelled out), then what it is bound to."""
    backend = promotion["backend"]
    lines = ["# Gate decision", "", ESTIMAND, ""]
    if backend["simulated"]:
        lines += [SIMULATED_NOTICE, ""]
    if promotion.get("no_proposal"):
        lines += [f"- **no_proposal** — {NO_PROPOSAL_LINE}. The proposer's reason: {promotion['no_proposal']}"]
    lines += [f"- **{d['candidate_arm']}: {d['decision']}** — {_headline(d)}" for d in promotion["decisions"]]
    if promotion["sequential"]:
        lines += ["", sequential_line(promotion["sequential"], promotion["policy"])]
    if promotion["candidate_origin"] == "proposer" and promotion["decisions"]:
        lines += ["", prediction.line(promotion.get("prediction"))]
    lines += ["", "![estimated improvement per task, with intervals](plots/improvement.svg)"]
    for decision in promotion["decisions"]:
        lines += ["", *_decision_section(decision)]
    if manifest is not None:
        lines += ["", *overlay_section(manifest)]
    policy = promotion["policy"]
    lines += [
        "",
        "## Provenance",
        "",
        f"- benchmark model: `{promotion['benchmark_model']}` (backend `{backend['backend']}`"
        + (f", base URL `{backend['base_url']}`" if backend["base_url"] else "")
        + (f", through skillevo's LiteLLM gateway to `{backend.get('upstream') or 'the provider'}`, priced at "
           f"{backend['prices']} USD per million tokens (input, cached input, output)"
           if backend.get("prices") is not None else
           ", through skillevo's LiteLLM gateway, unpriced (every cost unmeasured)"
           if backend["backend"] in ("openai", "litellm") else "")
        + f"; simulated: {'yes' if backend['simulated'] else 'no'}), effort: `{promotion['effort']}`",
        f"- candidate: {promotion['candidate_origin']}, proposer model: `{promotion['proposer_model']}`, "
        f"overlay digest `{promotion['overlay_digest']}`",
        f"- generated {promotion['generated_at']}, evidence expires {promotion['evidence_expires_at']}",
        "- policy: " + ", ".join(f"{key}={policy[key]}" for key in sorted(policy)),
    ]
    for side, figures_ in totals.items():
        lines.append(
            f"- {side} side: {figures_['runs']} runs, {figures_['sessions']} sessions, "
            f"${figures_['total_cost_usd']:.4f} measured ({figures_['unmeasured_cost_runs']} runs unmeasured)"
        )
    return "\n".join(lines) + "\n"


def sequential_line(sequential: Mapping[str, Any], policy: Mapping[str, Any]) -> str:
    """Which look the candidate side stopped at and what that did to the levels: a stopped side is tested
    more strictly than a fixed one (docs/gate.md, sequential runs)."""
    looks, look = sequential["looks"], sequential["stopped_at_look"]
    fixed = policy["alpha"]
    return (f"**Sequential:** the candidate side stopped at look {look} of {len(looks)} ({looks[look - 1]} of "
            f"{looks[-1]} runs per cell; planned looks at {', '.join(map(str, looks))} runs; reason: "
            f"{sequential['reason']}). At that look's {sequential['boundary']} boundary the metric is tested at "
            f"level {sequential['cost_level']:.4g} (fixed design: {fixed:.4g}), the resolution drop bounded at "
            f"{100 * (1 - sequential['drop_level']):.4g}% confidence.")


def overlay_section(manifest: Mapping[str, Any]) -> list[str]:
    changes = manifest["frontmatter_changes"]
    paths = ", ".join("`" + f["path"] + "`" for f in manifest["files"])
    return [
        "## What the overlay changes", "",
        f"- files: {paths} ({manifest['changed_lines']} changed lines)",
        "- frontmatter: " + ("unchanged" if not changes else f"{len(changes)} change(s)"),
        *(f"  - {change}" for change in changes),
        "- scripts: " + ("unchanged" if not manifest["script_changes"] else
                         f"**{len(manifest['script_changes'])} change(s)** (code the agent runs)"),
        *(f"  - {change}" for change in manifest["script_changes"]),
    ]


def _decision_section(decision: Mapping[str, Any]) -> list[str]:
    metric, estimate = decision["metric"], decision["estimate"]
    lines = [f"## {decision['candidate_arm']} vs {decision['incumbent_arm']}: {decision['decision']}", ""]
    if decision["claim"]:
        lines += [f"**Claim:** {decision['claim']}.", ""]
    if estimate and estimate["estimand"] == "per_resolved":
        levels = estimate["per_resolved"]
        lines += [f"Estimated improvement in {metric} per resolved task over the gate's tasks: {_estimate(estimate)}; "
                  f"{_number(levels['incumbent'])} per resolved task for the control, {_number(levels['candidate'])} "
                  f"for the candidate (bootstrap-t, {estimate['resamples']} resamples).", ""]
    elif estimate:
        lines += [f"Estimated {metric} improvement per run (geometric mean over tasks): {_estimate(estimate)}; "
                  f"{estimate['df']} degrees of freedom, log-scale spread {estimate['log_sd']:.3f}.", ""]
    protocol = decision["per_protocol"]
    lines += [f"Per protocol (only runs where the skill loaded; reported, not decided on): "
              f"{_estimate(protocol) if protocol else 'no estimate'}.", ""]
    bound = decision.get("exclusion_bound")
    if bound:
        worst = bound["estimate"]
        lines += [f"Excluded runs at their worst ({bound['imputed_candidate_runs']} candidate run(s) unresolved at "
                  f"their task's highest {metric}, {bound['imputed_incumbent_runs']} control run(s) resolved at its "
                  f"lowest): {bound['decision']}" + (f", {_estimate(worst)}" if worst else "") + ".", ""]
    header, *table = task_table(decision)
    lines += ["| " + " | ".join(header) + " |", "|---" * len(header) + "|",
              *("| " + " | ".join(cells) + " |" for cells in table)]
    seed = decision["seed"]
    if seed:
        lines += ["", f"Seed rule: median of task medians {_pct(seed['median_improvement_pct'])}, resolution margin "
                      f"{seed['resolution_margin']:+d} runs, {len(seed['gated_tasks'])}/{len(decision['tasks'])} "
                      "tasks gated."]
    if decision["metric_warning"]:
        lines += ["", f"Warning: {decision['metric_warning']}."]
    lines += ["", "Reasons:", "", *(f"- {reason}" for reason in decision["reasons"])]
    return lines


def task_table(decision: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """The per-task estimates as text cells, header first: report.md's table and the page's (skillevo.gate.page)."""
    metric, estimate = decision["metric"], decision["estimate"]
    interval = f"{100 * estimate['confidence']:g}% interval" if estimate else "interval"
    header = ("task", "control resolved", "candidate resolved", f"control {metric} per run (mean)",
              f"candidate {metric} per run (mean)", "improvement per resolved task", interval)
    table: list[tuple[str, ...]] = [header]
    for row in decision["tasks"]:
        inc, cand = row["incumbent"], row["candidate"]
        span = "–" if row["interval_pct"] is None else " to ".join(bound_text(v) for v in row["interval_pct"])
        table.append((row["task"], _resolved(inc), _resolved(cand), _number(_mean(inc, metric)),
                      _number(_mean(cand, metric)), _pct(row["improvement_pct"]), span))
    return table


def _mean(agg: Mapping[str, Any], metric: str) -> float | None:
    values = [s[metric] for s in agg["samples"]]
    return None if not values or None in values else sum(values) / len(values)


def _resolved(agg: Mapping[str, Any]) -> str:
    text = f"{agg['resolved']}/{agg['valid_runs']}"
    return f"{text} ({agg['excluded_runs']} excluded)" if agg["excluded_runs"] else text


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.6g}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}%"


def _write(path: Path, text: str) -> None:
    safefs.write_atomic(path, text.encode())
