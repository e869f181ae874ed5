"""The demo benchmark content holds together, proved fast by playing the playbook directly (no CLI, no sandbox).

For every task x work-skill variant (incumbent, known-better, known-worse) x arm shape (workflow, auto), and
for the baseline arm (no skill), the target is copied, the steps the playbook selects for that skill text are
applied as the real CLI tools would apply them (an Edit or an overwriting Write needs a Read of that file
earlier in the same session; an Edit's old string must occur exactly once), and the task's verify and hidden
oracle run with Debian's python3, as in the sandbox. Required outcomes:

- incumbent skills: verify and oracle pass on every task, in both arm shapes (the auto arm chooses `work` from
  the descriptions, as skillevo.simulator.agent.choose does);
- the baseline (no skill): verify passes everywhere, the oracle fails where the edge case matters;
- known-better (the wasteful line removed): the same outcomes, one step fewer per work session;
- known-worse (the necessary line removed): verify still passes everywhere, the oracle fails on every
  task whose edge case matters (at least two) and passes on the trivial ones;
- the plan skill's text changes nothing;
- every task's mistake variant (what a noisy simulated agent does when it slips, with the incumbent skills)
  passes verify and fails the oracle.

Verify and the oracle run once per distinct resulting workspace (identical bytes, identical command), in
parallel, which keeps the whole file to a few seconds.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from skillevo.core.arms import AUTO, NONE
from skillevo.files.schemas import validate
from skillevo.simulator import agent, playbook
from skillevo.simulator.conversation import Conversation

ROOT = Path(__file__).resolve().parent.parent
TASKS_DIR = ROOT / "tasks"
ORACLES = TASKS_DIR / "oracles"
SYSTEM_PYTHON = "/usr/bin/python3"
WASTEFUL = "read every module of the package end to end before editing"
NECESSARY = "handle empty and boundary inputs explicitly"

# The arms of params.yaml: arm -> ((skill, prompt template), ...), one pair per session.
ARMS = {name: tuple((s["skill"], s["prompt"]) for s in arm["sessions"])
        for name, arm in yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))["arms"].items()}
SKILLED = [name for name, sessions in ARMS.items() if sessions[0][0] != NONE]  # played with every variant
BASELINE = "baseline"
VARIANT_FILES = {
    "incumbent": ROOT / "skills/work/SKILL.md",
    "known-better": ROOT / "tests/overlays/known-better/work/SKILL.md",
    "known-worse": ROOT / "tests/overlays/known-worse/work/SKILL.md",
}
CANARY = re.compile(r"^# skillevo-oracle-canary: ([0-9a-f]{32})$", re.MULTILINE)


def _env(home: Path, oracle_dir: Path | None = None) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    if oracle_dir is not None:
        env["SKILLEVO_ORACLE_DIR"] = str(oracle_dir)
    return env


def _sh(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def tasks() -> dict[str, dict]:
    doc = yaml.safe_load((TASKS_DIR / "tasks.yaml").read_text(encoding="utf-8"))
    validate(doc, "tasks.schema.json", TASKS_DIR / "tasks.yaml")
    return {t["id"]: t for t in doc["tasks"]}


@pytest.fixture(scope="module")
def book() -> playbook.Playbook:
    return playbook.load(TASKS_DIR / "playbooks/demo.yaml")


@pytest.fixture(scope="module")
def skill_texts() -> dict[str, str]:
    return {name: path.read_text(encoding="utf-8") for name, path in VARIANT_FILES.items()}


def _edge_case_task(task: playbook.Task) -> bool:
    return any("edge-cases" in (s.when, s.unless) for s in task.sessions["work"])


# --------------------------------------------------------------------------- static checks


def test_arms_are_the_fixed_shapes():
    assert {name: [skill for skill, _ in sessions] for name, sessions in ARMS.items()} == {
        "workflow": ["plan", "work"], "auto": ["auto"], BASELINE: ["none"]}


def test_tasks_cover_the_classes_and_both_targets(tasks):
    assert len(tasks) >= 4
    assert {"trivial", "investigation", "cross-module"} <= {t["class"] for t in tasks.values()}
    assert {t["target"] for t in tasks.values()} == {"targets/textstats", "targets/ledger"}
    for t in tasks.values():
        visible = re.fullmatch(r"python3 -m pytest -q -p no:cacheprovider (tests/test_\w+\.py)", t["verify"])
        assert visible, t["verify"]
        assert visible.group(1) in t["prompt"], "the prompt names the test file that verify runs"
        assert not (TASKS_DIR / t["target"] / visible.group(1)).exists()


def test_targets_are_plain_packages():
    for name in ("textstats", "ledger"):
        target = TASKS_DIR / "targets" / name
        assert (target / name / "__init__.py").is_file()
        assert not (target / ".git").exists()
        assert set((target / ".gitignore").read_text().split()) >= {"__pycache__/", ".pytest_cache/"}
        assert not list(target.rglob("conftest.py"))
        assert list((target / "tests").glob("test_*.py"))
        lines = sum(len(p.read_text().splitlines()) for p in target.rglob("*.py"))
        assert lines < 330, f"{name}: {lines} lines"


def test_playbook_matches_the_tasks(tasks, book):
    assert [t.id for t in book.tasks] == list(tasks)
    assert set(book.instructions) == {"survey", "edge-cases"}
    assert book.instructions["survey"].phrase == WASTEFUL and not book.instructions["survey"].necessary
    assert book.instructions["edge-cases"].phrase == NECESSARY and book.instructions["edge-cases"].necessary
    for pb in book.tasks:
        assert sum(pb.match in t["prompt"] for t in tasks.values()) == 1, f"{pb.id}: match is not unique"
        assert pb.match in tasks[pb.id]["prompt"]
        assert set(pb.sessions) == {"plan", "work"}
        for arm in ARMS.values():
            for _skill, template in arm:
                assert book.task_for(template.format(prompt=tasks[pb.id]["prompt"])) is pb
        # the auto arm has no plan: work never touches docs/plan.md
        assert all("docs/plan.md" not in str(s.arg) for s in pb.sessions["work"])
        assert [s.arg for s in pb.sessions["plan"] if s.kind == "write"][-1]["path"] == "docs/plan.md"
        work_bash = [s.arg for s in pb.sessions["work"] if s.kind == "bash"]
        assert work_bash[-1] == tasks[pb.id]["verify"], "the work session ends by running verify"


def test_skills_and_overlays(skill_texts):
    incumbent = skill_texts["incumbent"]
    lines = incumbent.splitlines(keepends=True)
    front = yaml.safe_load(incumbent.split("---\n")[1])
    assert front["name"] == "work" and "\n" not in front["description"]
    plan = (ROOT / "skills/plan/SKILL.md").read_text(encoding="utf-8")
    assert yaml.safe_load(plan.split("---\n")[1])["name"] == "plan" and "docs/plan.md" in plan
    for variant, phrase in (("known-better", WASTEFUL), ("known-worse", NECESSARY)):
        hits = [i for i, line in enumerate(lines) if phrase in line.lower()]
        assert len(hits) == 1, f"exactly one line carries {phrase!r}"
        assert skill_texts[variant] == "".join(lines[:hits[0]] + lines[hits[0] + 1:])
        assert phrase not in skill_texts[variant].lower()
    assert NECESSARY in skill_texts["known-better"].lower() and WASTEFUL in skill_texts["known-worse"].lower()


def test_plan_skill_text_changes_nothing(book, skill_texts):
    plan = (ROOT / "skills/plan/SKILL.md").read_text(encoding="utf-8")
    everything = plan + "\n" + WASTEFUL + "\n" + NECESSARY
    for task in book.tasks:
        steps = book.steps(task, "plan", plan)
        assert steps == book.steps(task, "plan", "") == book.steps(task, "plan", everything)
        assert steps == list(task.sessions["plan"]) and all(s.when is s.unless is None for s in steps)


def test_oracle_files_are_canaried_and_hidden(tasks):
    listed = {f["source"] for t in tasks.values() for f in t["oracle"]["files"]}
    on_disk = {p.relative_to(ORACLES).as_posix() for p in ORACLES.rglob("*") if p.is_file()}
    assert listed == on_disk, "every oracle file is used, every used file exists"
    for t in tasks.values():
        assert 1 <= len(t["oracle"]["files"]) <= 2
        for f in t["oracle"]["files"]:
            assert f'"$SKILLEVO_ORACLE_DIR/{f["target"]}"' in t["oracle"]["command"]
    canaries = {}
    for source in sorted(listed):
        text = (ORACLES / source).read_text(encoding="utf-8")
        found = CANARY.findall(text)
        assert len(found) == 1, f"{source}: exactly one canary line"
        canaries[source] = (found[0], text)
    assert len({c for c, _ in canaries.values()}) == len(canaries), "canaries are unique"
    visible = [p for p in (TASKS_DIR / "targets").rglob("*") if p.is_file()]
    visible += [TASKS_DIR / "tasks.yaml", TASKS_DIR / "playbooks/demo.yaml", *VARIANT_FILES.values(),
                ROOT / "skills/plan/SKILL.md"]
    for path in visible:
        content = path.read_text(encoding="utf-8")
        for source, (canary, text) in canaries.items():
            assert canary not in content and text.strip() not in content, f"{source} leaks into {path}"
            long_lines = {line.strip() for line in text.splitlines()
                          if len(line.strip()) >= 60 and not line.startswith(("from ", "import "))}
            assert not [line for line in long_lines if line in content], f"{source} leaks into {path}"


# --------------------------------------------------------------------------- playing the playbook


@dataclass
class Cell:
    task: str
    variant: str
    arm: str
    steps: dict[str, int]  # session skill -> number of steps taken
    verified_in_session: bool  # the work session ran the verify command (as its last step)
    tree: str  # digest of the whole workspace after the sessions
    code: str  # the same, docs/plan.md excluded
    verify: int = -1
    oracle: int = -1
    outputs: str = ""


def _tree_digest(ws: Path, *, skip: tuple[str, ...] = ()) -> str:
    h = hashlib.sha256()
    for p in sorted(ws.rglob("*")):
        rel = p.relative_to(ws).as_posix()
        if p.is_file() and rel not in skip and "__pycache__" not in p.parts:
            h.update(rel.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _apply(steps: list[playbook.Step], ws: Path, verify: str, env: dict[str, str]) -> bool:
    """Apply one session's steps to `ws` the way the CLI's tools would; whether it ran verify.

    A `cat` runs here. The verify command must be the session's last step: the workspace it sees is then
    exactly the one the post-session verify sees, so that run stands for both (same bytes, same command).
    """
    read: set[str] = set()
    verified = False
    for n, step in enumerate(steps):
        if step.kind == "read":
            assert (ws / step.arg).is_file(), f"read of a missing file {step.arg}"
            read.add(step.arg)
        elif step.kind == "edit":
            path, old, new = step.arg["path"], step.arg["old"], step.arg["new"]
            assert path in read, f"Edit of {path} without a Read of it earlier in the session"
            text = (ws / path).read_text(encoding="utf-8")
            assert text.count(old) == 1, f"Edit of {path}: old string occurs {text.count(old)} times"
            (ws / path).write_text(text.replace(old, new), encoding="utf-8")
        elif step.kind == "write":
            path = step.arg["path"]
            assert not (ws / path).exists() or path in read, f"Write over {path} without a Read of it"
            (ws / path).parent.mkdir(parents=True, exist_ok=True)
            (ws / path).write_text(step.arg["content"], encoding="utf-8")
            read.add(path)
        elif step.kind == "bash" and step.arg == verify:
            assert n == len(steps) - 1, "verify runs as the session's last step"
            verified = True
        elif step.kind == "bash" and step.arg.startswith("cat "):
            done = _sh(step.arg, ws, env)
            assert done.returncode == 0 and done.stdout, f"{step.arg} failed: {done.stderr}"
    return verified


def _oracle(task: dict, ws: Path, home: Path, into: Path) -> subprocess.CompletedProcess[str]:
    """Stage the oracle files read-only in `into` and run the oracle command in the workspace."""
    into.mkdir()
    for f in task["oracle"]["files"]:
        (into / f["target"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ORACLES / f["source"], into / f["target"])
        (into / f["target"]).chmod(0o444)
    into.chmod(0o555)
    try:
        return _sh(task["oracle"]["command"], ws, _env(home, into))
    finally:
        into.chmod(0o755)


def _check(task: dict, root: Path, *, verify: bool = True) -> tuple[int | None, int, str]:
    """Run verify, then the oracle, in `root/ws`: their return codes and the tails of their output."""
    ws, home = root / "ws", root / "home"
    home.mkdir(exist_ok=True)
    ran = _sh(task["verify"], ws, _env(home)) if verify else None
    oracle = _oracle(task, ws, home, root / "oracle")
    shown = f"--- verify\n{ran.stdout[-1500:]}{ran.stderr[-500:]}\n" if ran else ""
    shown += f"--- oracle\n{oracle.stdout[-1500:]}{oracle.stderr[-500:]}"
    return (ran.returncode if ran else None), oracle.returncode, shown


def _chosen(skill: str, prompt: str, pb: playbook.Task, texts: dict[str, str]) -> str | None:
    """The skill a session plays: the one it names; under auto, the simulated agent's choice from the descriptions
    the CLI would list; under none, no skill."""
    if skill == NONE:
        return None
    if skill != AUTO:
        return skill
    listed = {name: yaml.safe_load(text.split("---")[1])["description"] for name, text in texts.items()}
    return agent.choose(Conversation(prompt=prompt, cwd="/work", turns=0, listed=listed), pb)


def _play(task: dict, pb: playbook.Task, book: playbook.Playbook, variant: str, work_text: str, arm: str,
          plan_text: str, root: Path, mistake: bool = False) -> Cell:
    ws = root / "ws"
    shutil.copytree(TASKS_DIR / task["target"], ws)
    counts, verified = {}, False
    texts = {"plan": plan_text, "work": work_text}
    for skill, template in ARMS[arm]:  # one session per skill, each with its own Read history
        played = _chosen(skill, template.format(prompt=task["prompt"]), pb, texts)
        steps = book.steps(pb, played or pb.unskilled, texts[played] if played else "", mistake)
        counts[played or "unskilled"] = len(steps)
        verified = _apply(steps, ws, task["verify"], _env(root)) or verified
    return Cell(task["id"], variant, arm, counts, verified, _tree_digest(ws),
                _tree_digest(ws, skip=("docs/plan.md",)))


@dataclass
class Played:
    cells: dict[tuple[str, str, str], Cell]
    pristine: dict[str, tuple[int | None, int, str]]  # task -> the oracle on the untouched target


@pytest.fixture(scope="module")
def played(tasks, book, skill_texts, tmp_path_factory) -> Played:
    """Every task x variant x arm shape played; verify and the oracle run once per distinct workspace.

    Workspaces with identical bytes (the survey only reads, so incumbent and known-better converge) share
    one run of each command: the commands are deterministic, and this keeps the test under 10 s.
    """
    if subprocess.run([SYSTEM_PYTHON, "-c", "import pytest"], capture_output=True).returncode != 0:
        pytest.skip(f"{SYSTEM_PYTHON} has no pytest (make setup installs python3-pytest)")
    plan_text = (ROOT / "skills/plan/SKILL.md").read_text(encoding="utf-8")
    cells, first = {}, {}
    for pb in book.tasks:
        plays = [(v, text, arm) for v, text in [*skill_texts.items(), ("mistake", skill_texts["incumbent"])]
                 for arm in SKILLED] + [(BASELINE, skill_texts["incumbent"], BASELINE)]  # no skill: one variant
        for variant, text, arm in plays:
            root = tmp_path_factory.mktemp(f"{pb.id}-{variant}-{arm}")
            cell = _play(tasks[pb.id], pb, book, variant, text, arm, plan_text, root, variant == "mistake")
            cells[(pb.id, variant, arm)] = cell
            first.setdefault((pb.id, cell.tree), root)
    pristine_roots = {}
    for task in tasks.values():
        pristine_roots[task["id"]] = root = tmp_path_factory.mktemp(f"{task['id']}-pristine")
        shutil.copytree(TASKS_DIR / task["target"], root / "ws")
    # on an untouched target only the oracle runs: verify's test file does not exist there yet
    jobs = [(tasks[t], root, True) for (t, _tree), root in first.items()] + \
        [(tasks[t], root, False) for t, root in pristine_roots.items()]
    with ThreadPoolExecutor(max_workers=max(2, min(8, (os.cpu_count() or 2) * 2))) as pool:
        outcomes = pool.map(lambda job: _check(job[0], job[1], verify=job[2]), jobs)
        results = dict(zip([root for _task, root, _verify in jobs], outcomes, strict=True))
    for cell in cells.values():
        cell.verify, cell.oracle, cell.outputs = results[first[(cell.task, cell.tree)]]
    return Played(cells, {t: results[root] for t, root in pristine_roots.items()})


@pytest.fixture(scope="module")
def cells(played) -> dict[tuple[str, str, str], Cell]:
    return played.cells


def test_pristine_targets_fail_the_oracle(played):
    """The tasks are not already solved: on the untouched target the oracle fails (and verify's file is absent)."""
    for task, (_verify, oracle, out) in played.pristine.items():
        assert oracle != 0, f"{task}: the oracle passes before any change\n{out}"


def test_every_work_session_ends_with_verify(cells):
    assert all(cell.verified_in_session for cell in cells.values())


@pytest.mark.parametrize("variant", ["incumbent", "known-better"])
def test_incumbent_and_known_better_resolve_every_task(cells, variant):
    for (task, v, arm), cell in cells.items():
        if v == variant:
            assert cell.verify == 0, f"{task}/{arm}: verify failed\n{cell.outputs}"
            assert cell.oracle == 0, f"{task}/{arm}: oracle failed\n{cell.outputs}"


def test_known_worse_passes_verify_but_fails_the_oracle_where_edge_cases_matter(cells, book, tasks):
    failing = set()
    for (task, v, arm), cell in cells.items():
        if v != "known-worse":
            continue
        assert cell.verify == 0, f"{task}/{arm}: verify failed\n{cell.outputs}"
        if cell.oracle != 0:
            failing.add(task)
    edge = {pb.id for pb in book.tasks if _edge_case_task(pb)}
    assert failing == edge and len(edge) >= 2
    trivial = {t["id"] for t in tasks.values() if t["class"] == "trivial"}
    assert trivial and not trivial & failing
    for (task, v, _arm), cell in cells.items():  # both arm shapes agree
        if v == "known-worse":
            assert (cell.oracle != 0) == (task in failing)


def test_every_mistake_variant_passes_verify_but_fails_the_oracle(cells, book):
    assert all(pb.has_mistake for pb in book.tasks)
    for (task, v, arm), cell in cells.items():
        if v == "mistake":
            assert cell.verify == 0, f"{task}/{arm}: verify failed\n{cell.outputs}"
            assert cell.oracle != 0, f"{task}/{arm}: the mistake passes the oracle\n{cell.outputs}"
            assert cell.steps["work"] == cells[(task, "incumbent", arm)].steps["work"]


def test_step_counts(cells, book):
    for pb in book.tasks:
        for arm in SKILLED:
            inc, better, worse = (cells[(pb.id, v, arm)].steps for v in VARIANT_FILES)
            survey = sum(step.when == "survey" for step in pb.sessions["work"])  # one Read per unread module
            assert survey >= 3 and better["work"] == inc["work"] - survey, pb.id
            if arm == "workflow":
                assert inc["plan"] == better["plan"] == worse["plan"] == len(pb.sessions["plan"])
            if not _edge_case_task(pb):
                assert worse["work"] == inc["work"]


def test_arm_shapes_and_the_survey_change_no_code(cells, book):
    """The plan session only writes docs/plan.md and the survey only reads: the same code either way."""
    for pb in book.tasks:
        for variant in VARIANT_FILES:
            wf, auto = cells[(pb.id, variant, "workflow")], cells[(pb.id, variant, "auto")]
            assert wf.code == auto.code and wf.steps["work"] == auto.steps["work"]
            assert (wf.verify, wf.oracle != 0) == (auto.verify, auto.oracle != 0)
        assert cells[(pb.id, "incumbent", "auto")].code == cells[(pb.id, "known-better", "auto")].code
        worse_differs = cells[(pb.id, "incumbent", "auto")].code != cells[(pb.id, "known-worse", "auto")].code
        assert worse_differs == _edge_case_task(pb)


def test_the_baseline_works_without_a_skill_and_fails_where_the_edge_case_matters(cells, book):
    """No skill: the unskilled steps, without the survey and without the edge-case handling, as known-worse
    writes them; verify passes everywhere, the oracle fails exactly on the edge-case tasks."""
    for pb in book.tasks:
        base, worse = cells[(pb.id, BASELINE, BASELINE)], cells[(pb.id, "known-worse", "auto")]
        assert list(base.steps) == ["unskilled"] and base.verify == 0, base.outputs
        assert (base.oracle != 0) == _edge_case_task(pb), base.outputs
        assert base.code == worse.code  # the same edits as the skill without its necessary line

