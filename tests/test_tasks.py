"""Task files: each unsafe or inconsistent definition is refused naming the task, the field and the rule."""

from __future__ import annotations

import os
import subprocess
from types import SimpleNamespace

import pytest
import yaml

from skillevo.bench import sideplan, workspace
from skillevo.core import arms, config, layout, tasks
from skillevo.files.errors import BadInput
from tests.bench_fixtures import ROOT, make_mini


def _rewrite(tasks_file, mutate):
    doc = yaml.safe_load(tasks_file.read_text())
    mutate(doc)
    tasks_file.write_text(yaml.safe_dump(doc))
    return tasks_file


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["tasks"].append(dict(d["tasks"][0])), r"task 'greet': id: duplicate task id"),
    (lambda d: d["tasks"][0]["oracle"]["files"][0].update(source="../tasks.yaml"), r"\.oracle\.files\[0\]\.source"),
    (lambda d: d["tasks"][0]["oracle"]["files"][0].update(source="/etc/passwd"), r"\.oracle\.files\[0\]\.source"),
    (lambda d: d["tasks"][0]["oracle"]["files"][0].update(source="missing.py"),
     r"task 'greet': oracle.files\[\].source: refused: .*missing.py: oracle file does not exist"),
    (lambda d: d["tasks"][0].update(colour="red"), r"\$\.tasks\[0\]: Additional properties .*colour"),
    (lambda d: d["tasks"][0].update(ref="main"), r"task 'greet': ref: ref applies to git targets only"),
    (lambda d: d["tasks"][0].update(target="targets/nope"),
     r"task 'greet': target: targets/nope must be an existing directory"),
    (lambda d: d["tasks"][0]["oracle"]["files"].append(dict(d["tasks"][0]["oracle"]["files"][0])),
     r"oracle.files\[\].source: must be unique"),
    (lambda d: d["tasks"][0].pop("verify"), r"'verify' is a required property"),
])
def test_bad_task_files_are_refused(tmp_path, mutate, message):
    tasks_file = _rewrite(make_mini(tmp_path), mutate)
    with pytest.raises(BadInput, match=message):
        tasks.load(tasks_file)


def test_oracle_symlink_is_refused(tmp_path):
    tasks_file = make_mini(tmp_path)
    oracles = tasks_file.parent / "oracles"
    os.rename(oracles / "test_greet_oracle.py", oracles / "real.py")
    os.symlink("real.py", oracles / "test_greet_oracle.py")
    with pytest.raises(BadInput, match=r"task 'greet': oracle.files\[\].source: refused: .* is a symlink"):
        tasks.load(tasks_file)


AGENT_CONFIG = {".claude/skills/theirs/SKILL.md": "---\nname: theirs\ndescription: d\n---\nbody\n",
                ".claude/settings.json": '{"hooks": {}}\n', "CLAUDE.md": "always do X\n", ".mcp.json": "{}\n",
                "pkg/CLAUDE.md": "nested memory\n", "pkg/CLAUDE.local.md": "local memory\n",
                "pkg/.claude/skills/nested/SKILL.md": "---\nname: nested\ndescription: d\n---\nbody\n"}


def _plant(root, files=AGENT_CONFIG) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def _templates(tasks_file, tmp_path) -> dict[str, set[str]]:
    """Every file of every arm's template, by kind (incumbent, baseline), as the bench builds them."""
    p = config.parse({**yaml.safe_load((ROOT / "params.yaml").read_text()),
                      "tasks": {"gate": ["greet"], "evidence": []}})
    side = sideplan.plan("incumbent", tasks_file, ROOT / "skills", None, p)
    sideplan.build_cells(side, p.bench, p.model, tmp_path / "scratch")
    out = {}
    for tpl in (tmp_path / "scratch/templates").iterdir():
        out[tpl.name.removeprefix("greet-")] = {str(f.relative_to(tpl)) for f in tpl.rglob("*")
                                                if f.is_file() and ".git" not in f.relative_to(tpl).parts}
    return out


def test_a_targets_own_agent_configuration_never_reaches_a_workspace(tmp_path):
    """A plain-directory target that ships skills, settings, memory and MCP servers of its own (at the root and
    nested): every arm's workspace holds the tree without them, the family under test alone, and the baseline no
    skill at all."""
    tasks_file = make_mini(tmp_path)
    _plant(tasks_file.parent / "targets/greet")
    templates = _templates(tasks_file, tmp_path)
    family = {f".claude/skills/{rel}" for rel in layout.read_family(ROOT / "skills")}
    assert templates["baseline"] == {"pkg/__init__.py", "pkg/greet.py"}
    assert templates["incumbent"] == {"pkg/__init__.py", "pkg/greet.py"} | family
    assert not any(tasks.agent_config(rel) for rel, _ in tasks.tree_files(tasks.load(tasks_file)[0]))


def test_a_git_targets_pinned_ref_is_checked_not_its_working_tree(tmp_path):
    """The ref holds .claude/skills and CLAUDE.md; the working tree (a later commit) does not: the workspaces are
    built from the ref, and still hold none of it."""
    tasks_file = make_mini(tmp_path)
    repo = tasks_file.parent / "targets/greet"
    _plant(repo)
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@a",
           "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@a"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "ships skills"], ["tag", "pinned"],
                ["rm", "-rq", ".claude", "CLAUDE.md", ".mcp.json", "pkg/CLAUDE.md", "pkg/CLAUDE.local.md",
                 "pkg/.claude"], ["commit", "-qm", "later"]):
        subprocess.run(["git", *cmd], cwd=repo, env=env, check=True)
    _rewrite(tasks_file, lambda d: d["tasks"][0].update(ref="pinned"))
    templates = _templates(tasks_file, tmp_path)
    assert templates["baseline"] == {"pkg/__init__.py", "pkg/greet.py"}
    assert {f for f in templates["incumbent"] if ".claude" in f} == \
        {f".claude/skills/{rel}" for rel in layout.read_family(ROOT / "skills")}


def test_a_tree_with_agent_configuration_is_refused_by_the_template(tmp_path):
    """The template builder checks what it is given too (a tree that did not come through export_tree)."""
    tree = tmp_path / "tree"
    _plant(tree, {"pkg/a.py": "x = 1\n", "sub/CLAUDE.md": "memory\n"})
    with pytest.raises(BadInput, match=r"holds agent configuration \['sub/CLAUDE.md'\].*rule: skill-free targets"):
        workspace.build_template(tree, {}, None, tmp_path / "tpl")


def test_bindings_pin_exact_bytes(tmp_path):
    tasks_file = make_mini(tmp_path)
    before = {t.id: t.binding for t in tasks.load(tasks_file)}
    assert before["greet"]["target"]["kind"] == "dir"
    assert [f["target"] for f in before["greet"]["oracle_files"]] == ["test_greet_oracle.py"]
    (tasks_file.parent / "targets/greet/pkg/greet.py").write_text('def greet():\n    return "hey"\n')
    after = {t.id: t.binding for t in tasks.load(tasks_file)}
    assert after["greet"]["target"]["tree"] != before["greet"]["target"]["tree"]
    assert after["greet"]["prompt_sha256"] == before["greet"]["prompt_sha256"]
    (tasks_file.parent / "targets/greet/pkg/__pycache__").mkdir()  # tool caches do not move the pin
    (tasks_file.parent / "targets/greet/pkg/__pycache__/x.pyc").write_bytes(b"\0")
    assert {t.id: t.binding for t in tasks.load(tasks_file)} == after


def test_git_target_is_pinned_to_a_commit_and_exported_without_history(tmp_path):
    tasks_file = make_mini(tmp_path)
    repo = tasks_file.parent / "targets/greet"
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@a",
           "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@a"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "one"]):
        subprocess.run(["git", *cmd], cwd=repo, env=env, check=True)
    (repo / "later.txt").write_text("not committed\n")
    _rewrite(tasks_file, lambda d: d["tasks"][0].update(ref="HEAD"))
    task = tasks.load(tasks_file)[0]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert task.binding["target"] == {"kind": "git", "path": "targets/greet", "tree": head}
    workspace.export_tree(task, tmp_path / "tree")
    assert not (tmp_path / "tree/later.txt").exists() and (tmp_path / "tree/pkg/greet.py").is_file()
    base = workspace.build_template(tmp_path / "tree", layout.read_family(ROOT / "skills"), None, tmp_path / "tpl")
    log = workspace.git(tmp_path / "tpl", "log", "--format=%H %P")
    assert log == base  # one commit, with no parent (git() strips the trailing space of an empty %P)
    assert workspace.git(tmp_path / "tpl", "for-each-ref", "--format=%(refname)") == "refs/heads/main"
    files = workspace.git(tmp_path / "tpl", "ls-files").splitlines()
    assert ".claude/skills/work/SKILL.md" in files and not any("oracle" in f for f in files)


def test_candidate_template_commits_the_overlay_on_top_and_refuses_identical(tmp_path):
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg/a.py").write_text("x = 1\n")
    family = layout.read_family(ROOT / "skills")
    base = workspace.build_template(tree, family, {"work/SKILL.md": b"---\nname: work\ndescription: d\n---\nshorter\n"},
                                    tmp_path / "tpl")
    assert workspace.git(tmp_path / "tpl", "rev-list", "--count", base) == "2"
    assert (tmp_path / "tpl/.claude/skills/work/SKILL.md").read_text().endswith("shorter\n")
    with pytest.raises(BadInput, match="byte-identical"):
        workspace.build_template(tree, family, {"work/SKILL.md": family["work/SKILL.md"]}, tmp_path / "tpl2")


def test_expensive_tasks_are_skipped_and_listed(tmp_path):
    tasks_file = _rewrite(make_mini(tmp_path), lambda d: d["tasks"][1].update(expensive=True))
    chosen, skipped = tasks.select(tasks.load(tasks_file), include_expensive=False)
    assert [t.id for t in chosen] == ["greet"] and skipped[0]["id"] == "cheat"
    assert [t.id for t in tasks.select(tasks.load(tasks_file), include_expensive=True)[0]] == ["greet", "cheat"]


def test_required_candidate_arms_are_the_arms_using_a_touched_skill():
    incumbents = config.load(ROOT / "params.yaml").arms
    # the auto arm reads every skill's description, so any overlay needs it; the baseline has no skill to change
    assert [a.name for a in arms.required_candidate_arms({"plan"}, incumbents)] == ["candidate_auto",
                                                                                    "candidate_workflow"]
    required = arms.required_candidate_arms({"work"}, incumbents)
    assert [(a.name, a.incumbent) for a in required] == [("candidate_auto", "auto"), ("candidate_workflow", "workflow")]
    odd = config.parse({"arms": {"x": {"sessions": [{"skill": "nope", "prompt": "{prompt}"}]}}}).arms
    with pytest.raises(BadInput, match=r"arms.x.sessions\[0\].skill: 'nope'"):
        arms.check_skills(odd, {"plan"})




# --- the split between evidence and gate tasks ------------------------------------------------------------


def _tasks(*spec: str):
    return [SimpleNamespace(id=s.split(":")[0], cls=s.split(":")[1]) for s in spec]


SIX = _tasks("a1:trivial", "a2:trivial", "a3:trivial", "a4:trivial", "b1:hard", "b2:hard")


@pytest.mark.parametrize("gate, evidence, shared, expected", [
    ((), (), False, (("a1", "a4"), ("a2", "a3", "b1", "b2"))),  # every third by class, then id: b1 b2 [a1] a2 a3 [a4]
    (("a1", "b1"), (), False, (("a2", "a3", "a4", "b2"), ("a1", "b1"))),
    ((), ("a1",), False, (("a1",), ("a2", "a3", "a4", "b1", "b2"))),
    (("a1", "a2", "a3", "a4", "b1", "b2"), ("a1",), True, (("a1",), ("a1", "a2", "a3", "a4", "b1", "b2"))),
])
def test_split_completes_what_params_name(gate, evidence, shared, expected):
    result = tasks.split(SIX, gate, evidence, shared, "params.yaml")
    assert (result.evidence, result.gate) == expected
    assert result.automatic is (not gate and not evidence)


@pytest.mark.parametrize("gate, evidence, shared, message", [
    (("a1",), ("a1",), False,
     r"params\.yaml: tasks\.gate and tasks\.evidence both name \['a1'\].*\(rule: disjoint split\)"),
    (("zz",), (), False, r"params\.yaml: tasks\.gate: 'zz' is not a task in the tasks file \(rule: known task\)"),
    (("a1",), ("a2",), False, r"tasks \['a3', 'a4', 'b1', 'b2'\] are in neither .*\(rule: every task has a role\)"),
    ((), ("a1", "a2", "a3", "a4", "b1", "b2"), False,
     r"no task is left for the gate to decide on \(rule: a gate task\)"),
])
def test_a_bad_split_is_refused_naming_the_rule(gate, evidence, shared, message):
    with pytest.raises(BadInput, match=message):
        tasks.split(SIX, gate, evidence, shared, "params.yaml")


def test_one_task_is_the_gate_s():
    assert tasks.split(_tasks("only:trivial"), (), (), False, "p").to_dict() == {"evidence": [], "gate": ["only"]}


# --- reference solutions and the pipeline's own folder ---------------------------------------------------------

FIXED = 'def greet():\n    return "hello"\n'
PATCH = """--- a/pkg/greet.py
+++ b/pkg/greet.py
@@ -1,2 +1,2 @@
 def greet():
-    return "hi"
+    return "hello"
"""


def test_a_patch_solution_is_bound_and_changes_what_it_says(tmp_path):
    tasks_file = make_mini(tmp_path)
    plain = tasks.load(tasks_file)[0]
    (tasks_file.parent / "solutions").mkdir()
    (tasks_file.parent / "solutions/greet.diff").write_text(PATCH)
    _rewrite(tasks_file, lambda d: d["tasks"][0].update(solution={"patch": "greet.diff"}))
    task = tasks.load(tasks_file)[0]
    assert "solution" not in plain.binding  # a task without one keeps the binding (and cell keys) it had
    assert task.binding["solution"]["kind"] == "patch" and task.binding_digest != plain.binding_digest
    assert tasks.solved_changes(task) == {"pkg/greet.py": FIXED.encode()}
    workspace.export_solved(task, tmp_path / "solved")
    assert (tmp_path / "solved/pkg/greet.py").read_text() == FIXED
    assert not any("solution" in rel for rel, _ in tasks.tree_files(task))  # hidden like the oracle


def test_a_ref_solution_is_a_commit_of_the_git_target(tmp_path):
    tasks_file = make_mini(tmp_path)
    repo = tasks_file.parent / "targets/greet"
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@a",
           "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@a"}
    (repo / "pkg/old.py").write_text("gone = True\n")
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "the bug"], ["tag", "bug"]):
        subprocess.run(["git", *cmd], cwd=repo, env=env, check=True)
    (repo / "pkg/greet.py").write_text(FIXED)
    (repo / "pkg/old.py").unlink()
    for cmd in (["add", "-A"], ["commit", "-qm", "the fix"], ["tag", "fix"]):
        subprocess.run(["git", *cmd], cwd=repo, env=env, check=True)
    _rewrite(tasks_file, lambda d: d["tasks"][0].update(ref="bug", solution={"ref": "fix"}))
    task = tasks.load(tasks_file)[0]
    assert tasks.solved_changes(task) == {"pkg/greet.py": FIXED.encode(), "pkg/old.py": None}
    workspace.export_tree(task, tmp_path / "tree")
    assert "hi" in (tmp_path / "tree/pkg/greet.py").read_text()  # the workspace gets the bug, never the fix


@pytest.mark.parametrize("solution, message", [
    ({"patch": "../tasks.yaml"}, r"solution.patch"),
    ({"patch": "missing.diff"}, r"task 'greet': solution.patch: refused: .*missing.diff"),
    ({"ref": "main"}, r"task 'greet': solution.ref: applies to git targets only"),
    ({"ref": "main", "patch": "x.diff"}, r"solution"),
])
def test_a_bad_solution_is_refused_naming_the_rule(tmp_path, solution, message):
    tasks_file = _rewrite(make_mini(tmp_path), lambda d: d["tasks"][0].update(solution=solution))
    with pytest.raises(BadInput, match=message):
        tasks.load(tasks_file)


def test_a_patch_that_does_not_apply_or_changes_nothing_is_refused(tmp_path):
    tasks_file = make_mini(tmp_path)
    (tasks_file.parent / "solutions").mkdir()
    (tasks_file.parent / "solutions/stale.diff").write_text(PATCH.replace('"hi"', '"howdy"'))
    _rewrite(tasks_file, lambda d: d["tasks"][0].update(solution={"patch": "stale.diff"}))
    with pytest.raises(BadInput, match=r"solution.patch does not apply .*rule: the solution applies"):
        tasks.solved_changes(tasks.load(tasks_file)[0])


def test_a_task_on_the_repository_that_holds_the_pipeline_never_shows_it_its_oracles(tmp_path):
    """A team's task targets its own repository, which holds the pipeline's folder (tasks/oracles, solutions):
    the folder is kept out of every workspace and out of what counts as visible to the agent."""
    repo = tmp_path / "team"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg/__init__.py").write_text("")
    (repo / "pkg/greet.py").write_text('def greet():\n    return "hi"\n')
    tasks_file = make_mini(repo / "evolve")
    _rewrite(tasks_file, lambda d: d["tasks"][0].update(target="../.."))
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@a",
           "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@a"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "team"]):
        subprocess.run(["git", *cmd], cwd=repo, env=env, check=True)
    task = tasks.load(tasks_file, target_roots=[repo])[0]
    assert task.hidden == ("evolve",) and task.binding["hidden"] == ["evolve"]
    files = {rel for rel, _ in tasks.tree_files(task)}
    assert files == {"pkg/__init__.py", "pkg/greet.py"}
    workspace.export_tree(task, tmp_path / "tree")
    assert sorted(str(p.relative_to(tmp_path / "tree")) for p in (tmp_path / "tree").rglob("*")) == \
        ["pkg", "pkg/__init__.py", "pkg/greet.py"]
    oracle = task.oracle_files[0][1]
    assert not any(oracle in data for data in tasks.visible_texts(task))
