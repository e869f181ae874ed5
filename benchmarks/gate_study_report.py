"""The gate study's outputs: table.md, rates.csv and rates.svg, and the figures the last line reports."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # after choosing the backend

from benchmarks.gate_model import BASE_CV, BASE_P, BY_NAME, DESIGNS, SCENARIOS, Cell, truth
from skillevo.core.config import Policy, SamplingParams


@dataclass
class Study:
    decisions: int
    policy: Policy
    sampling: SamplingParams
    runs: Sequence[int]
    grid: dict[Cell, tuple[float, ...]] = field(default_factory=dict)  # (per_resolved, geometric)
    robust: dict[Cell, tuple[float, ...]] = field(default_factory=dict)
    power: dict[Cell, tuple[float, ...]] = field(default_factory=dict)
    sequential: dict[Cell, Any] = field(default_factory=dict)  # SequentialRates
    schedules: dict[tuple[int, bool], float] = field(default_factory=dict)
    family_alpha: float = 0.05  # params gate.family_alpha (skillevo.gate.family)
    family_schedules: int = 500  # 20-generation runs simulated per rate

    @property
    def family_bound(self) -> float:
        """family_alpha plus 3 standard errors of a rate measured over family_schedules runs."""
        return self.family_alpha + 3 * (self.family_alpha * (1 - self.family_alpha) / self.family_schedules) ** 0.5
    claims: dict[Cell, tuple[float, ...]] = field(default_factory=dict)  # the cases, each as it names it
    headline: dict[Cell, Any] = field(default_factory=dict)  # SequentialRates under the default schedule
    preflight: dict[Cell, tuple[float, float, Any]] = field(default_factory=dict)  # stated power, runs; measured

    @property
    def bound(self) -> float:
        a = self.policy.alpha
        return a + 3 * math.sqrt(a * (1 - a) / self.decisions)


def write(out: Path, study: Study, nulls: Sequence[str]) -> dict[str, Any]:
    """Write the outputs; return x (the worst null cell of the design skillevo runs), y and n."""
    out.mkdir(parents=True, exist_ok=True)
    null_cells: list[tuple[float, str]] = []
    for part, rates in (("claims", study.claims), ("grid", study.grid), ("robust", study.robust)):  # betting first
        null_cells += [(r[0], f"{part} {_label(c)}") for c, r in rates.items()
                       if c.scenario in nulls and c.design == "interleaved"]
    null_cells += [(r.spending, f"sequential {_label(c)}") for c, r in (*study.sequential.items(),
                                                                       *study.headline.items())
                   if c.scenario in nulls]
    x, worst = max(null_cells, default=(0.0, "none"))
    separate = max((r[0] for c, r in study.grid.items() if c.scenario in nulls and c.design == "separate"),
                   default=None)
    geometric = max((r[1] for c, r in study.grid.items() if c.scenario in nulls and c.design == "interleaved"),
                    default=None)
    curve = {c.runs: r[0] for c, r in study.power.items() if c.scenario == "20% cheaper" and c.p == 1.0
             and c.cv == 0.35}
    real = next((r for c, r in study.headline.items() if c.scenario == "20% cheaper"), None)
    y = real.spending if real else float("nan")
    n = real.runs if real else float("nan")
    _csv(out / "rates.csv", study, nulls)
    lines = _summary(study, x, worst, separate, geometric, y, n, curve)
    boot = [(r[1], _label(c)) for c, r in study.claims.items() if c.scenario in nulls and c.design == "interleaved"]
    if boot:
        lines.insert(-1, "- worst null cell of the claims under the bootstrap-t test (`gate.test: bootstrap`): "
                         "**{:.4f}** ({})".format(*max(boot)))
    if study.preflight:
        over = max(stated - measured.spending for stated, _, measured in study.preflight.values())
        lines.insert(-1, f"- the preflight's stated power less the study's, at {len(study.preflight)} "
                         f"configuration(s): at most **{over:+.3f}**")
    lines += _claims_table(study, nulls)
    lines += _preflight_table(study)
    lines += _grid_tables(study, nulls)
    lines += _robust_table(study)
    lines += _power_table(study)
    lines += _sequential_table(study, nulls)
    lines += _schedule_lines(study)
    (out / "table.md").write_text("\n".join(lines) + "\n")
    if study.grid:
        _plot(out / "rates.svg", study, nulls)
    print("\n".join(line for line in lines if line.startswith("- ")))
    print(f"table: {out / 'table.md'}")
    return {"x": x, "y": y, "n": n, "worst": worst}


def _label(cell: Cell) -> str:
    return f"{cell.scenario} / {cell.design} / {cell.runs} runs / p {cell.p:g} / CV {cell.cv:g}"


def _csv(path: Path, study: Study, nulls: Sequence[str]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["part", "scenario", "null", "design", "p", "cv", "runs", "per_resolved", "geometric"])
        for part, rates in (("grid", study.grid), ("robust", study.robust), ("power", study.power)):
            for c, r in rates.items():
                w.writerow([part, c.scenario, c.scenario in nulls, c.design, c.p, c.cv, c.runs, f"{r[0]:.4f}",
                            f"{r[1]:.4f}" if len(r) > 1 else ""])
        for c, r in study.sequential.items():
            w.writerow(["sequential", c.scenario, c.scenario in nulls, c.design, c.p, c.cv, c.runs,
                        f"{r.spending:.4f}", ""])


def _claims_table(study: Study, nulls: Sequence[str]) -> list[str]:
    """The issue's cases at the configurations it names, and the default schedule's headline."""
    if not study.claims and not study.headline:
        return []
    lines = ["## Every promotion path's nulls, the tails, the controls and faults (issue 29)", "",
             "Promotion rate under the test by betting (the claim's test) and, beside it, the bootstrap-t test "
             "(`gate.test: bootstrap`) on the same simulated generations.", "",
             "| case | design | tasks x runs | p | truth | betting | bootstrap-t |", "|---|---|---|---|---|---|---|"]
    for c, r in study.claims.items():
        s = BY_NAME[c.scenario]
        mark = " (null)" if c.scenario in nulls else ""
        lines.append(f"| {c.scenario}{mark}: {s.what} | {c.design} | {c.tasks} x {c.runs} | {c.p:g} | "
                     f"{truth(s, c.p, c.cv):.3f} | {r[0]:.4f} | {r[1]:.4f} |")
    for c, r in study.headline.items():
        lines.append(f"| {c.scenario}: the default schedule (sequential, at most {c.runs} runs a task) | "
                     f"{c.design} | {c.tasks} x {c.runs} | {c.p:g} | {truth(BY_NAME[c.scenario], c.p, c.cv):.3f} | "
                     f"{r.spending:.4f} (mean {r.runs:.1f} runs a task; futile early {r.futility:.3f}, promoted "
                     f"early {r.early_promote:.3f}) | |")
    return lines + [""]


def _preflight_table(study: Study) -> list[str]:
    """What the preflight states (skillevo.core.planned, from simulated incumbent sides) beside what the study
    measures, for a 20% saving per run under the default schedule."""
    if not study.preflight:
        return []
    lines = ["## The preflight's stated power against the study's", "",
             "A 20% saving per run at the default schedule. Stated: the preflight stage's own call, averaged over "
             "simulated incumbent sides it reads; measured: the gate's decisions on the study's generations.", "",
             "| p | CV | tasks x runs | stated power (mean runs) | measured power (mean runs) | difference |",
             "|---|---|---|---|---|---|"]
    for c, (stated, runs, measured) in study.preflight.items():
        lines.append(f"| {c.p:g} | {c.cv:g} | {c.tasks} x {c.runs} | {stated:.3f} ({runs:.1f}) | "
                     f"{measured.spending:.3f} ({measured.runs:.1f}) | {stated - measured.spending:+.3f} |")
    return lines + [""]


def _summary(study: Study, x: float, worst: str, separate: float | None, geometric: float | None, y: float,
             n: float, curve: dict[int, float]) -> list[str]:
    p = study.policy
    se = math.sqrt(p.alpha * (1 - p.alpha) / study.decisions)
    lines = [
        "# Gate study", "",
        f"{study.decisions} decisions per cell; 4 tasks (0.5, 1, 2, 4 USD a run); params.yaml's policy: alpha "
        f"{p.alpha:g}, min_improvement_pct {p.min_improvement_pct:g}, "
        f"max_resolution_drop_pct {p.max_resolution_drop_pct:g}, min_runs {p.min_runs}, min_total_runs "
        f"{p.min_total_runs}. A null cell's target is alpha + 3 standard errors = {study.bound:.4f} (one standard "
        f"error is {se:.4f}). Truth is the candidate's dollars per resolved task relative to the incumbent's.", "",
    ]
    lines.append(f"- worst null cell, interleaved design (every part): **{x:.4f}** ({worst})")
    if separate is not None:
        lines.append(f"- worst null cell, separate design (stored incumbent runs as the control): **{separate:.4f}**")
    if geometric is not None:
        lines.append(f"- worst null cell, the geometric-mean test on the same interleaved benches: **{geometric:.4f}**")
    if not math.isnan(y):
        lines.append(f"- power for a 20% saving at p 0.85, CV {BASE_CV:g}, 4 tasks, under the default schedule "
                     f"(sequential, at most {study.sampling.runs} runs a task): **{y:.4f}**, at a mean **{n:.1f}** "
                     "runs a task")
    if curve:
        lines.append("- power for a 20% saving at p = 1, CV 0.35, fixed runs: "
                     + ", ".join(f"{r}: {v:.2f}" for r, v in sorted(curve.items())))
    return lines + [""]


def _grid_tables(study: Study, nulls: Sequence[str]) -> list[str]:
    if not study.grid:
        return []
    runs = sorted({c.runs for c in study.grid})
    designs = [d for d in DESIGNS if any(c.design == d for c in study.grid)]  # --reduced runs interleaved only
    lines = ["## Every scenario, " + ("both designs" if len(designs) > 1 else designs[0]) + " (p 0.9, CV 0.35)", "",
             "Promotion rate per_resolved / geometric. Null scenarios (truth >= 1): a promotion is false. "
             "interleaved is the design skillevo runs; separate is the design before it.", "",
             "| scenario | truth | " + " | ".join(f"{d} {r} runs" for d in designs for r in runs) + " |",
             "|---|---|" + "---|" * (len(designs) * len(runs))]
    for s in SCENARIOS:
        found = [study.grid.get(Cell(s.name, d, r)) for d in designs for r in runs]
        if None in found:
            continue
        mark = " (null)" if s.name in nulls else ""
        lines.append(f"| {s.name}{mark}: {s.what} | {truth(s, BASE_P, BASE_CV):.3f} | "
                     + " | ".join(f"{a[0]:.3f} / {a[1]:.3f}" for a in found) + " |")
    return lines + [""]


def _robust_table(study: Study) -> list[str]:
    if not study.robust:
        return []
    settings = sorted({(c.p, c.cv) for c in study.robust}, reverse=True)
    runs = sorted({c.runs for c in study.robust})
    lines = ["## Nulls at other resolution and spread (interleaved)", "",
             "| scenario | " + " | ".join(f"p {p:g}, CV {cv:g}, {r} runs" for p, cv in settings for r in runs) + " |",
             "|---|" + "---|" * (len(settings) * len(runs))]
    for name in dict.fromkeys(c.scenario for c in study.robust):
        lines.append(f"| {name} | " + " | ".join(
            f"{study.robust[Cell(name, 'interleaved', r, p, cv)][0]:.3f}" for p, cv in settings for r in runs) + " |")
    return lines + [""]


def _power_table(study: Study) -> list[str]:
    if not study.power:
        return []
    lines = ["## Power (interleaved, p = 1, CV 0.35)", "", "| saving | runs | promoted |", "|---|---|---|"]
    for c, r in sorted(study.power.items(), key=lambda item: (item[0].scenario, item[0].runs)):
        lines.append(f"| {c.scenario} | {c.runs} | {r[0]:.3f} |")
    return lines + [""]


def _sequential_table(study: Study, nulls: Sequence[str]) -> list[str]:
    if not study.sequential:
        return []
    seq = study.sampling.sequential
    lines = ["## Sequential candidate runs (interleaved)", "",
             f"interim: efficacy alpha {seq.alpha:g}, min_improvement_pct {seq.min_improvement_pct:g}, "
             f"min_total_runs {seq.min_total_runs}, futility_p_value {seq.futility_p_value:g}, futility_confidence "
             f"{seq.futility_confidence:g}, futility_below_pct {seq.futility_below_pct:g}; looks every "
             f"{seq.batch} runs from {seq.first}.", "",
             "| scenario | p | runs | fixed | sequential | mean candidate runs | stopped for futility | stopped to "
             "promote |", "|---|---|---|---|---|---|---|---|"]
    for c, r in study.sequential.items():
        mark = " (null)" if c.scenario in nulls else ""
        lines.append(f"| {c.scenario}{mark} | {c.p:g} | {c.runs} | {r.fixed:.3f} | {r.spending:.3f} | {r.runs:.2f} | "
                     f"{r.futility:.3f} | {r.early_promote:.3f} |")
    return lines + [""]


def _schedule_lines(study: Study) -> list[str]:
    if not study.schedules:
        return []
    return ["## make evolve on null candidates (boundary, 10 runs)", "",
            "Share of schedules ending in a false promotion: " + "; ".join(
                f"{g} generation(s): {study.schedules[(g, False)]:.4f} without confirmation, "
                f"{study.schedules[(g, True)]:.4f} with" for g in sorted({g for g, _ in study.schedules})), "",
            f"With confirmation, each generation spends gate.alpha squared of gate.family_alpha {study.family_alpha:g} "
            "(skillevo/gate/family.py: the union bound over generations, no independence between them assumed); "
            f"the longest schedule is the evolution the default budget allows. Target: {study.family_bound:.4f} "
            f"(family_alpha + 3 standard errors at {study.family_schedules} schedules).", ""]


def _plot(path: Path, study: Study, nulls: Sequence[str]) -> None:
    runs = sorted({c.runs for c in study.grid})
    figure, axes = plt.subplots(1, 2, figsize=(13, 6), sharey=True)
    palette = plt.get_cmap("tab20")
    for ax, design in zip(axes, DESIGNS[:2], strict=True):  # the unrandomised reference is in the claims table
        for k, s in enumerate(SCENARIOS):
            found = [study.grid.get(Cell(s.name, design, r)) for r in runs]
            if None in found:
                continue
            style = "-" if s.name in nulls else "--"
            ax.plot(runs, [f[0] for f in found], style, marker="o", color=palette(k % 20), label=s.name)
        ax.axhline(study.bound, color="grey", linewidth=0.8, linestyle=":")
        ax.set_title(f"{design} design", fontsize=10)
        ax.set_xticks(runs)
        ax.set_xlabel("runs per task and arm")
    axes[0].set_ylabel("promotion rate (per_resolved)")
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=5, fontsize=8)
    figure.suptitle("Promotion rate by scenario: solid nulls, dashed savings; dotted: the null target")
    figure.tight_layout(rect=(0, 0.14, 1, 0.95))
    figure.savefig(path, format="svg", metadata={"Date": None})
    plt.close(figure)


__all__ = ["BY_NAME", "Study", "write"]
