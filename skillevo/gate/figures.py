"""Static pictures of a gate decision, drawn with matplotlib's SVG backend so they open anywhere, offline.

The SVG is made reproducible (no date, fixed hash salt and ids) so that the same promotion gives the same
bytes and DVC sees no change where there is none.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from types import ModuleType
from typing import Any


def _pyplot() -> ModuleType:
    """pyplot on the SVG backend, imported when a figure is drawn: matplotlib costs about a second, and apply
    (which re-derives the decision through this package) never draws."""
    import matplotlib

    matplotlib.use("svg")
    matplotlib.rcParams["svg.hashsalt"] = "skillevo"
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable, no font outlines
    import matplotlib.pyplot as plt

    return plt


def improvement_svg(promotion: Mapping[str, Any]) -> str:
    """Per candidate arm, each task's estimated improvement with its interval, and the overall estimate."""
    plt = _pyplot()
    decisions = promotion["decisions"]
    labels, points, lows, highs, colours = [], [], [], [], []
    palette = plt.get_cmap("tab10")
    for index, decision in enumerate(decisions):
        rows = [*decision["tasks"], None]
        for row in rows:
            if row is None:
                estimate = decision["estimate"]
                label, value, span = "all tasks", estimate and estimate["improvement_pct"], estimate and estimate[
                    "interval_pct"]
            else:
                label, value, span = row["task"], row["improvement_pct"], row["interval_pct"]
            labels.append(f"{label} ({decision['candidate_arm']})")
            points.append(value)
            lows.append(span[0] if span else None)
            highs.append(span[1] if span else None)
            colours.append(palette(index % 10))
    figure, axes = plt.subplots(figsize=(7, 0.4 * len(labels) + 1.2))
    try:
        for y, (value, low, high, colour) in enumerate(zip(points, lows, highs, colours, strict=True)):
            if value is None:
                continue
            if low is not None and high is not None:
                axes.plot([low, high], [y, y], color=colour, linewidth=2)
            axes.plot([value], [y], marker="o", color=colour)
        axes.axvline(0, color="grey", linewidth=0.8)
        minimum = promotion["policy"]["min_improvement_pct"]
        axes.axvline(minimum, color="grey", linewidth=0.8, linestyle="--")
        axes.set_yticks(range(len(labels)), labels)
        axes.invert_yaxis()
        axes.set_xlabel(f"{promotion['policy']['metric']} improvement, % (dashed: min_improvement_pct {minimum:g})")
        axes.set_title("Estimated improvement and interval, per task and overall" if decisions else
                       "No proposal this generation: nothing was measured")
        figure.tight_layout()
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")  # nothing clipped
    finally:
        plt.close(figure)
    return buffer.getvalue()
