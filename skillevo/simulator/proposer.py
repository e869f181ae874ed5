"""The simulator playing the proposer: read the evidence, attribute cost to skill instructions, and
remove the costliest one it has not tried before — through real tool calls. "Tried before" is every line a
rejected candidate removed (/evidence/rejected.json, all of them, and the prior proposal's), whatever the verdict.
When no line it may remove gave tool calls that a cited run shows, it declines: proposal.md headed
`# No proposal` saying why, and no overlay (a no_proposal generation), never an edit the evidence does not support.

Its knowledge of which tool calls an instruction causes comes from its own playbook (it is the agent that
made them); a real model has to infer the same from the transcripts, as the prompt asks. What it does not
use is the playbook's knowledge of which instruction is necessary: like a model, it can remove one that the
hidden oracles need, and the gate then keeps the incumbent. Every tool output it reads is bounded (the
analysis prints a few hundred bytes, the skill lines come from grep), so a family of any size works: the CLI
shortens long Bash output to a preview, which a whole family's text would not survive.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import shlex
from typing import Any

from skillevo.core.overlay import NO_PROPOSAL
from skillevo.core.prediction import PREFIX
from skillevo.simulator.agent import Reply
from skillevo.simulator.conversation import Conversation
from skillevo.simulator.playbook import Playbook

MARKER = "SKILLEVO-ANALYSIS "
CONTEXT = 6  # lines shown after each matched line; a block longer than that is never chosen (it could be cut)
REMOVED = "Instruction removed: "

# Runs inside the proposer's sandbox: sums, per instruction, the tokens of the turns whose tool call
# matches one of that instruction's steps (every input token, cached or not, and the output), and prints one
# small JSON line.
_ANALYSIS = r'''
import hashlib, json, os, sys
sigs = json.loads(sys.argv[1])
ev = "/evidence"
def load(p, default):
    try:
        with open(os.path.join(ev, p)) as f:
            return json.load(f) if p.endswith(".json") else f.read()
    except (OSError, ValueError):
        return default
rows = load("rows.json", [])
rows = rows.get("rows", []) if isinstance(rows, dict) else rows
def files_of(obj):
    if isinstance(obj, str):
        return [obj] if obj.endswith(".jsonl") else []
    if isinstance(obj, dict):
        return [f for v in obj.values() for f in files_of(v)]
    if isinstance(obj, list):
        return [f for v in obj for f in files_of(v)]
    return []
costs, cited, dear, dear_totals = {}, {}, {}, {}
PRICE = {"input_tokens": 1, "cache_creation_input_tokens": 1.25, "cache_read_input_tokens": 0.1, "output_tokens": 5}
for row in rows:
    rid = "%s/%s/run%s" % (row.get("task"), row.get("arm"), row.get("run"))
    for name in files_of(row):
        try:
            lines = open(os.path.join(ev, name)).read().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            m = e.get("message") if e.get("type") == "assistant" else None
            if not isinstance(m, dict):
                continue
            u = m.get("usage") or {}
            tokens = sum(u.get(k) or 0 for k in ("input_tokens", "output_tokens", "cache_creation_input_tokens",
                                                 "cache_read_input_tokens"))
            priced = sum((u.get(k) or 0) * w for k, w in PRICE.items())
            dear_totals[rid] = dear_totals.get(rid, 0) + priced
            for b in m.get("content") or []:
                if not isinstance(b, dict) or b.get("type") != "tool_use":
                    continue
                i = b.get("input") or {}
                key = [b.get("name"), i.get("command") or i.get("file_path") or "", i.get("new_string") or ""]
                for ins, keys in sigs.items():
                    if key in keys:
                        costs[ins] = costs.get(ins, 0) + tokens
                        dear[ins] = dear.get(ins, 0) + priced
                        cited.setdefault(ins, [])
                        if rid not in cited[ins]:
                            cited[ins].append(rid)
prior = [l[len("Instruction removed: "):].strip() for l in load("prior-proposal.md", "").splitlines()
         if l.startswith("Instruction removed: ")]
rejected = load("rejected.json", [])
for cand in rejected if isinstance(rejected, list) else []:
    diff = cand.get("diff") if isinstance(cand, dict) else None
    for l in (diff if isinstance(diff, str) else "").splitlines():
        if l.startswith("-") and not l.startswith("--- a/"):
            prior.append(l[1:].strip())
seen = sorted({hashlib.sha256(l.encode()).hexdigest()[:16] for l in prior})
share = {ins: round(100 * dear.get(ins, 0) / sum(dear_totals.get(r, 0) for r in runs), 1)
         for ins, runs in cited.items() if sum(dear_totals.get(r, 0) for r in runs) > 0}
print("SKILLEVO-ANALYSIS " + json.dumps({"rows": len(rows), "costs": costs, "share": share,
                                         "cited": {k: v[:12] for k, v in cited.items()}, "rejected": seen[:64]}))
'''


def _key(line: str) -> str:
    """How the analysis names a line it must not remove again (a short hash keeps its output bounded)."""
    return hashlib.sha256(line.strip().encode()).hexdigest()[:16]


def _signatures(book: Playbook, cwd: str) -> dict[str, list[list[str]]]:
    sigs: dict[str, list[list[str]]] = {}
    for task in book.tasks:
        for steps in task.sessions.values():
            for step in steps:
                if step.when is None:
                    continue
                if step.kind == "bash":
                    key = ["Bash", step.arg, ""]
                elif step.kind == "read":
                    key = ["Read", posixpath.join(cwd, step.arg), ""]
                elif step.kind == "edit":  # the edit itself, not just its file: another step may edit the same file
                    key = ["Edit", posixpath.join(cwd, step.arg["path"]), step.arg["new"]]
                elif step.kind == "write":
                    key = ["Write", posixpath.join(cwd, step.arg["path"]), ""]
                else:
                    continue
                sigs.setdefault(step.when, []).append(key)
    return sigs


def _analysis(conv: Conversation) -> dict[str, Any] | None:
    for result in conv.results:
        idx = result.text.find(MARKER)
        if idx >= 0:
            return json.loads(result.text[idx + len(MARKER):].splitlines()[0])
    return None


GREP = "SKILLEVO-LINES"


def _ranked(book: Playbook, analysis: dict[str, Any]) -> list[tuple[int, str]]:
    """Instructions by the tokens attributed to them, costliest first: all a cost-minded reader sees."""
    return sorted(((tokens, ins) for ins, tokens in analysis["costs"].items() if ins in book.instructions),
                  key=lambda t: (-t[0], t[1]))


def _grep(book: Playbook, evolvable: set[str]) -> str:
    """Two bounded searches of the evolvable SKILL.md files (well under the CLI's preview size): the lines that
    hold a known instruction, then the last few bullets (for when no instruction is left to remove); each with the
    lines after it, so that a list item is removed with its continuation lines, never half of it."""
    files = " ".join(shlex.quote(f"/work/skills/{s}/SKILL.md") for s in sorted(evolvable))
    patterns = " ".join(f"-e {shlex.quote(i.phrase)}" for i in book.instructions.values())
    return (f"echo {GREP}; grep -n -H -A {CONTEXT} -i -F {patterns} {files} 2>/dev/null | head -n 80 | cut -c1-300; "
            f"grep -n -H -A {CONTEXT} '^- ' {files} 2>/dev/null | tail -n 24 | cut -c1-300")


_GREP_LINE = re.compile(r"^/work/skills/([^/]+)/SKILL\.md([:-])(\d+)[:-](.*)$")


def _lines(conv: Conversation) -> list[tuple[str, int, str, tuple[str, ...]]]:
    """(skill, line number, text, its continuation lines) for each matched line of the grep's output: the lines
    right after it that are indented and not blank belong to the same Markdown block (a list item's)."""
    for result in conv.results:
        if GREP in result.text:
            seen: dict[tuple[str, int], str] = {}
            matched: list[tuple[str, int]] = []
            for raw in result.text.split(GREP, 1)[1].splitlines():
                m = _GREP_LINE.match(raw)
                if m:
                    key = (m.group(1), int(m.group(3)))
                    seen[key] = m.group(4)
                    if m.group(2) == ":":
                        matched.append(key)
            out = []
            for skill, number in matched:
                block, n = [], number + 1
                while (skill, n) in seen and seen[(skill, n)][:1] in (" ", "\t") and seen[(skill, n)].strip():
                    block.append(seen[(skill, n)])
                    n += 1
                if (skill, n) not in seen and n > number + CONTEXT:  # the block may go on past what grep showed
                    continue
                out.append((skill, number, seen[(skill, number)], tuple(block)))
            return out
    return []


def _choose(book: Playbook, analysis: dict[str, Any], lines: list[tuple[str, int, str, tuple[str, ...]]]
            ) -> tuple[str, str, tuple[str, ...], str, list[str], int, float | None]:
    """(skill, exact line to remove, its continuation lines, what it is, cited run ids, attributed tokens, the
    predicted improvement): the costliest line whose tool calls cited runs show; LookupError (why) when there is
    none, so the proposer declines. The prediction is those turns' share of the cited runs' tokens priced at the
    list ratios (input 1, cache write 1.25, cache read 0.1, output 5; None without per-turn usage): what removing
    them saves if the gate's tasks spend as the evidence's did; the gate scores it (skillevo.core.prediction)."""
    rejected = set(analysis.get("rejected", []))
    for tokens, ins in _ranked(book, analysis):
        cited = analysis["cited"].get(ins, [])
        if not cited:  # tokens may be 0 where a backend's transcripts carry no per-turn usage; runs may not
            continue
        phrase = book.instructions[ins].phrase.lower()
        for skill, _, line, rest in lines:
            if not line[:1].isspace() and phrase in line.lower() and _key(line) not in rejected:
                share = analysis.get("share", {}).get(ins)
                predicted = min(share, 99.0) if tokens and share else None
                return skill, line, rest, f"the instruction `{ins}`", cited, tokens, predicted
    tried = len(rejected)
    raise LookupError(f"in {analysis['rows']} evidence run(s), no line of the evolvable skills gave tool calls that a "
                      f"run shows and no earlier candidate removed ({tried} line(s) tried before): nothing in the "
                      "evidence supports a change")


def _proposal(skill: str, line: str, rest: tuple[str, ...], what: str, cited: list[str], tokens: int,
              rows: int, skills_path: str = "skills", predicted: float | None = None) -> str:
    runs = ", ".join(cited[:12]) or "none of the selected runs"
    quoted = "\n".join(f"> {x.rstrip()}" for x in (line.strip(), *rest))
    scope = "one line" if not rest else f"one list item, its {len(rest)} continuation line(s) with it"
    return (
        f"# Proposal: drop one line from the `{skill}` skill\n\n"
        f"{REMOVED}{line.strip()}\n\n"
        "## Pattern\n\n"
        f"In {rows} evidence run(s), {what} made the agent take extra tool calls that no check needed; "
        + (f"those turns cost about {tokens:,} tokens in all." if tokens else
           "these transcripts carry no per-turn usage, so their tokens are not counted here.")
        + f" Runs: {runs}.\n\n"
        "## Change\n\n"
        f"Remove this from `{skills_path}/{skill}/SKILL.md` ({scope}; nothing else changes):\n\n{quoted}\n\n"
        "## Expected metric movement\n\n"
        "cost_usd (and input tokens) should fall on every task where the step ran, because each skipped "
        "tool call also removes its output from every later turn's context; resolution should not change.\n\n"
        + (f"{PREFIX} {predicted:g}%\n\n(those turns' share of what the cited runs spent, their tokens priced at "
           "the list ratios: input 1, cache write 1.25, cache read 0.1, output 5)\n\n" if predicted is not None else
           "No prediction: these transcripts carry no per-turn usage to size one from.\n\n")
        + "## Risks\n\n"
        "If the removed step guarded against a failure the evidence did not show, the hidden oracles will "
        "catch it and the gate will keep the incumbent.\n\n"
        "_Written by the skillevo simulator playing the proposer (offline, deterministic)._\n"
    )


class SimulatedProposer:
    """A responder for the simulator's `proposer` mode (see Simulator(responders=...))."""

    def __init__(self, book: Playbook, evolvable: set[str], out_dir: str = "/work/out",
                 skills_path: str = "skills") -> None:
        """`skills_path`: where the team keeps the family, repo-relative (params skills.paths.skills), as the
        proposal names it to the people who review it."""
        self.book, self.evolvable, self.out, self.skills_path = book, evolvable, out_dir, skills_path

    def __call__(self, conv: Conversation, body: dict[str, Any]) -> Reply:
        if conv.turns == 0:
            sigs = json.dumps(_signatures(self.book, "/work"))
            return Reply(tool=("Bash", {"command": f"python3 -c {shlex.quote(_ANALYSIS)} {shlex.quote(sigs)}",
                                        "description": "summarise the evidence"}))
        analysis = _analysis(conv)
        if analysis is None:
            return Reply(text="The evidence could not be read; no proposal.")
        if conv.turns == 1:
            return Reply(tool=("Bash", {"command": _grep(self.book, self.evolvable),
                                        "description": "find the skill lines behind the costs"}))
        try:
            skill, line, rest, what, cited, tokens, predicted = _choose(self.book, analysis, _lines(conv))
        except LookupError as e:
            if conv.turns == 2:
                return Reply(tool=("Write", {"file_path": f"{self.out}/proposal.md",
                                             "content": f"{NO_PROPOSAL}\n\n{str(e)[:1].upper()}{str(e)[1:]}.\n\n"
                                                        "_Written by the skillevo simulator playing the proposer "
                                                        "(offline, deterministic)._\n"}))
            return Reply(text=f"No proposal: {e}.")
        target = f"{self.out}/overlay/{skill}/SKILL.md"
        script = [
            ("Bash", {"command": f"mkdir -p {self.out}/overlay/{skill} && cp /work/skills/{skill}/SKILL.md {target}",
                      "description": "start from a byte copy of the incumbent"}),
            ("Read", {"file_path": target}),
            ("Edit", {"file_path": target, "old_string": "".join(f"{x}\n" for x in (line, *rest)), "new_string": ""}),
            ("Write", {"file_path": f"{self.out}/proposal.md",
                       "content": _proposal(skill, line, rest, what, cited, tokens, analysis["rows"],
                                            self.skills_path, predicted)}),
        ]
        step = conv.turns - 2
        if step < len(script):
            return Reply(tool=script[step])
        return Reply(text=f"Proposed: remove one line from the {skill} skill ({what}).")


__all__ = ["SimulatedProposer", "REMOVED"]
