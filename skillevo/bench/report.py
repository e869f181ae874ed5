"""report.md for one bench side: per task x arm, what was resolved and what it cost, and, when the side has a
baseline arm (every session `none`: no skill installed), what each arm resolves and costs beyond it."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Set
from pathlib import Path
from typing import Any

from skillevo.core import layout
from skillevo.core.arms import is_baseline
from skillevo.core.results import EXCLUDED_ERROR_KINDS, aggregate
from skillevo.files import safefs

MCP_TOOL = re.compile(r"\bmcp__[A-Za-z0-9_-]+__[A-Za-z0-9_-]+")


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}"


def contamination(rows: list[dict[str, Any]]) -> list[str]:
    """Tasks where two different arms produced byte-identical patches."""
    by_task: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for row in rows:
        if row["patch"]:
            by_task[row["task"]][row["patch"]["sha256"]].add(row["arm"])
    return [f"{task}: arms {', '.join(sorted(arms))} produced the identical patch {sha[:12]}"
            for task, patches in sorted(by_task.items()) for sha, arms in sorted(patches.items()) if len(arms) > 1]


def _totals(aggs: dict[tuple[str, str], dict[str, Any]], arm: str, tasks: list[str]) -> tuple[int, int, float | None]:
    """(resolved, valid runs, sum of the per-task median costs) of one arm over `tasks`; cost None if unmeasured."""
    cells = [aggs[(task, arm)] for task in tasks]
    costs = [c["cost_usd"] for c in cells]
    return (sum(c["resolved"] for c in cells), sum(c["valid_runs"] for c in cells),
            None if None in costs else sum(costs))


def against_baseline(provenance: dict[str, Any], aggs: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """Per arm, against each baseline arm and each comparator arm, over the tasks both ran: resolution in points
    and cost in dollars and percent (the sum of per-task median costs), so what a skill buys and what it costs is
    read off one line."""
    names = [a["name"] for a in provenance["arms"]]
    lines = []
    references = [(a["name"], "baseline", "no skill installed") for a in provenance["arms"] if is_baseline(a["skills"])]
    references += [(a["name"], "comparator", f"the pinned skill set {c['source']} at {c['commit'][:12]}, "
                                             f"{c['path']}") for a in provenance["arms"] if (c := a.get("comparator"))]
    for base, kind, what in references:
        lines += [f"## Against the {kind} `{base}` ({what})", "",
                  f"| arm | resolved | {kind} resolved | resolution vs {kind} | cost $ | {kind} cost $ | "
                  f"cost vs {kind} |", "|---|---|---|---|---|---|---|"]
        for arm in (n for n in names if n != base):
            tasks = sorted(t for (t, a) in aggs if a == arm and (t, base) in aggs)
            (res, runs, cost), (b_res, b_runs, b_cost) = _totals(aggs, arm, tasks), _totals(aggs, base, tasks)
            points = "—" if not runs or not b_runs else f"{100 * (res / runs - b_res / b_runs):+.0f} points"
            delta = "—" if cost is None or not b_cost else f"{cost - b_cost:+.4f} ({100 * (cost / b_cost - 1):+.1f}%)"
            lines.append(f"| {arm} | {res}/{runs} | {b_res}/{b_runs} | {points} | {_fmt(cost, 4)} | "
                         f"{_fmt(b_cost, 4)} | {delta} |")
        lines += ["", "Over the tasks both arms ran; cost is the sum of the per-task medians.", ""]
    return lines


def named_mcp_tools(files: Iterable[bytes]) -> set[str]:
    """The MCP tools the skills tell the agent to call, by their full names (mcp__<server>__<tool>)."""
    return {m for data in files for m in MCP_TOOL.findall(data.decode(errors="replace"))}


def mcp_use(provenance: dict[str, Any], rows: list[dict[str, Any]], named: set[str]) -> list[str]:
    """Per arm and MCP tool (named by the skills, or called in some run): how many valid runs called it, and the
    ones to look at: a tool the skills name that runs never called, a call with no server in the arm."""
    tools = sorted(named | {t for r in rows for t in r["tool_uses"] if t.startswith("mcp__")})
    servers = {a["name"]: set(a.get("mcp") or ()) for a in provenance["arms"]}
    if not tools and not any(servers.values()):
        return []
    lines = ["## MCP tools", "", "| arm | servers | tool | runs that called it | note |", "|---|---|---|---|---|"]
    for arm in (a["name"] for a in provenance["arms"]):
        valid = [r for r in rows if r["arm"] == arm and r["error_kind"] not in EXCLUDED_ERROR_KINDS]
        for tool in tools:
            called = sum(1 for r in valid if r["tool_uses"].get(tool))
            server = tool.split("__")[1]
            note = ("**no server for it in this arm**: every call failed" if called and server not in servers[arm]
                    else f"**never called**, though the skills name it ({len(valid)} runs)"
                    if not called and tool in named and valid else "")
            lines.append(f"| {arm} | {', '.join(sorted(servers[arm])) or '—'} | `{tool}` | {called}/{len(valid)} | "
                         f"{note} |")
    return [*lines, "", "A run counts once however often it called the tool, whether or not a call succeeded.", ""]


def unloaded(family: Iterable[str], rows: list[dict[str, Any]]) -> list[str]:
    """The family's skills no valid run loaded: a change to one cannot move anything these arms measure."""
    valid = [r for r in rows if r["error_kind"] not in EXCLUDED_ERROR_KINDS]
    loaded = {name for r in valid for session in r["skills_loaded"] for name in session}
    never = sorted(set(family) - loaded)
    if not never or not valid:
        return []
    return ["## Skills no run loaded", "",
            *[f"- `{name}`: no valid run of this side loaded it, so a candidate that changes it has nothing to be "
              "measured by here; give an arm a session that names it (params arms), or make its description say "
              "when to use it if an `auto` arm should pick it" for name in never], ""]


def render(provenance: dict[str, Any], rows: list[dict[str, Any]], named: Set[str] = frozenset(),
           family: Iterable[str] = (), checked: Mapping[str, tuple[int, int, int]] | None = None) -> str:
    m = provenance["model"]
    classes = {b["id"]: b["class"] for b in provenance["task_bindings"]}
    aggs = aggregate(rows, classes, [a["name"] for a in provenance["arms"]])
    skipped = ", ".join(f"{s['id']} ({s['reason']})" for s in provenance["skipped_tasks"])
    lines = [f"# Bench — {provenance['side']} side", ""]
    if m["simulated"]:
        lines += ["**SIMULATED**: these sessions ran the real Claude Code CLI against skillevo's offline simulator, "
                  "not a model. Costs are what the CLI computed from simulated usage.", ""]
    sim = provenance["simulator"]
    noise = f"`{sim['noise']}` noise, seed {sim['seed']}; " if sim else ""
    served = provenance["served_models"]
    lines += [f"- model: `{m['name']}` via `{m['backend']}`; effort: {provenance['effort'] or 'default'}",
              f"- served by the API as: {', '.join(f'`{s}`' for s in served) or 'nothing (no session got an answer)'}"
              + (" — **more than one model served this side**" if len(served) > 1 else ""),
              f"- runs per arm: {provenance['runs']}; cells: {provenance['rows']} of {provenance['cells']} planned",
              f"- simulator: {noise}replicate {provenance['replicate']}" if sim else
              f"- replicate: {provenance['replicate']}",
              f"- arms: {', '.join(a['name'] for a in provenance['arms'])}",
              f"- skipped tasks: {skipped or 'none'}",
              "",
              "| task | class | arm | resolved | cost $ | input tok | output tok | turns | wall s | churn | errors |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (task, arm), a in sorted(aggs.items()):
        churn = ("—" if a["diff_files"] is None
                 else f"{a['diff_files']:.0f}f +{a['diff_insertions']:.0f} −{a['diff_deletions']:.0f}")
        errors = ", ".join(f"{k}×{n}" for k, n in a["error_kinds"].items()) or "—"
        lines.append(f"| {task} | {a['class']} | {arm} | {a['resolved']}/{a['valid_runs']} "
                     f"({a['excluded_runs']} excluded) | "
                     f"{_fmt(a['cost_usd'], 4)} | {_fmt(a['input_tokens'])} | {_fmt(a['output_tokens'])} | "
                     f"{_fmt(a['num_turns'])} | {_fmt(a['wall_s'], 1)} | {churn} | {errors} |")
    lines += ["", "Medians over valid runs. Token and turn columns count the main agent loop only.", ""]
    lines += against_baseline(provenance, aggs)
    lines += mcp_use(provenance, rows, set(named))
    lines += unloaded(family, rows) if provenance["side"] == "incumbent" else []
    lines += task_checks(provenance, checked) if provenance["side"] == "incumbent" else []
    alarms = contamination(rows)
    if alarms:
        lines += ["## Contamination alarm", ""]
        if m["simulated"]:
            lines += ["(The simulated agent follows the same playbook in every arm, so identical patches across arms "
                      "are expected here; with a real model they suggest that workspaces leaked between cells.)", ""]
        lines += [f"- {a}" for a in alarms] + [""]
    return "\n".join(lines)


def task_checks(provenance: dict[str, Any], checked: Mapping[str, tuple[int, int, int]] | None) -> list[str]:
    """Each task's flake rate, as the task checks measured it before this side paid (a flaky task is refused there),
    or why they did not run."""
    lines = ["## Task checks: oracle and verify stability", ""]
    if checked is None:
        return [*lines, "Not run by this bench: every cell was served from the cell store (`skillevo check` runs "
                        "them).", ""]
    lines += ["Each task's visible check and hidden oracle ran at the bug and with its solution, each run in a fresh "
              "workspace (TZ=UTC, PYTHONHASHSEED=0, LC_ALL=C.UTF-8); a run whose outcome differs from the first "
              "run's on the same tree is flaky, and its task is refused before anything is paid.", "",
              "| task | runs at the bug | runs with the solution | runs whose outcome differed (flake rate) |",
              "|---|---|---|---|"]
    for task in sorted(checked):
        bug, solved, differed = checked[task]
        rate = 100 * differed / (bug + solved)
        lines.append(f"| {task} | {bug} | {solved or 'no solution'} | {differed} ({rate:.0f}%) |")
    return [*lines, ""]


def write_report(path: Path, provenance: dict[str, Any], rows: list[dict[str, Any]],
                 skills: Mapping[str, bytes] | None = None,
                 checked: Mapping[str, tuple[int, int, int]] | None = None) -> None:
    """`skills`: the family's files as the side installed them (the MCP tools they name); `checked`: what each
    task's checks saw before the side paid (skillevo.bench.task_soundness.Stability; None: they did not run)."""
    files = skills or {}
    safefs.write_atomic(path, render(provenance, rows, named_mcp_tools(files.values()),
                                     layout.skill_names_in(dict(files)), checked).encode())
