"""The gate study's outputs: a table (markdown and CSV), a plot, and the three figures the targets are on."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend

from benchmarks.gate_model import CVS, P_VALUES, RUNS, SCENARIOS, Cell  # noqa: E402
from skillevo.config import Policy  # noqa: E402

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
