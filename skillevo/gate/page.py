"""The gate's page, results/gate/index.html: one static file a person opens in a browser, offline, from file://.

Why a page beside report.md: the report is the record, but a reader who asks *why* an arm was promoted or kept
needs the runs themselves, hundreds of transcripts in two directories. The page puts the decision per candidate
arm first (the words of the gate's own lines and report.md, from skillevo.gate.report: a rule lives in one place),
then the per-task effects with their intervals, the cost ledger, the proposal with its overlay diff, and every
cell's transcript one click away: each cell is a closed <details> whose body carries a stable id derived from the
cell (`cell-<side>-<task>-<arm>-run<n>`), so a link to `index.html#cell-...` opens it (a browser reveals a
closed <details> that holds the fragment's target), and the page's index links every cell.

Everything an agent may have written (transcripts, the proposal, the diff, task ids) is escaped with html.escape:
the page has no script, loads nothing (its CSS inline, the picture a data: URI, no external font) and stays
bounded: each cell shows at most CELL_CAP of its rendered transcripts, all cells at most PAGE_CAP, the proposal
and the diff TEXT_CAP each; whatever is cut says so, with the command that shows the whole.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from itertools import chain
from pathlib import Path
from typing import Any

from skillevo.core import memory, prediction, transcript_text
from skillevo.core.results import EXCLUDED_ERROR_KINDS, Side, cell_name, read_artifact, side_totals
from skillevo.files import safefs
from skillevo.files.errors import BadInput
from skillevo.gate.report import (
    ESTIMAND,
    NO_PROPOSAL_LINE,
    SIMULATED_NOTICE,
    sequential_line,
    summary_line,
    task_table,
)
from skillevo.stats import bound_text, improvement_text, p_text

PAGE = "index.html"
CELL_CAP = 64 << 10  # UTF-8 bytes of rendered transcript text shown per cell
PAGE_CAP = 16 << 20  # ... and over every cell of the page
TEXT_CAP = 256 << 10  # the proposal's text, and its overlay diff
MAX_INPUT_BYTES = 8 << 20  # proposal.md, and each overlay or skill file read for the diff

CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;
padding:0 1.2em 4em;color:#1d1d1f;background:#fff}
nav{position:sticky;top:0;background:#fff;border-bottom:1px solid #ddd;padding:.5em 0;z-index:1}
nav a{margin-right:1.2em}
h1{margin:.6em 0 .2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:.4em .8em}
.arm{border:1px solid #ccc;border-left-width:8px;border-radius:4px;padding:.5em 1em;margin:.8em 0}
.promote{border-left-color:#1a7f37}.keep_incumbent{border-left-color:#cf222e}
.insufficient_evidence{border-left-color:#9a6700}
.verdict{font-size:1.5em;font-weight:600;margin:.2em 0}
.figure{font-size:1.2em}
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #ddd;padding:.2em .6em;text-align:left}
th{background:#f6f8fa}td:first-child{white-space:nowrap}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;padding:.6em;border-radius:4px;
font:13px/1.4 ui-monospace,"DejaVu Sans Mono",monospace}
.add{color:#1a7f37}.del{color:#cf222e}.hunk{color:#8250df}
details.cell{border:1px solid #ddd;border-radius:4px;margin:.25em 0;padding:.2em .6em}
details.cell summary{cursor:pointer}.ok{color:#1a7f37}.bad{color:#cf222e}.out{color:#9a6700}
.body{scroll-margin-top:5em}.body:target{outline:3px solid #0969da}
.cut{color:#cf222e;font-weight:600}
"""


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _inline(markdown: str) -> str:
    """The report's own sentences (never an agent's text) with **bold** and `code`, escaped first."""
    text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", _e(markdown))
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)


def capped(text: str, cap: int) -> tuple[str, bool]:
    """`text` cut to at most `cap` UTF-8 bytes (never inside a character), and whether it was cut."""
    data = text.encode()
    return (text, False) if len(data) <= cap else (data[:cap].decode("utf-8", errors="ignore"), True)


def cell_id(side: str, row: Mapping[str, Any]) -> str:
    """The cell's stable anchor. Task and arm names are already [A-Za-z0-9._-]; anything else is replaced."""
    raw = f"{side}-{row['task']}-{row['arm']}-run{row['run']}"
    return "cell-" + re.sub(r"[^A-Za-z0-9._-]", "_", raw)


def _table(rows: Sequence[Sequence[Any]], numeric: Iterable[int] = ()) -> str:
    header, *body = rows
    numeric = set(numeric)
    out = ["<table><tr>", *(f"<th>{_e(h)}</th>" for h in header), "</tr>"]
    for cells in body:
        out.append("<tr>" + "".join(f"<td{' class=n' if i in numeric else ''}>{_e(c)}</td>"
                                    for i, c in enumerate(cells)) + "</tr>")
    return "".join(out) + "</table>"


def _decisions(promotion: Mapping[str, Any]) -> list[str]:
    out = ['<section id="decision"><h2>Decision</h2>']
    if promotion.get("no_proposal"):  # the proposer declined: nothing was frozen, measured or decided
        out.append(f'<div class="arm insufficient_evidence"><p class="verdict">no_proposal</p><p>'
                   f'{_e(NO_PROPOSAL_LINE)}. The proposer\'s reason: {_e(promotion["no_proposal"])}</p></div>')
    for d in promotion["decisions"]:
        estimate = d["estimate"]
        out.append(f'<div class="arm {_e(d["decision"])}"><p class="verdict">{_e(d["candidate_arm"])}: '
                   f'{_e(d["decision"])}</p>')
        if estimate:
            low, high = estimate["interval_pct"]
            out.append(f'<p class="figure">estimated improvement <strong>{_e(improvement_text(estimate))}</strong> '
                       f'in {_e(d["metric"])} ({100 * estimate["confidence"]:g}% interval {_e(bound_text(low))} to '
                       f'{_e(bound_text(high))}, {_e(p_text(estimate))}) against {_e(d["incumbent_arm"])}</p>')
        out.append(f"<p>{_e(summary_line(d))}</p>")
        out += ["<ul>", *(f"<li>{_e(r)}</li>" for r in d["reasons"]), "</ul></div>"]
    if promotion.get("sequential"):
        out.append(f"<p>{_inline(sequential_line(promotion['sequential'], promotion['policy']))}</p>")
    if promotion["candidate_origin"] == "proposer" and promotion["decisions"]:
        out.append(f'<p class="prediction">{_e(prediction.line(promotion.get("prediction")))}</p>')
    out.append(f"<p>{_inline(ESTIMAND)}</p></section>")
    return out


def _effects(promotion: Mapping[str, Any], svg: str | None) -> list[str]:
    out = ['<section id="effects"><h2>Effects per task</h2>']
    if svg:
        data = base64.b64encode(svg.encode()).decode()
        out.append(f'<p><img alt="estimated improvement per task, with intervals" '
                   f'src="data:image/svg+xml;base64,{data}"></p>')
    for d in promotion["decisions"]:
        out.append(f"<h3>{_e(d['candidate_arm'])} vs {_e(d['incumbent_arm'])}: {_e(d['decision'])}</h3>")
        out.append(_table(task_table(d), numeric=range(1, 7)))
    return [*out, "</section>"]


def _ledger(sides: Sequence[Side]) -> list[str]:
    rows: list[tuple[Any, ...]] = [("side", "arm", "runs", "sessions", "measured cost (USD)", "runs unmeasured")]
    for side in sides:
        name = side.bench["side"]
        for arm in sorted({r["arm"] for r in side.rows}):
            t = side_totals(r for r in side.rows if r["arm"] == arm)
            rows.append((name, arm, t["runs"], t["sessions"], f"{t['total_cost_usd']:.4f}", t["unmeasured_cost_runs"]))
        t = side_totals(side.rows)
        rows.append((name, "all arms", t["runs"], t["sessions"], f"{t['total_cost_usd']:.4f}",
                     t["unmeasured_cost_runs"]))
    out = ['<section id="cost"><h2>Cost ledger</h2>', _table(rows, numeric=range(2, 6))]
    for side in sides:
        store = side.bench.get("cell_store")
        if store:
            out.append(f"<p>{_e(side.bench['side'])} side, cell store: {_e(store['served'])} cell(s) served, "
                       f"{_e(store['paid'])} paid, {_e(store['stored'])} stored.</p>")
    return [*out, "</section>"]


def _capped_pre(text: str, what: str, whole: str, css: str = "") -> str:
    shown, cut = capped(text, TEXT_CAP)
    body = "\n".join(_diff_line(line) for line in shown.splitlines()) if css == "diff" else _e(shown)
    note = f'<p class="cut">{_e(what)} cut at {TEXT_CAP >> 10} KiB; the whole: {_e(whole)}</p>' if cut else ""
    return f"<pre>{body}</pre>{note}"


def _diff_line(line: str) -> str:
    kind = ("hunk" if line.startswith("@@") else "add" if line.startswith("+") and not line.startswith("+++")
            else "del" if line.startswith("-") and not line.startswith("---") else "")
    return f'<span class="{kind}">{_e(line)}</span>' if kind else _e(line)


def _proposal(manifest: Mapping[str, Any] | None, proposal: str | None, diff: str | None) -> list[str]:
    out = ['<section id="proposal"><h2>The proposal</h2>']
    if manifest is not None:
        files = ", ".join(f"{f['path']}{' (executable)' if f['executable'] else ''}" for f in manifest["files"])
        out += ["<ul>", f"<li>candidate: {_e(manifest['candidate_origin'])}, proposer model "
                f"{_e(manifest['proposer_model'] or '–')}, overlay digest <code>{_e(manifest['overlay_digest'])}"
                "</code></li>", f"<li>files: {_e(files)} ({_e(manifest['changed_lines'])} changed lines)</li>",
                f"<li>required arms: {_e(', '.join(manifest['required_candidate_arms']) or '–')}</li>"]
        for what, label in (("frontmatter_changes", "frontmatter"), ("script_changes", "scripts")):
            changes = manifest[what]
            out.append(f"<li>{label}: {'unchanged' if not changes else f'{len(changes)} change(s)'}"
                       + "".join(f"<br>{_e(c)}" for c in changes) + "</li>")
        out.append("</ul>")
    out.append("<h3>proposal.md</h3>")
    out.append(_capped_pre(proposal, "proposal.md", "results/proposal/proposal.md") if proposal is not None
               else "<p>No proposal text was given to the gate.</p>")
    out.append("<h3>Overlay diff against the incumbent skills</h3>")
    out.append("<p>No overlay diff was given to the gate (report.md lists the files).</p>" if diff is None else
               "<p>The overlay changes nothing.</p>" if not diff else
               _capped_pre(diff, "the diff", "results/freeze/overlay", "diff"))
    return [*out, "</section>"]


class _Budget:
    """What is left of PAGE_CAP for the transcripts still to render."""

    def __init__(self) -> None:
        self.left = PAGE_CAP


def _transcript(side: Side, row: Mapping[str, Any], budget: _Budget) -> str:
    """The cell's transcripts as `skillevo show` prints them, cut at CELL_CAP (and what is left of PAGE_CAP)."""
    if not row["transcripts"]:
        return "<p>No transcript recorded for this cell.</p>"
    whole = " ".join(f"{side.directory}/{meta['path']}" for meta in row["transcripts"])
    if budget.left <= 0:
        return (f'<p class="cut">Not inlined: the page holds at most {PAGE_CAP >> 20} MiB of transcripts. '
                f"The whole: <code>skillevo show {_e(whole)}</code></p>")
    cap, parts, size = min(CELL_CAP, budget.left), [], 0
    for meta in row["transcripts"]:
        where = f"{side.directory}/{meta['path']}"
        try:
            steps = transcript_text.lines(transcript_text.parse(read_artifact(meta, side.directory), where))
        except BadInput as e:
            steps = iter([f"unreadable: {e}"])
        for line in chain([f"== {meta['path']}"], steps):  # render no further than the cap: a flood stops here
            parts.append(line)
            size += len(line.encode()) + 1
            if size > cap:
                break
        if size > cap:
            break
    shown, cut = capped("\n".join(parts), cap)
    budget.left -= len(shown.encode())
    note = (f'<p class="cut">Cut: the page shows at most {CELL_CAP >> 10} KiB of each cell\'s transcripts. '
            f"The whole: <code>skillevo show {_e(whole)}</code></p>") if cut else ""
    return f"<pre>{_e(shown)}</pre>{note}"


def _outcome(row: Mapping[str, Any]) -> tuple[str, str]:
    if row["error_kind"] in EXCLUDED_ERROR_KINDS:  # left out of the statistics
        return "out", f"excluded: {row['error_kind']}"
    return ("ok", "resolved") if row["resolved"] else ("bad", f"unresolved ({row['error_kind'] or 'no reason'})")


def _cells(sides: Sequence[Side]) -> list[str]:
    out = ['<section id="cells"><h2>Every cell</h2>',
           f"<p>One line per cell (a task, an arm, a run); open it for its transcripts as <code>skillevo show</code> "
           f"prints them, at most {CELL_CAP >> 10} KiB a cell and {PAGE_CAP >> 20} MiB in all.</p>"]
    budget = _Budget()
    for side in sides:
        name = side.bench["side"]
        rows = sorted(side.rows, key=lambda r: (r["task"], r["arm"], r["run"]))
        tasks, arms = sorted({r["task"] for r in rows}), sorted({r["arm"] for r in rows})
        out.append(f'<h3 id="side-{_e(name)}">{_e(name)} side ({len(rows)} cells, {_e(side.directory)})</h3>')
        index = [("task", *arms)]
        links: dict[tuple[str, str], list[str]] = {}
        for r in rows:
            links.setdefault((r["task"], r["arm"]), []).append(
                f'<a class="{_outcome(r)[0]}" href="#{cell_id(name, r)}">{_e(r["run"])}</a>')
        out.append("<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in index[0]) + "</tr>")
        for task in tasks:
            out.append(f"<tr><td>{_e(task)}</td>" + "".join(
                f"<td>{' '.join(links.get((task, arm), ['–']))}</td>" for arm in arms) + "</tr>")
        out.append("</table>")
        for r in rows:
            css, outcome = _outcome(r)
            cost = "cost unmeasured" if r["cost_usd"] is None else f"${r['cost_usd']:.4f}"
            out.append(f'<details class="cell"><summary>{_e(cell_name(r))}: <span class="{css}">{_e(outcome)}'
                       f"</span>, {_e(cost)}, {_e(r['num_turns'])} turn(s), {_e(r['wall_s'])} s</summary>"
                       f'<div class="body" id="{cell_id(name, r)}">{_transcript(side, r, budget)}</div></details>')
    return [*out, "</section>"]


def render(promotion: Mapping[str, Any], sides: Sequence[Side], manifest: Mapping[str, Any] | None = None, *,
           svg: str | None = None, proposal: str | None = None, overlay_diff: str | None = None) -> str:
    """The whole page: decision, effects, cost, proposal, cells, provenance."""
    backend = promotion["backend"]
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           "<title>skillevo gate: " + _e(", ".join(f"{d['candidate_arm']} {d['decision']}"
                                                   for d in promotion["decisions"])) + "</title>",
           f"<style>{CSS}</style></head><body>",
           '<nav><a href="#decision">Decision</a><a href="#effects">Effects per task</a><a href="#cost">Cost</a>'
           '<a href="#proposal">Proposal</a><a href="#cells">Every cell</a><a href="#provenance">Provenance</a></nav>',
           "<h1>Gate decision</h1>"]
    if backend["simulated"]:
        out.append(f'<p class="note">{_inline(SIMULATED_NOTICE)}</p>')
    out += [*_decisions(promotion), *_effects(promotion, svg), *_ledger(sides), *_proposal(manifest, proposal,
                                                                                          overlay_diff)]
    out += _cells(sides)
    out += ['<section id="provenance"><h2>Provenance</h2><ul>',
            f"<li>benchmark model <code>{_e(promotion['benchmark_model'])}</code>, backend "
            f"<code>{_e(backend['backend'])}</code>, simulated: {'yes' if backend['simulated'] else 'no'}, "
            f"effort <code>{_e(promotion['effort'])}</code></li>",
            f"<li>generated {_e(promotion['generated_at'])}, evidence expires "
            f"{_e(promotion['evidence_expires_at'])}</li>",
            "<li>the same figures, as the record: report.md and promotion.json beside this page</li>",
            "</ul></section></body></html>"]
    return "\n".join(out) + "\n"


def load_candidate(proposal: Path | None, overlay: Path | None, skills: Path | None
                   ) -> tuple[str | None, str | None]:
    """proposal.md's text, and the frozen overlay's unified diff against the incumbent family (each None when its
    inputs were not given). Only the files the overlay holds are read from the family."""
    text = None
    if proposal is not None and proposal.is_file():
        text = safefs.read_file(proposal, max_bytes=MAX_INPUT_BYTES, what="proposal").decode("utf-8", "replace")
    if overlay is None or skills is None or not overlay.is_dir():
        return text, None
    executables: set[str] = set()
    files = safefs.read_tree(overlay, max_file_bytes=MAX_INPUT_BYTES, max_total_bytes=MAX_INPUT_BYTES,
                             executables=executables, what="overlay file")
    family: dict[str, bytes] = {}
    family_executables = set()
    for rel in files:
        try:
            family[rel] = safefs.read_below(skills, rel, max_bytes=MAX_INPUT_BYTES, what="skill file")
        except BadInput:  # a file the overlay adds
            continue
        if (skills / rel).stat().st_mode & 0o111:
            family_executables.add(rel)
    return text, memory.unified_diff(family, files, family_executables, executables)
