"""Hostile inputs, fed to the stages as a new user's adversary would: each is refused with a non-zero exit, one
line on stderr naming the file and the rule, no traceback, and nothing left behind.

Every case starts from a whole, valid pipeline in a throwaway git repository (tests/apply_fixtures.py: real
freeze, real gate), breaks exactly one thing, and runs the real stage as a process (`python -m skillevo.stages.<name>`).
The bench and propose cases are refused before any sandbox or session starts.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from skillevo.files import errors
from tests.apply_fixtures import Pipeline, git, make_pipeline
from tests.bench_fixtures import ROOT
from tests.gate_rows import CANDIDATE, INCUMBENT, runs, write_side

BAD_INPUT, ENVIRONMENT = 2, 69


@dataclass
class World:
    """A valid pipeline and where each stage's inputs are; a case breaks one of them."""

    pipe: Pipeline
    tmp: Path

    @property
    def repo(self) -> Path:
        return self.pipe.repo

    @property
    def params(self) -> Path:
        return self.repo / "params.yaml"

    @property
    def tasks(self) -> Path:
        return self.tmp / "bench" / "tasks" / "tasks.yaml"

    @property
    def results(self) -> Path:
        return self.repo / "results"

    def doc(self) -> dict:
        return yaml.safe_load(self.params.read_text())

    def set_params(self, section: str, **values) -> None:
        doc = self.doc()
        doc.setdefault(section, {}).update(values)
        self.params.write_text(yaml.safe_dump(doc))

    def tasks_doc(self) -> dict:
        return yaml.safe_load(self.tasks.read_text())

    def set_task(self, **values) -> None:
        doc = self.tasks_doc()
        doc["tasks"][0].update(values)
        self.tasks.write_text(yaml.safe_dump(doc))

    def skill(self, rel: str = "work/SKILL.md") -> Path:
        return self.repo / "skills" / rel

    def overlay(self) -> Path:
        """A good hand-written candidate: one line of the incumbent work skill changed."""
        ov = self.tmp / "overlay"
        if not ov.exists():
            (ov / "work").mkdir(parents=True)
            (ov / "work/SKILL.md").write_bytes(self.skill().read_bytes().replace(b"Run the tests.", b"Run them."))
        return ov

    def previous(self) -> Path:
        """A previous generation: this pipeline's incumbent side, a proposal, a verdict."""
        prev = self.tmp / "previous"
        if not prev.exists():
            shutil.copytree(self.results / "bench-incumbent", prev / "bench-incumbent")
            shutil.copytree(self.results / "gate", prev / "gate")
            (prev / "proposal.md").write_text("# Proposal\n")
        return prev

    def candidate_side(self) -> Path:
        side = self.results / "bench-candidate"
        if not side.exists():
            inc = json.loads((self.results / "bench-incumbent/bench.json").read_text())
            bench = {**inc, "side": "candidate", "overlay_digest": self.pipe.manifest["overlay_digest"],
                     "arms": [{"name": CANDIDATE, "incumbent_arm": INCUMBENT, "skills": ["work"]}]}
            rows = [{**r, "model": inc["model"]["name"], "served_models": inc["served_models"],
                     "overlay_digest": bench["overlay_digest"]} for r in self.candidate_rows()]
            write_side(side, bench, rows)
        return side

    def candidate_rows(self) -> list[dict]:
        return runs("t1", CANDIDATE, [0.8, 0.85, 0.9]) + runs("t2", CANDIDATE, [1.9, 1.8, 2.0]) + runs(
            "t3", CANDIDATE, [1.0, 0.9, 0.95])

    @staticmethod
    def rewrite_rows(side: Path, change: Callable[[list[dict]], None]) -> None:
        rows = [json.loads(line) for line in (side / "results.jsonl").read_text().splitlines()]
        change(rows)
        (side / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def edit_json(self, path: Path, change: Callable[[dict], None]) -> None:
        doc = json.loads(path.read_text())
        change(doc)
        os.chmod(path, 0o644)
        path.write_text(json.dumps(doc))


# --- the stages' command lines, on a world ------------------------------------------------------------------


def gate(w: World) -> list[str]:
    return ["gate", "--incumbent", str(w.results / "bench-incumbent"), "--candidate", str(w.candidate_side()),
            "--freeze", str(w.results / "freeze/manifest.json"), "--params", str(w.params),
            "--out", str(w.tmp / "out")]


def freeze(w: World) -> list[str]:
    return ["freeze", "--overlay", str(w.overlay()), "--hand-written", "--tasks", str(w.tasks), "--params",
            str(w.params), "--repo", str(w.repo), "--previous", str(w.tmp / "memory"), "--out", str(w.tmp / "out")]


def evidence(w: World) -> list[str]:
    learnings = ["--learnings", str(w.tmp / "l.jsonl")] if (w.tmp / "l.jsonl").exists() else []
    return ["evidence", "--previous", str(w.previous()), "--tasks", str(w.tasks), "--params", str(w.params),
            *learnings, "--out", str(w.tmp / "out")]


def bench(w: World) -> list[str]:
    return ["bench", "--side", "incumbent", "--tasks", str(w.tasks), "--skills", str(w.repo / "skills"),
            "--params", str(w.params), "--out", str(w.tmp / "out")]


def propose(w: World) -> list[str]:
    return ["propose", "--evidence", str(w.tmp), "--params", str(w.params), "--skills", str(w.repo / "skills"),
            "--playbooks", str(w.tasks.parent / "playbooks"), "--out", str(w.tmp / "out")]


def apply(w: World) -> list[str]:
    return ["apply", *w.pipe.cli_args()]


def _write(path: Path, data: bytes | str) -> None:
    if path.exists():
        os.chmod(path, 0o644)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def _memory(w: World, decision: str = "keep_incumbent", overlay: Path | None = None) -> Path:
    """The generations' memory holding one candidate of generation 2: the world's overlay (or `overlay`)."""
    from skillevo.core import layout, memory
    from skillevo.files import safefs

    executables: set[str] = set()
    family = layout.read_family(w.repo / "skills", frozenset(), executables)
    files = safefs.read_tree(overlay or w.overlay(), max_file_bytes=1 << 20, max_total_bytes=1 << 20)
    entry = memory.entry(2, layout.tree_digest(family, executables), family, executables, files, set(),
                         [{"candidate_arm": CANDIDATE, "decision": decision, "reasons": ["no cheaper"]}])
    path = w.tmp / "memory/rejected.json"
    _write(path, memory.dump([entry]))
    return path


def _laughs(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def _oracle_line(w: World) -> str:
    text = (w.tasks.parent / "oracles/test_greet_oracle.py").read_text()
    return next(line.strip() for line in text.splitlines() if "assert greet()" in line)


def _canary_token(w: World) -> str:
    text = (w.tasks.parent / "oracles/test_greet_oracle.py").read_text()
    return next(line for line in text.splitlines() if "canary" in line).split()[-1]


def _forge_transcript(side: Path) -> None:
    """Rewrite a stored transcript to a cheaper session and the row to match it: the row's sha256 binding breaks."""
    first = json.loads((side / "results.jsonl").read_text().splitlines()[0])
    path = side / first["transcripts"][0]["path"]
    forged = re.sub(r'"total_cost_usd": ?[0-9.e-]+', '"total_cost_usd":0.01', path.read_text())
    assert forged != path.read_text()
    os.chmod(path, 0o644)
    path.write_text(forged)
    World.rewrite_rows(side, lambda rows: rows[0].update(cost_usd=0.01))


def _with_overlay_line(w: World, line: str) -> None:
    ov = w.overlay() / "work/SKILL.md"
    ov.write_text(ov.read_text() + line + "\n")


# --- the cases: (stage, break one thing, what the one line must say) ----------------------------------------

P, T = "params.yaml", "tasks.yaml"
CASES: dict[str, tuple[Callable[[World], list[str]], Callable[[World], object], str]] = {
    # params.yaml
    "params: a typo in a key": (bench, lambda w: w.set_params("bench", runz=5), rf"{P}: \$\.bench: .*'runz' was unexpected"),
    "params: NaN threshold": (gate, lambda w: w.set_params("gate", min_improvement_pct=float("nan")), rf"{P}: \$\.gate\.min_improvement_pct: nan is not a finite number"),
    "params: absurd expiry": (gate, lambda w: w.set_params("gate", max_age_days=1e12), rf"{P}: \$\.gate\.max_age_days: .* maximum"),
    "params: YAML syntax error": (gate, lambda w: _write(w.params, "gate: [1, 2\n"), rf"{P}:\d+: not valid YAML.*\(rule: YAML syntax\)"),
    "params: not UTF-8": (propose, lambda w: _write(w.params, b"model:\n  name: \xff\xfe\n"), rf"{P}: params file is not UTF-8"),
    "params: zero workers": (bench, lambda w: w.set_params("bench", workers=0), rf"{P}: \$\.bench\.workers: 0 is less than the minimum of 1"),
    "params: negative runs": (bench, lambda w: w.set_params("sampling", runs=-3), rf"{P}: \$\.sampling\.runs: -3 is less than"),
    "params: floating alias": (bench, lambda w: w.set_params("model", name="sonnet"), rf"{P}: model\.name: 'sonnet' is a floating alias.*\(rule: pinned model id\)"),
    "params: default alias": (gate, lambda w: w.set_params("model", name="default"), rf"{P}: model\.name: 'default' is a floating alias"),
    "params: latest alias": (gate, lambda w: w.set_params("model", name="claude-sonnet-latest"), rf"{P}: model\.name: .*floating alias"),
    "params: proposer alias": (propose, lambda w: w.set_params("propose", model="opus"), rf"{P}: propose\.model: 'opus' is a floating alias"),
    "params: retired model": (bench, lambda w: w.set_params("model", name="claude-sonnet-4-5"), rf"{P}: model\.name: 'claude-sonnet-4-5' was retired on 2026-11-30.*\(rule: current model\)"),
    "params: remapped model": (bench, lambda w: w.set_params("model", name="claude-opus-4-1"), rf"{P}: model\.name: 'claude-opus-4-1' is remapped"),
    "params: endpoint without URL": (bench, lambda w: w.set_params("model", backend="endpoint"), rf"{P}: \$\.model\.base_url: None is not of type 'string'"),
    "params: URL with credentials": (bench, lambda w: w.set_params("model", backend="endpoint", base_url="https://u:p@h/x"), rf"{P}: \$\.model\.base_url: .*without credentials"),
    "params: billion laughs": (gate, lambda w: _write(w.params, _laughs()), rf"{P}: line \d+: more than 64 aliases \(rule: alias cap\)"),
    "params: a list, not a mapping": (gate, lambda w: _write(w.params, "- 1\n- 2\n"), rf"{P}: must be a mapping of sections"),
    "params: no arms": (bench, lambda w: _write(w.params, yaml.safe_dump({**w.doc(), "arms": {}})), rf"{P}: \$\.arms: .*(non-empty|minProperties|should be)"),
    "params: arm named like a candidate": (bench, lambda w: _write(w.params, yaml.safe_dump({**w.doc(), "arms": {"candidate_x": w.doc()["arms"]["workflow"]}})), rf"{P}: \$\.arms: 'candidate_x' is not an arm name"),
    "params: prompt without {prompt}": (bench, lambda w: _write(w.params, yaml.safe_dump({**w.doc(), "arms": {"a": {"sessions": [{"skill": "work", "prompt": "do it"}]}}})), rf"{P}: \$\.arms\.a\.sessions\[0\]\.prompt: 'do it' is not a prompt template"),
    "params: arm uses an unknown skill": (bench, lambda w: _write(w.params, yaml.safe_dump({**w.doc(), "arms": {"a": {"sessions": [{"skill": "nope", "prompt": "{prompt}"}]}}})), rf"{P}: arms\.a\.sessions\[0\]\.skill: 'nope' is not a skill of the family"),
    "params: mirror escapes the repo": (freeze, lambda w: w.set_params("skills", paths={"skills": "skills", "mirrors": ["../x"]}), rf"{P}: \$\.skills\.paths\.mirrors\[0\]: '\.\./x' is not a directory relative to the repository"),
    "params: mirror is the canonical dir": (freeze, lambda w: w.set_params("skills", paths={"skills": "skills", "mirrors": ["./skills/"]}), rf"{P}: \$\.skills\.paths\.mirrors: 'skills' is the canonical directory itself"),
    "params: a non-string key": (gate, lambda w: _write(w.params, w.params.read_text() + "1: x\n"), rf"{P}: \$: key 1 is not a string \(rule: string keys\)"),
    "params: a date where a string goes": (gate, lambda w: (w.set_params("propose", model=None), _write(w.params, w.params.read_text().replace("model: null", "model: 2026-01-01"))), rf"{P}: \$\.propose\.model: .*date.*\(rule: plain values\)"),
    "params: missing file": (gate, lambda w: w.params.unlink(), rf"{P}: params file does not exist"),
    "params: a directory": (gate, lambda w: (w.params.unlink(), w.params.mkdir()), rf"{P}: params file is not a regular file"),
    "params: a symlink": (gate, lambda w: ((w.tmp / "elsewhere.yaml").write_text(w.params.read_text()), w.params.unlink(), w.params.symlink_to(w.tmp / "elsewhere.yaml")), rf"{P}: params file is a symlink \(rule: no symlinks\)"),
    "params: an unknown metric": (gate, lambda w: w.set_params("gate", metric="wall_s"), rf"{P}: \$\.gate\.metric: 'wall_s' is not one of"),
    "params: evidence limit below zero": (evidence, lambda w: w.set_params("evidence", max_rows=-1), rf"{P}: \$\.evidence\.max_rows: -1 is less than the minimum"),
    "params: nested 100 deep": (gate, lambda w: _write(w.params, "x: " + "[" * 100 + "]" * 100 + "\n"), rf"{P}: .*nested deeper than 48 \(rule: nesting cap\)"),
    "params: 2 MB": (gate, lambda w: _write(w.params, "# " + "x" * (2 << 20) + "\n"), rf"{P}: params file is \d+ bytes, over the limit of 1048576 \(rule: size limit\)"),
    # tasks.yaml
    "tasks: target climbs out of tasks/": (bench, lambda w: w.set_task(target="../../repo"), rf"{T}: task 'greet': target: \.\./\.\./repo resolves to .*\(rule: targets stay inside the tasks directory"),
    "tasks: absolute target": (bench, lambda w: w.set_task(target="/etc"), rf"{T}: task 'greet': target: /etc resolves to /etc, outside"),
    "tasks: target symlinked outside": (bench, lambda w: (os.symlink(w.repo, w.tasks.parent / "targets/out"), w.set_task(target="targets/out")), rf"{T}: task 'greet': target: targets/out resolves to .*outside"),
    "tasks: billion laughs": (bench, lambda w: _write(w.tasks, _laughs()), rf"{T}: line \d+: more than 64 aliases"),
    "tasks: not UTF-8": (bench, lambda w: _write(w.tasks, b"\xff\xfe\x00"), rf"{T}: tasks file is not UTF-8"),
    "tasks: YAML syntax error": (bench, lambda w: _write(w.tasks, "tasks: [\n"), rf"{T}:\d+: not valid YAML"),
    "tasks: duplicate id": (bench, lambda w: _write(w.tasks, yaml.safe_dump({**w.tasks_doc(), "tasks": [w.tasks_doc()["tasks"][0]] * 2})), rf"{T}: task 'greet': id: duplicate task id"),
    "tasks: oracle source climbs out": (bench, lambda w: w.set_task(oracle={**w.tasks_doc()["tasks"][0]["oracle"], "files": [{"source": "../tasks.yaml", "target": "t.py"}]}), rf"{T}: \$\.tasks\[0\]\.oracle\.files\[0\]\.source: '\.\./tasks\.yaml' is not a plain relative path"),
    "tasks: oracle source is a symlink": (bench, lambda w: (os.symlink("/etc/hostname", w.tasks.parent / "oracles/link.py"), w.set_task(oracle={**w.tasks_doc()["tasks"][0]["oracle"], "files": [{"source": "link.py", "target": "t.py"}]})), rf"{T}: task 'greet': oracle\.files\[\]\.source: refused: .*link\.py: oracle file is a symlink"),
    "tasks: oracle file missing": (bench, lambda w: w.set_task(oracle={**w.tasks_doc()["tasks"][0]["oracle"], "files": [{"source": "gone.py", "target": "t.py"}]}), rf"{T}: task 'greet': oracle\.files\[\]\.source: refused: .*gone\.py: oracle file does not exist"),
    "tasks: unknown key": (bench, lambda w: w.set_task(colour="red"), rf"{T}: \$\.tasks\[0\]: Additional properties are not allowed \('colour'"),
    "tasks: no verify": (bench, lambda w: _write(w.tasks, yaml.safe_dump({**w.tasks_doc(), "tasks": [{k: v for k, v in w.tasks_doc()["tasks"][0].items() if k != "verify"}]})), rf"{T}: \$\.tasks\[0\]: 'verify' is a required property"),
    "tasks: five-second timeout": (bench, lambda w: w.set_task(timeout_s=5), rf"{T}: \$\.tasks\[0\]\.timeout_s: 5 is less than the minimum of 10"),
    "tasks: ref on a plain directory": (bench, lambda w: w.set_task(ref="main"), rf"{T}: task 'greet': ref: ref applies to git targets only"),
    # the skill family
    "skills: NUL byte": (bench, lambda w: _write(w.skill(), b"---\nname: work\n---\nok\x00\n"), r"skills/work/SKILL\.md: skill file holds a NUL byte .*\(rule: text without NUL\)"),
    "skills: not UTF-8": (bench, lambda w: _write(w.skill(), b"# Work\n\xff\xfe\n"), r"skills/work/SKILL\.md: skill file is not UTF-8 text"),
    "skills: a symlink": (bench, lambda w: os.symlink("/etc/passwd", w.skill("work/notes.md")), r"skills/work/notes\.md: is a symlink \(rule: no symlinks\)"),
    "skills: a stray top-level file": (bench, lambda w: (w.repo / "skills/README.md").write_text("x\n"), r"skills/README\.md: files belong in a skill directory"),
    "skills: a directory without SKILL.md": (bench, lambda w: (w.repo / "skills/half").mkdir() or (w.repo / "skills/half/notes.md").write_text("x\n"), r"skills/half: a skill directory must hold SKILL\.md"),
    # overlays (freeze)
    "overlay: a symlink": (freeze, lambda w: os.symlink(w.skill(), w.overlay() / "work/OTHER.md"), r"overlay/work/OTHER\.md: is a symlink \(rule: no symlinks\)"),
    "overlay: not Markdown": (freeze, lambda w: (w.overlay() / "work/run.py").write_text("x\n"), r"overlay file work/run\.py: has no incumbent skills/work/run\.py to replace \(rule: replacements only; params propose\.allow: supporting-files"),
    "overlay: a skill that is not evolvable": (freeze, lambda w: (w.set_params("skills", evolvable=["plan"]), w.overlay()), r"overlay file work/SKILL\.md: skill 'work' is not evolvable"),
    "overlay: an oracle line in a bullet": (freeze, lambda w: _with_overlay_line(w, f"- {_oracle_line(w)}"), r"overlay file work/SKILL\.md: carries a line of a hidden oracle file"),
    "overlay: an oracle line in a quote": (freeze, lambda w: _with_overlay_line(w, f"> {_oracle_line(w)}"), r"overlay file work/SKILL\.md: carries a line of a hidden oracle file"),
    "overlay: a bare canary token": (freeze, lambda w: _with_overlay_line(w, f"Remember {_canary_token(w)}."), r"overlay file work/SKILL\.md: carries a hidden oracle's canary"),
    "overlay: over the edit budget": (freeze, lambda w: _with_overlay_line(w, "".join(f"line {i}\n" for i in range(60))), r"overlay file \*: \d+ changed lines, over the edit budget of 40"),
    "overlay: byte-identical": (freeze, lambda w: _write(w.overlay() / "work/SKILL.md", w.skill().read_bytes()), r"overlay file \*: every file is identical to the incumbent, bytes and mode"),
    "overlay: NUL byte": (freeze, lambda w: _write(w.overlay() / "work/SKILL.md", b"# Work\x00\n"), r"work/SKILL\.md: overlay file holds a NUL byte"),
    "overlay: not UTF-8": (freeze, lambda w: _write(w.overlay() / "work/SKILL.md", b"# Work \xff\n"), r"work/SKILL\.md: overlay file is not UTF-8"),
    "overlay: a new file": (freeze, lambda w: (w.overlay() / "work/NEW.md").write_text("x\n"), r"overlay file work/NEW\.md: has no incumbent"),
    "overlay: empty": (freeze, lambda w: shutil.rmtree(w.overlay() / "work"), r"overlay file .*overlay: the overlay is empty"),
    "overlay: a FIFO": (freeze, lambda w: os.mkfifo(w.overlay() / "work/pipe.md"), r"overlay/work/pipe\.md: is not a regular file"),
    "overlay: a file, not a directory": (freeze, lambda w: (shutil.rmtree(w.overlay()), (w.tmp / "overlay").write_text("x")), r"overlay: must be a directory reached without symlinks"),
    # evidence (the previous generation)
    "evidence: a NaN in a row": (evidence, lambda w: _write(w.previous() / "bench-incumbent/results.jsonl", (w.previous() / "bench-incumbent/results.jsonl").read_text().replace('"cost_usd": 1.0', '"cost_usd": NaN', 1)), r"bench-incumbent/results\.jsonl:1: not valid JSON: NaN is not a number"),
    "evidence: a row on the wrong side": (evidence, lambda w: w.rewrite_rows(w.previous() / "bench-incumbent", lambda rows: rows[0].update(side="candidate")), r"results\.jsonl:1: \$\.side: is 'candidate'.*\(rule: side\)"),
    "evidence: a malformed learning": (evidence, lambda w: (w.tmp / "l.jsonl").write_text('{"skill": "work"}\n'), r"l\.jsonl:1: a learning is an object with exactly the keys"),
    "evidence: garbage promotion": (evidence, lambda w: _write(w.previous() / "gate/promotion.json", "{nope"), r"gate/promotion\.json: not valid JSON"),
    "evidence: previous is a symlink": (evidence, lambda w: (w.previous().rename(w.tmp / "real"), (w.tmp / "previous").symlink_to(w.tmp / "real")), r"previous: --previous must be a directory \(not a symlink\)"),
    "evidence: garbage memory": (evidence, lambda w: _write(w.previous() / "rejected.json", "[{nope"), r"previous/rejected\.json: not valid JSON"),
    "evidence: a memory whose candidate was promoted": (evidence, lambda w: _write(w.previous() / "rejected.json", _memory(w).read_text().replace('"keep_incumbent"', '"promote"')), r"previous/rejected\.json: \$\.candidates\[0\]\.decisions: .*contain"),
    "freeze: garbage memory": (freeze, lambda w: _write(w.tmp / "memory/rejected.json", "{nope"), r"memory/rejected\.json: not valid JSON"),
    "freeze: a memory that is a symlink": (freeze, lambda w: (_memory(w).rename(w.tmp / "elsewhere.json"), (w.tmp / "memory/rejected.json").symlink_to(w.tmp / "elsewhere.json")), r"memory/rejected\.json: .*symlink"),
    "freeze: a futile candidate re-proposed with CRLF": (freeze, lambda w: (_memory(w), _write(w.overlay() / "work/SKILL.md", (w.overlay() / "work/SKILL.md").read_bytes().replace(b"\n", b"\r\n"))), r"overlay file \S+/overlay/work/SKILL\.md: makes the change of generation 2's candidate once normalised .* \(rule: no futile re-proposal\)"),
    "evidence: results not UTF-8": (evidence, lambda w: _write(w.previous() / "bench-incumbent/results.jsonl", b"\xff\n"), r"bench-incumbent/results\.jsonl: results is not UTF-8"),
    # results rows and bench.json (gate)
    "rows: resolved without the oracle": (gate, lambda w: w.rewrite_rows(w.candidate_side(), lambda rows: rows[1].update(oracle_passed=False)), r"bench-candidate/results\.jsonl:2: resolved without verify and oracle passing.*\(rule: resolved\)"),
    "rows: a duplicate cell": (gate, lambda w: w.rewrite_rows(w.candidate_side(), lambda rows: rows.append(rows[0])), r"results\.jsonl:33: task 'greet', arm 'candidate_workflow', run 1 appears twice \(rule: one row per cell\)"),
    "rows: an unknown error kind": (gate, lambda w: w.rewrite_rows(w.candidate_side(), lambda rows: rows[0].update(error_kind="timeout", resolved=False)), r"results\.jsonl:1: \$\.error_kind: 'timeout' is not one of"),
    "rows: a cheaper forged row outside the binding": (gate, lambda w: w.rewrite_rows(w.candidate_side(), lambda rows: rows.append({**rows[0], "task": "t9"})), r"results\.jsonl:33: task 't9' is not bound .*\(rule: bound task\)"),
    "rows: a cheaper cost than its transcripts": (gate, lambda w: w.rewrite_rows(w.candidate_side(), lambda rows: [r.update(cost_usd=0.01) for r in rows]), r"bench-candidate/results\.jsonl: row \w+/candidate_workflow/run1: cost_usd is 0\.01 but its transcripts say [\d.]+ \(rule: rows match their transcripts\)"),
    "rows: a transcript rewritten to match": (gate, lambda w: _forge_transcript(w.candidate_side()), r"bench-candidate/transcripts/\S+\.jsonl: does not match its row \(size or sha256 differs\)"),
    "rows: not JSON": (gate, lambda w: _write(w.candidate_side() / "results.jsonl", "{not json\n"), r"bench-candidate/results\.jsonl:1: not valid JSON"),
    "rows: bench.json missing": (gate, lambda w: (w.candidate_side() / "bench.json").unlink(), r"bench-candidate/bench\.json: bench provenance does not exist"),
    "rows: another model served": (gate, lambda w: w.edit_json(w.candidate_side() / "bench.json", lambda b: b.update(served_models=["claude-opus-4-8"])), r"bench\.json: \$\.served_models differ \(rule: both sides are benchmarked with identical served model ids\)"),
    "rows: served models that the rows do not show": (gate, lambda w: [w.edit_json(w.candidate_side() / "bench.json", lambda b: b.update(served_models=["x"])), w.edit_json(w.results / "bench-incumbent/bench.json", lambda b: b.update(served_models=["x"]))], r"bench\.json: \$\.served_models does not list what its rows say the API served"),
    # promotion files and the freeze manifest (apply)
    "promotion: not JSON": (apply, lambda w: (_write(w.pipe.paths.promotion, "{oops"), w.pipe.record()), r"promotion\.json: not valid JSON at line 1"),
    "promotion: rescaled aggregates": (apply, lambda w: (w.edit_json(w.pipe.paths.promotion, lambda p: p["decisions"][0]["tasks"][0]["candidate"].update(cost_usd=0.01)), w.pipe.record()), r"promotion\.json: decisions\[0\]\.tasks\[0\]\.candidate\.cost_usd: is not the median of its samples"),
    "promotion: expired": (apply, lambda w: None, r"promotion\.json: evidence_expires_at: the evidence expired"),
    "promotion: from the future": (apply, lambda w: (w.edit_json(w.pipe.paths.promotion, lambda p: p.update(generated_at="2099-01-01T00:00:00+00:00")), w.pipe.record()), r"promotion\.json: generated_at: 2099-01-01T00:00:00\+00:00 is in the future"),
    "promotion: another overlay": (apply, lambda w: (w.edit_json(w.pipe.paths.promotion, lambda p: p.update(overlay_digest="0" * 64)), w.pipe.record()), r"manifest\.json: overlay_digest .* is not the overlay .*promotion\.json was decided on"),
    "promotion: missing": (apply, lambda w: w.pipe.paths.promotion.unlink(), r"promotion\.json: missing \(the gate's promotion\.json\)"),
    "freeze manifest: a destination outside the repo": (apply, lambda w: (w.edit_json(w.pipe.paths.freeze / "manifest.json", lambda m: m["destinations"].update({"../../etc/passwd": "0" * 64})), w.pipe.record()), r"manifest\.json: \$\.destinations: '\.\./\.\./etc/passwd' is not a directory relative to the repository"),
    "apply: the model changed after the bench": (apply, lambda w: w.set_params("model", name="claude-opus-4-8"), r"bench\.json: was benchmarked with model .* now says 'claude-opus-4-8'.*the bench is stale"),
    "apply: a hand-edited receipt to revert": (lambda w: apply(w) + ["--revert"], lambda w: (w.pipe.paths.receipt.parent.mkdir(parents=True, exist_ok=True), w.pipe.paths.receipt.write_text('{"schema_version": 1}')), r"receipt\.json: \$: .* is a required property .*\(not a receipt apply wrote\)"),
}
SLOW_NOW = {"promotion: expired": "2099-01-01T00:00:00+00:00"}


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(make_pipeline(tmp_path), tmp_path)


def _argv(name: str, w: World) -> list[str]:
    stage, *args = CASES[name][0](w)
    if name in SLOW_NOW:
        args[args.index("--now") + 1] = SLOW_NOW[name]
    return [sys.executable, "-m", f"skillevo.stages.{stage}", *args]


def test_the_table_is_long_enough():
    assert len(CASES) >= 60


@pytest.mark.parametrize("stage", [gate, freeze, evidence, apply], ids=lambda f: f.__name__)
def test_the_unbroken_world_passes_every_stage(world: World, stage):
    """So that each refusal below is caused by the one thing its case broke."""
    name, *args = stage(world)
    result = subprocess.run([sys.executable, "-m", f"skillevo.stages.{name}", *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr


# One case per stage also runs as a program: its exit code and stderr as `dvc repro` sees them. The rest call the
# stage's main() in this process (the library is the subject; a process each cost ~2 s, 100 times).
AS_PROGRAM = frozenset(min(n for n, case in CASES.items() if case[0] is stage)
                       for stage in (gate, freeze, evidence, apply))


def _refusal(argv: list[str], name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
             ) -> tuple[int, str]:
    if name in AS_PROGRAM:
        result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
        return result.returncode, result.stderr
    monkeypatch.chdir(ROOT)
    capsys.readouterr()
    code = importlib.import_module(argv[2]).main(argv[3:])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_hostile_input_is_refused_in_one_line_naming_file_and_rule(world: World, name: str, capsys, monkeypatch):
    _, breaks, expected = CASES[name]
    skills_before = {p: p.read_bytes() for p in sorted(world.repo.rglob("SKILL.md")) if p.is_file()}
    breaks(world)
    argv = _argv(name, world)
    code, stderr = _refusal(argv, name, capsys, monkeypatch)
    lines = stderr.splitlines()
    assert code == BAD_INPUT, (code, stderr[-2000:])
    assert "Traceback" not in stderr
    assert len(lines) == 1, lines
    assert re.search(expected, lines[0]), lines[0]
    label = "revert" if "--revert" in argv else argv[2].removeprefix("skillevo.stages.")  # a revert speaks as one
    assert lines[0].startswith(f"{label}: refused: "), lines[0]
    assert errors.rule_of(lines[0]), lines[0]  # every refusal names the rule it applies
    assert not (world.tmp / "out").exists()  # refused before any output was started
    if argv[2] == "skillevo.stages.apply":
        assert git(world.repo, "status", "--porcelain", "--", "skills", ".claude") == ""
        assert {p: p.read_bytes() for p in skills_before if p.exists()} == skills_before
