"""The gate study's outputs: a table (markdown and CSV), a plot, and the three figures the targets are on."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend

from benchmarks.gate_model import (  # noqa: E402
    CVS,
    P_VALUES,
    RUNS,
    SCENARIOS,
    SEQUENTIAL_RUNS,
    Cell,
    SequentialRates,
    sequential_plan,
)
from skillevo import sampling, stats  # noqa: E402
from skillevo.config import Policy, SamplingParams  # noqa: E402

NULLS_IN_TARGET = ("boundary", "regression", "missing data")


def write(out: Path, rates: dict[Cell, tuple[float, float]], power_runs: dict[int, float],
          schedules: dict[tuple[int, bool], float], bound: float, decisions: int, policy: Policy) -> dict[str, float]:
    out.mkdir(parents=True, exist_ok=True)
    x = max(ours for cell, (ours, _) in rates.items() if cell.scenario in NULLS_IN_TARGET)
    z = max(theirs for cell, (_, theirs) in rates.items() if cell.scenario in NULLS_IN_TARGET)
    y = rates[Cell("20% cheaper", 1.0, 0.35, 10)][0]
    enough = next((runs for runs, power in sorted(power_runs.items()) if power >= 0.8), None)
    with (out / "rates.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["scenario", "null", "p", "cv", "runs", "stratified", "seed"])
        for cell, (ours, theirs) in rates.items():
            null = next(s.null for s in SCENARIOS if s.name == cell.scenario)
            w.writerow([cell.scenario, null, cell.p, cell.cv, cell.runs, f"{ours:.4f}", f"{theirs:.4f}"])
    se = math.sqrt(policy.alpha * (1 - policy.alpha) / decisions)
    lines = [
        "# Gate study", "",
        f"{decisions} decisions per cell; 4 tasks; alpha {policy.alpha:g} (cost tested at {policy.cost_alpha:.3g}), "
        f"min_improvement_pct {policy.min_improvement_pct:g}, max_resolution_drop_pct "
        f"{policy.max_resolution_drop_pct:g}. A null cell's target is alpha + 3 standard errors = {bound:.4f} "
        f"(one standard error is {se:.4f}).", "",
        f"- worst null cell (boundary, regression, missing data), stratified: **{x:.4f}**; seed rule: **{z:.4f}**",
        f"- power for a 20% saving at p = 1, CV 0.35, 10 runs: **{y:.4f}**",
        f"- runs a 20% saving needs for power 0.8 at CV 0.35 (p = 1): **{enough}** "
        f"({', '.join(f'{r}: {p:.2f}' for r, p in sorted(power_runs.items()))})",
        "- evolve on null candidates (boundary, p = 1, CV 0.35, 5 runs), share of schedules ending in a false "
        "promotion: " + "; ".join(f"{g} generation(s): {schedules[(g, False)]:.4f} without confirmation, "
                                  f"{schedules[(g, True)]:.4f} with" for g in sorted({g for g, _ in schedules})),
        "", "Promotion rate per cell (stratified / seed). Null scenarios: a promotion is false.", "",
    ]
    for scenario in SCENARIOS:
        lines += [f"## {scenario.name}{' (null)' if scenario.null else ''}", "",
                  "| p | CV | " + " | ".join(f"{r} runs" for r in RUNS) + " |", "|---|---|" + "---|" * len(RUNS)]
        for p in P_VALUES:
            for cv in CVS:
                cells = [rates[Cell(scenario.name, p, cv, r)] for r in RUNS]
                lines.append(f"| {p:g} | {cv:g} | " + " | ".join(f"{a:.3f} / {b:.3f}" for a, b in cells) + " |")
        lines.append("")
    (out / "table.md").write_text("\n".join(lines))
    _plot(out / "rates.svg", rates, bound)
    print("\n".join(lines[4:8]))
    print(f"table: {out / 'table.md'}; plot: {out / 'rates.svg'}")
    return {"x": x, "y": y, "z": z}


def _plot(path: Path, rates: dict[Cell, tuple[float, float]], bound: float) -> None:
    figure, axes = plt.subplots(len(P_VALUES), len(CVS), figsize=(12, 10), sharex=True, sharey=True)
    palette = plt.get_cmap("tab10")
    for i, p in enumerate(P_VALUES):
        for j, cv in enumerate(CVS):
            ax = axes[i][j]
            for k, scenario in enumerate(SCENARIOS):
                for column, style in ((0, "-"), (1, ":")):
                    ax.plot(RUNS, [rates[Cell(scenario.name, p, cv, r)][column] for r in RUNS], style,
                            color=palette(k), marker="o" if column == 0 else None,
                            label=f"{scenario.name} ({'stratified' if column == 0 else 'seed'})")
            ax.axhline(bound, color="grey", linewidth=0.8, linestyle="--")
            ax.set_title(f"p = {p:g}, CV = {cv:g}", fontsize=9)
            ax.set_xticks(RUNS)
            if i == len(P_VALUES) - 1:
                ax.set_xlabel("runs per task and arm")
            if j == 0:
                ax.set_ylabel("promotion rate")
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
    figure.suptitle("Promotion rate by scenario: solid stratified (default), dotted seed; dashed: null target")
    figure.tight_layout(rect=(0, 0.08, 1, 0.97))
    figure.savefig(path, format="svg", metadata={"Date": None})
    plt.close(figure)


def write_sequential(out: Path, rates: dict[Cell, SequentialRates], bound: float, decisions: int, policy: Policy,
                     plan: SamplingParams) -> dict[str, float]:
    """sequential.md and sequential.csv: per cell the fixed design, the sequential one (spending and bonferroni
    boundaries) on the same benches, and the candidate runs the sequential one spent."""
    out.mkdir(parents=True, exist_ok=True)
    nulls = [cell for cell in rates if cell.scenario in NULLS_IN_TARGET]
    x = max(rates[cell].spending for cell in nulls)
    xb = max(rates[cell].bonferroni for cell in nulls)
    xf = max(rates[cell].fixed for cell in nulls)
    power = rates[Cell("20% cheaper", 1.0, 0.35, 10)]
    runs_null = rates[Cell("boundary", 1.0, 0.35, 10)].runs
    with (out / "sequential.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["scenario", "null", "p", "cv", "runs", "fixed", "sequential", "bonferroni", "mean_runs",
                    "stopped_futility", "stopped_promote"])
        for cell, r in rates.items():
            null = next(s.null for s in SCENARIOS if s.name == cell.scenario)
            w.writerow([cell.scenario, null, cell.p, cell.cv, cell.runs, f"{r.fixed:.4f}", f"{r.spending:.4f}",
                        f"{r.bonferroni:.4f}", f"{r.runs:.3f}", f"{r.futility:.4f}", f"{r.early_promote:.4f}"])
    seq = plan.sequential
    looks = {runs: sampling.looks(sequential_plan(plan, runs)) for runs in SEQUENTIAL_RUNS}
    levels = {runs: [f"{level:.4f}" for level in stats.look_levels(looks[runs], policy.cost_alpha,
                                                                    policy.look_boundary)] for runs in SEQUENTIAL_RUNS}
    lines = [
        "# Gate study: sequential candidate runs", "",
        f"{decisions} decisions per cell, each on one simulated bench decided three ways: fixed (every run), "
        f"sequential (the candidate's runs shown look by look to skillevo.sampling.interim, the stopped side judged "
        f"at its look's spending boundary) and the same stopped side at the bonferroni boundary. Looks: "
        + "; ".join(f"{runs} runs: {list(looks[runs])} (cost levels {', '.join(levels[runs])})"
                    for runs in SEQUENTIAL_RUNS)
        + f". interim: efficacy alpha {seq.alpha:g}, min_improvement_pct {seq.min_improvement_pct:g}, "
        f"max_resolution_drop_pct {seq.max_resolution_drop_pct:g}, futility_p_value {seq.futility_p_value:g}, "
        f"futility_confidence {seq.futility_confidence:g}, futility_below_pct {seq.futility_below_pct:g}. "
        f"A null cell's target is alpha + 3 standard errors = {bound:.4f}.", "",
        f"- worst null cell (boundary, regression, missing data): sequential **{x:.4f}**, bonferroni "
        f"**{xb:.4f}**, fixed on the same benches **{xf:.4f}**",
        f"- power for a 20% saving at p = 1, CV 0.35, 10 runs: sequential **{power.spending:.4f}**, bonferroni "
        f"**{power.bonferroni:.4f}**, fixed **{power.fixed:.4f}**; mean candidate runs {power.runs:.2f} of 10",
        f"- mean candidate runs at the boundary null (p = 1, CV 0.35, 10 runs): **{runs_null:.2f}** of 10",
        "", "Per cell: promotion rate fixed / sequential / bonferroni, and the sequential design's mean candidate "
        "runs per (task, arm), at CV 0.2 and 0.5 (CV 0.35: the headline cells above). Null scenarios: a promotion "
        "is false.", "",
    ]
    for scenario in SCENARIOS:
        lines += [f"## {scenario.name}{' (null)' if scenario.null else ''}", "",
                  "| p | CV | " + " | ".join(f"{r} runs | mean runs" for r in SEQUENTIAL_RUNS) + " |",
                  "|---|---|" + "---|---|" * len(SEQUENTIAL_RUNS)]
        for p in sorted({cell.p for cell in rates}, reverse=True):
            for cv in sorted({cell.cv for cell in rates}):
                cells = [rates.get(Cell(scenario.name, p, cv, r)) for r in SEQUENTIAL_RUNS]
                if None in cells:  # a headline cell alone: in the summary above
                    continue
                lines.append(f"| {p:g} | {cv:g} | " + " | ".join(
                    f"{c.fixed:.3f} / {c.spending:.3f} / {c.bonferroni:.3f} | {c.runs:.2f}" for c in cells) + " |")
        lines.append("")
    (out / "sequential.md").write_text("\n".join(lines))
    print("\n".join(lines[4:7]))
    print(f"table: {out / 'sequential.md'}")
    return {"x": x, "y": power.spending, "f": power.fixed, "r": runs_null}
