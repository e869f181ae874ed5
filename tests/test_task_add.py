"""`skillevo task add --from-commit FIX` makes a task of a fix the team already made (issue 32, item 2): the fix's
parent is the bug, the fix the solution, the tests it brought the hidden oracle; a fix with no test is refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from skillevo.core import tasks
from skillevo.files.errors import BadInput
from skillevo.ops import init as init_cmd
from skillevo.ops import task_add

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
SKILL = ("---\nname: fix\ndescription: Fix a bug in this repository, test first.\n---\n# Fix\n\n"
         "Run `python3 -m pytest -q`.\n")
TEST_OLD = "from lib.calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
TEST_NEW = TEST_OLD + "\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    subprocess.run([*GIT, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", message], check=True)
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture
def team(tmp_path):
    """A repository with a bug, skillevo's pipeline in evolve/, then the fix with a new test."""
    repo = tmp_path / "team"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    _commit(repo, {".claude/skills/fix/SKILL.md": SKILL, "lib/__init__.py": "",
                   "lib/calc.py": "def add(a, b):\n    return a - b\n", "tests/test_calc.py": TEST_OLD}, "a bug")
    assert init_cmd.main([str(repo / "evolve")]) == 0
    bug = _commit(repo, {}, "skillevo")
    fix = _commit(repo, {"lib/calc.py": "def add(a, b):\n    return a + b\n", "tests/test_calc.py": TEST_NEW},
                  "Fix add: it subtracted")
    return {"repo": repo, "tasks": repo / "evolve/tasks/tasks.yaml", "bug": bug, "fix": fix}


def test_a_fix_and_its_tests_make_a_task_that_replaces_inits_placeholder(team):
    header = team["tasks"].read_text().splitlines()[0]
    task = task_add.from_commit(team["tasks"], "HEAD")
    assert task["id"] == "fix-add-it-subtracted" and task["class"] == "from-commit"
    assert (task["ref"], task["solution"]) == (team["bug"], {"ref": team["fix"]})
    assert task["target"] == "../.."
    # verify selects the test the fix added (absent at the bug, so it fails there); the prompt names it
    assert task["verify"] == "python3 -m pytest -q -p no:cacheprovider tests/test_calc.py -k test_add"
    assert task["prompt"] == "Fix add: it subtracted\nAdd tests named test_add in tests/test_calc.py."
    oracle = team["tasks"].parent / "oracles/fix-add-it-subtracted/test_calc.py"
    assert oracle.read_text() == TEST_NEW  # the fix's version of its tests: hidden
    loaded = tasks.load(team["tasks"], target_roots=[team["repo"]])
    assert [t.id for t in loaded] == ["fix-add-it-subtracted"]  # init's placeholder is replaced
    assert not (team["tasks"].parent / "oracles/test_example_oracle.py").exists()
    assert team["tasks"].read_text().splitlines()[0] == header  # the file's comments stay
    second = _commit(team["repo"], {"tests/test_more.py": "def test_more():\n    assert True\n"}, "more tests")
    task_add.from_commit(team["tasks"], second, task_id="more")
    assert [t.id for t in tasks.load(team["tasks"], target_roots=[team["repo"]])] == ["fix-add-it-subtracted", "more"]


def test_a_fix_that_brings_no_test_or_is_a_merge_or_a_taken_id_is_refused_and_changes_nothing(team):
    before = team["tasks"].read_bytes()
    with pytest.raises(BadInput, match="adds or changes no test file"):
        task_add.from_commit(team["tasks"], "HEAD~1")  # the pipeline's own oracle is no test of the fix
    _commit(team["repo"], {"lib/other.py": "x = 1\n"}, "no tests")
    with pytest.raises(BadInput, match="needs the tests the fix brought"):
        task_add.from_commit(team["tasks"], "HEAD")
    repo = team["repo"]
    subprocess.run([*GIT, "-C", str(repo), "checkout", "-qb", "side", "HEAD~1"], check=True)
    _commit(repo, {"tests/test_side.py": "def test_side():\n    assert True\n"}, "side")
    subprocess.run([*GIT, "-C", str(repo), "checkout", "-q", "-"], check=True)
    subprocess.run([*GIT, "-C", str(repo), "merge", "-q", "--no-edit", "side"], check=True)
    with pytest.raises(BadInput, match="has 2 parents"):
        task_add.from_commit(team["tasks"], "HEAD")
    with pytest.raises(BadInput, match="task 'example' exists"):
        task_add.from_commit(team["tasks"], team["fix"], task_id="example")
    assert team["tasks"].read_bytes() == before
    assert not (team["tasks"].parent / "oracles/example").exists()


@pytest.mark.bwrap
def test_check_runs_a_task_from_a_commit_and_finds_it_measures_something(team):
    """verify and the oracle fail at the bug and pass with the fix, in the bench's sandbox: no problem, and the
    placeholder gone, nothing left to do."""
    task_add.from_commit(team["tasks"], "HEAD")
    _commit(team["repo"], {}, "the task")
    done = subprocess.run([sys.executable, "-m", "skillevo", "check"], cwd=team["repo"] / "evolve",
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 task(s) set up and unsolved as given" in done.stdout
    assert yaml.safe_load(team["tasks"].read_text())["tasks"][0]["id"] == "fix-add-it-subtracted"


def test_a_range_makes_a_task_of_each_fix_that_brings_tests_and_lists_the_rest(team, capsys):
    """`--from-range A..B` (a branch's fixes: main..branch): each commit that brings tests becomes a task, oldest
    first; one with no test, or a merge, is listed with its rule and nothing of it is written; a taken id gets the
    commit's short hash."""
    repo = team["repo"]
    start = team["bug"]
    second = _commit(repo, {"tests/test_sub.py": "from lib.calc import add\n\n\ndef test_neg():\n"
                                                 "    assert add(-1, 1) == 0\n"}, "Fix add: it subtracted")
    _commit(repo, {"README": "docs\n"}, "Write the docs")
    assert task_add.main(["add", "--from-range", f"{start}..HEAD", "--tasks", str(team["tasks"])]) == 0
    captured = capsys.readouterr()
    ids = [t.id for t in tasks.load(team["tasks"], target_roots=[repo])]
    assert ids == ["fix-add-it-subtracted", f"fix-add-it-subtracted-{second[:7]}"]
    assert "left out" in captured.err and "'Write the docs'" in captured.err and "adds or changes no test file" in \
        captured.err
    assert "2 task(s) from" in captured.out and "1 commit(s) left out" in captured.out
    before = team["tasks"].read_bytes()
    assert task_add.main(["add", "--from-range", f"{start}..HEAD", "--tasks", str(team["tasks"])]) == 2  # again
    assert capsys.readouterr().err.count("(rule: one task per fix)") == 2
    for argv, rule in ((["--from-range", "HEAD"], "not a range"), (["--from-range", "HEAD..HEAD"], "holds no commit"),
                       (["--from-range", f"{start}..HEAD", "--id", "x"], "one task each")):
        assert task_add.main(["add", *argv, "--tasks", str(team["tasks"])]) == 2
        assert rule in capsys.readouterr().err
    assert team["tasks"].read_bytes() == before  # a refusal writes nothing
