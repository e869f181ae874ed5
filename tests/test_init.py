"""`skillevo init` sets a team's own repository up: the pipeline (the very dvc.yaml this repository's demo runs) in a
folder of its choosing, its skills and mirrors relative to its git root, never anything overwritten or outside."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from skillevo.ops import check as check_cmd
from skillevo.ops import init as init_cmd

ROOT = Path(__file__).resolve().parents[1]
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


def _repo(root: Path) -> Path:
    """A team's repository: a small package with a bug and its test, two skills of its own, one with a script."""
    skills = root / ".claude/skills"
    for name, body in (("alpha", "- Read the module first.\n"), ("beta", "- Run scripts/check.sh.\n")):
        (skills / name).mkdir(parents=True)
        (skills / name / "SKILL.md").write_text(f"---\nname: {name}\ndescription: The {name} skill. Use it for "
                                                f"{name} work.\n---\n\n# {name}\n\n{body}")
    (skills / "beta/scripts").mkdir()
    (skills / "beta/scripts/check.sh").write_text("#!/bin/sh\necho ok\n")
    (skills / "beta/scripts/check.sh").chmod(0o755)
    (root / "pkg").mkdir()
    (root / "pkg/__init__.py").write_text("def add(a, b):\n    return a - b\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*GIT, "-C", str(root), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(root), "commit", "-qm", "a team's repository"], check=True)
    return root


def test_the_demo_runs_the_pipeline_init_writes():
    assert (ROOT / "dvc.yaml").read_bytes() == (ROOT / "skillevo/template/pipeline.yaml").read_bytes()
    assert not list((ROOT / "skillevo").rglob("dvc.yaml"))  # DVC would collect it as a second pipeline here


def test_init_writes_a_pipeline_in_a_folder_that_check_and_dvc_read(tmp_path, monkeypatch, capsys):
    repo = _repo(tmp_path / "team")
    assert init_cmd.main([str(repo / "evolve")]) == 0
    folder = repo / "evolve"
    params = yaml.safe_load((folder / "params.yaml").read_text())
    assert params["skills"]["root"] == ".." and params["skills"]["paths"] == {"skills": ".claude/skills",
                                                                               "mirrors": []}
    assert params["skills"]["evolvable"] == ["alpha", "beta"]
    assert (folder / "dvc.yaml").read_bytes() == (ROOT / "dvc.yaml").read_bytes()
    assert yaml.safe_load((folder / "skill-modes.json").read_text())["executable"] == ["beta/scripts/check.sh"]
    assert (repo / ".dvc").is_dir() and ".skillevo/" in (repo / ".dvcignore").read_text()
    subprocess.run([*GIT, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", "skillevo init"], check=True)
    monkeypatch.chdir(folder)
    # init's output has nothing wrong, one thing to do: its placeholder task (issue 32, item 1); the schema's
    # schedule (looks up to 48 runs a task, 12 an arm) can promote on one gate task
    assert check_cmd.main(["--no-tasks"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if "(rule: " in line or "refused" in line] == [], err
    assert err[0].startswith("check: to do: tasks/tasks.yaml: task example is the placeholder `skillevo init` wrote")
    assert err[-1].startswith("check: to do: 1 thing(s) left to do above before `dvc repro`")
    from skillevo.bench import plan
    from skillevo.core import config, placeholder

    with pytest.raises(placeholder.Placeholder, match="task example is the placeholder"):  # the bench never measures it
        plan("incumbent", folder / "tasks/tasks.yaml", repo / ".claude/skills", None, config.load("params.yaml"))
    dvc = [sys.executable, "-m", "dvc"]
    dag = subprocess.run([*dvc, "dag", "--md"], cwd=folder, capture_output=True, text=True)
    assert dag.returncode == 0 and "bench@incumbent" in dag.stdout, dag.stderr  # ${skills.root} resolves
    status = subprocess.run([*dvc, "status", "bench@incumbent"], cwd=folder, capture_output=True, text=True)
    assert status.returncode == 0 and "../.claude/skills" in status.stdout, status.stdout + status.stderr


@pytest.mark.parametrize("args, rule", [
    (["--skills", "../elsewhere"], "paths inside the repository"),
    (["--skills", "docs"], "an existing family"),
    (["--mirrors", "/abs/skills"], "paths inside the repository"),
])
def test_init_refuses_paths_it_cannot_own(tmp_path, capsys, args, rule):
    repo = _repo(tmp_path / "team")
    assert init_cmd.main([str(repo / "evolve"), *args]) == 2
    assert f"(rule: {rule})" in capsys.readouterr().err
    assert not (repo / "evolve/dvc.yaml").exists()


def test_init_never_overwrites_and_needs_git(tmp_path, capsys):
    repo = _repo(tmp_path / "team")
    assert init_cmd.main([str(repo / "evolve")]) == 0
    before = (repo / "evolve/params.yaml").read_bytes()
    assert init_cmd.main([str(repo / "evolve")]) == 2
    assert "init never overwrites (rule: nothing lost)" in capsys.readouterr().err
    assert (repo / "evolve/params.yaml").read_bytes() == before
    (tmp_path / "plain").mkdir()
    assert init_cmd.main([str(tmp_path / "plain")]) == 2
    assert "not inside a git repository" in capsys.readouterr().err


def _tree(root: Path) -> dict[str, bytes | str]:
    return {p.relative_to(root).as_posix(): os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file()
            else "dir" for p in sorted(root.rglob("*")) if ".git" not in p.relative_to(root).parts}


@pytest.mark.parametrize("link, target", [("evolve/tasks", "dir"), ("evolve/.gitignore", "file"),
                                          (".dvcignore", "file"), ("evolve/previous", "dir"), ("evolve", "dir")])
def test_init_writes_nothing_through_a_link(tmp_path, capsys, link, target):
    """A repository's committed symlink does not make init a writer outside it: every path is checked before the
    first byte is written (it once wrote through `evolve/tasks`, then stopped with dvc.yaml and params.yaml
    written)."""
    repo = _repo(tmp_path / "team")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "held").write_text("not init's\n")
    (repo / link).parent.mkdir(parents=True, exist_ok=True)
    (repo / link).symlink_to(outside if target == "dir" else outside / "held")
    before, outside_before = _tree(repo), _tree(outside)
    assert init_cmd.main([str(repo / "evolve")]) == 2
    assert "(rule: paths inside the repository)" in capsys.readouterr().err
    assert _tree(repo) == before and _tree(outside) == outside_before  # nothing written, here or there


@pytest.mark.parametrize("fails", ["a file", "the last ignore line"])
def test_init_writes_all_or_nothing(tmp_path, monkeypatch, fails):
    """A failure part way (a full disk, a dvc init that breaks) leaves the repository as it was: no half pipeline,
    the team's own .dvcignore byte for byte, no .dvc of init's making."""
    repo = _repo(tmp_path / "team")
    (repo / ".dvcignore").write_text("team's own\n")
    before = _tree(repo)
    if fails == "a file":
        real, calls = init_cmd.safefs.write_atomic, []

        def write_atomic(path, data, **kw):
            calls.append(path)
            if len(calls) == 3:
                raise OSError(28, "No space left on device")
            real(path, data, **kw)
        monkeypatch.setattr(init_cmd.safefs, "write_atomic", write_atomic)
    else:
        real_append = init_cmd._append_lines

        def append(path, lines):
            if path.name == ".dvcignore":
                assert (repo / ".dvc").is_dir()  # dvc init ran: the undo must remove it
                raise OSError(28, "No space left on device")
            real_append(path, lines)
        monkeypatch.setattr(init_cmd, "_append_lines", append)
    with pytest.raises(OSError, match="No space left"):
        init_cmd.init(repo / "evolve", None, None)
    after = {rel: v for rel, v in _tree(repo).items() if v != "dir"}
    assert after == {rel: v for rel, v in before.items() if v != "dir"}


def test_the_params_init_writes_hold_every_key_dvc_yaml_names(tmp_path):
    """DVC reads the keys a stage lists from params.yaml itself (it knows nothing of the schema's defaults): a key
    left to its default stops `dvc repro` before the first stage."""
    repo = _repo(tmp_path / "team")
    assert init_cmd.main([str(repo / "evolve")]) == 0
    params = yaml.safe_load((repo / "evolve/params.yaml").read_text())
    named = set()
    for body in yaml.safe_load((repo / "evolve/dvc.yaml").read_text())["stages"].values():
        named |= {key for key in body.get("do", body).get("params", []) if isinstance(key, str)}
    for key in sorted(named):
        node = params
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, key
            node = node[part]


def test_init_finds_the_committed_copies_of_the_family_as_mirrors(tmp_path):
    """A plugin that ships the same skills (a byte copy) is a mirror apply keeps in step; a copy that differs, or
    another family, is not; `--mirrors` with no value means none."""
    repo = _repo(tmp_path / "team")
    for rel in ("plugins/team/skills", "plugins/old/skills"):
        shutil.copytree(repo / ".claude/skills", repo / rel, symlinks=True)
    (repo / "plugins/old/skills/alpha/SKILL.md").write_text((repo / "plugins/old/skills/alpha/SKILL.md").read_text()
                                                            + "- an older line\n")
    subprocess.run([*GIT, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", "a plugin"], check=True)
    assert init_cmd.main([str(repo / "evolve")]) == 0
    assert yaml.safe_load((repo / "evolve/params.yaml").read_text())["skills"]["paths"]["mirrors"] == \
        ["plugins/team/skills"]
    assert init_cmd.main([str(repo / "other"), "--mirrors"]) == 0
    assert yaml.safe_load((repo / "other/params.yaml").read_text())["skills"]["paths"]["mirrors"] == []


def test_init_writes_an_arm_per_evolvable_skill_and_says_its_plan(tmp_path, capsys):
    """Under `auto` the offline model loads one skill every time, so a skill no arm names is never measured and never
    moves (issue 32, item 3): init names each evolvable skill in an arm of its own, and its closing line states the
    arms and a schedule that can promote, judged by the rule check applies."""
    repo = _repo(tmp_path / "team")
    assert init_cmd.main([str(repo / "evolve")]) == 0
    out = capsys.readouterr().out
    arms = yaml.safe_load((repo / "evolve/params.yaml").read_text())["arms"]
    assert list(arms) == ["auto", "skill_alpha", "skill_beta", "baseline"]
    assert [(s["skill"], s["prompt"].splitlines()[0]) for s in arms["skill_beta"]["sessions"]] == [
        ("beta", "Use the beta skill for: {prompt}")]
    assert "one arm per evolvable skill (skill_alpha, skill_beta)" in out, out
    assert "it can promote with 1 gate task(s) or more" in out, out
    from skillevo.core import config

    config.load(repo / "evolve/params.yaml")  # the schema's rules for arms hold


def test_init_with_many_skills_writes_no_arm_per_skill_and_says_why(tmp_path, capsys, monkeypatch):
    repo = _repo(tmp_path / "team")
    for i in range(init_cmd.MAX_SKILL_ARMS):
        (repo / f".claude/skills/s-{i}").mkdir()
        (repo / f".claude/skills/s-{i}/SKILL.md").write_text(f"---\nname: s-{i}\ndescription: Skill {i}.\n---\n\nx\n")
    assert init_cmd.main([str(repo / "evolve")]) == 0
    out = capsys.readouterr().out
    assert list(yaml.safe_load((repo / "evolve/params.yaml").read_text())["arms"]) == ["auto", "baseline"]
    assert f"no arm per skill ({init_cmd.MAX_SKILL_ARMS + 2} evolvable skills" in out, out
    assert "until then only auto can load them" in out
    subprocess.run([*GIT, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", "skillevo init"], check=True)
    monkeypatch.chdir(repo / "evolve")  # check names each evolvable skill only auto can load, before paying
    assert check_cmd.main(["--no-tasks"]) == 2  # the placeholder task: a to-do
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("check: note: ")]
    assert len(notes) == init_cmd.MAX_SKILL_ARMS + 2 and "evolvable skill 'alpha' is named by no arm" in notes[0]


@pytest.mark.bwrap
@pytest.mark.cli
def test_init_example_writes_a_task_that_check_passes_and_a_generation_runs(tmp_path, monkeypatch, capsys):
    """`init --example`: a real task on the team's own repository (create one file), pinned to the commit init ran
    at, solved by a patch, with a hidden oracle stricter than verify: check runs it in the sandbox and passes, and
    `dvc repro` runs offline end to end. One task is all the gate's, so the proposer has no evidence run to cite:
    the generation is a no_proposal (issue 32, item 4), which status reports and apply refuses."""
    repo = _repo(tmp_path / "team")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert init_cmd.main([str(repo / "evolve"), "--example"]) == 0
    assert "next: commit, then `skillevo check`" in capsys.readouterr().out
    [task] = yaml.safe_load((repo / "evolve/tasks/tasks.yaml").read_text())["tasks"]
    assert task["ref"] == head.strip() and task["solution"] == {"patch": "example.patch"}
    subprocess.run([*GIT, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", "skillevo init --example"], check=True)
    monkeypatch.chdir(repo / "evolve")
    assert check_cmd.main([]) == 0, capsys.readouterr().err
    assert "1 task(s) set up and unsolved as given" in capsys.readouterr().out
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "-m", "dvc", "repro"], cwd=repo / "evolve", env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    promotion = yaml.safe_load((repo / "evolve/results/gate/promotion.json").read_text())
    assert promotion["decisions"] == [] and "nothing in the evidence supports a change" in promotion["no_proposal"]
    assert "bench candidate: 0 cells" in done.stdout + done.stderr
    rows = (repo / "evolve/results/bench-incumbent/results.jsonl").read_text().splitlines()
    assert len(rows) == 4 * 5  # auto, one arm per skill, baseline; five runs each
    cli = [sys.executable, "-m", "skillevo"]
    status = subprocess.run([*cli, "status"], cwd=repo / "evolve", env=env, capture_output=True, text=True)
    assert status.stdout.startswith("decision: no proposal this generation: "), status.stdout
    applied = subprocess.run([*cli, "apply"], cwd=repo / "evolve", env=env, capture_output=True, text=True)
    assert applied.returncode == 2 and "has nothing to apply" in applied.stderr, applied.stderr


def test_init_example_refuses_a_repository_that_has_its_file(tmp_path, capsys):
    repo = _repo(tmp_path / "team")
    (repo / init_cmd.EXAMPLE_FILE).parent.mkdir()
    (repo / init_cmd.EXAMPLE_FILE).write_text(init_cmd.EXAMPLE_LINE + "\n")
    subprocess.run([*GIT, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", "has it"], check=True)
    assert init_cmd.main([str(repo / "evolve"), "--example"]) == 2
    assert "would be solved as given (rule: a task is unsolved at its ref)" in capsys.readouterr().err
    assert not (repo / "evolve").exists()
