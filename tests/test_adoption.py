"""A second team adopts skillevo as issue 32 asks, with nothing but the `skillevo` command and init's plan unedited.

The repository is another real library from the package index: inflection 0.5.1's sdist (pure Python, its own
pytest suite kept in the repository, as a team keeps it). Its history is made the way teams make theirs: for each of
four bugs, a commit that brings the bug and a later commit that fixes it and adds a test. The team keeps two skills
of its own; the fixer's has a costly habit (five look-around commands on one line). skillevo is installed from a
wheel of this working tree into a fresh venv; then `init` (its plan as written: an arm per skill, the sequential
schedule, the test by betting, realistic noise), `task add --from-commit` for each fix, `check` (which states the
price), `dvc repro` (one offline generation, ending in a promotion), `apply` and `revert`. Each step's time is
printed at the end (`-s` shows it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.test_user_repo import _dvc, _git, _skillevo, team_env
from tests.wheel import fresh_install, sdist_tree

pytestmark = [pytest.mark.cli, pytest.mark.bwrap, pytest.mark.timeout(1800)]
SDIST = "inflection==0.5.1"
MODULE = "inflection/__init__.py"
# (fix, the bug: (right, wrong) in inflection/__init__.py, the test the fix adds to test_inflection.py)
BUGS = [
    ("dasherize", ("return word.replace('_', '-')", "return word.replace('-', '_')"),
     "def test_dasherize_makes_dashes():\n    assert inflection.dasherize('puni_puni') == 'puni-puni'\n"),
    ("ordinalize", ('return "{}{}".format(number, ordinal(number))', 'return "{} {}".format(number, ordinal(number))'),
     "def test_ordinalize_joins_the_suffix():\n    assert inflection.ordinalize(102) == '102nd'\n"),
    ("tableize", ("return pluralize(underscore(word))", "return underscore(word)"),
     "def test_tableize_pluralizes():\n    assert inflection.tableize('RawScaledScorer') == 'raw_scaled_scorers'\n"),
    ("underscore", ("    return word.lower()\n\n\n", "    return word\n\n\n"),
     "def test_underscore_lowercases():\n    assert inflection.underscore('DeviceType') == 'device_type'\n"),
]
# the fixer's costly habit: five commands on one line, five extra turns a session, each carrying all the context
COSTLY = ("- Before you finish, look around once more: `git log --oneline -n 5`, `cat README.rst`, "
          "`cat inflection/__init__.py`, `cat test_inflection.py` and `ls -la docs`.")
FIXER = f"""---
name: fixer
description: Fix a bug in a function of the inflection library, with a test first.
---

# Fixing a bug in inflection

- Find the function with `grep -n "def " {MODULE}`, then change only the lines that are wrong.
- Run the task's own check before you finish.
{COSTLY}
"""
REVIEWER = """---
name: reviewer
description: Review a change to this repository's documentation before it is committed.
---

# Review

- Look at what changed with `git diff --stat`.
- Say what the change does in one sentence.
"""


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("adopt")
    bindir = fresh_install(tmp / "install")[1].parent
    repo = sdist_tree(tmp, SDIST, "inflection")
    for cache in list(repo.rglob("__pycache__")):  # the sdist ships a bytecode cache no team commits
        for f in cache.iterdir():
            f.unlink()
        cache.rmdir()
    for name, text in (("fixer", FIXER), ("reviewer", REVIEWER)):
        (repo / ".claude/skills" / name).mkdir(parents=True)
        (repo / ".claude/skills" / name / "SKILL.md").write_text(text)
    team = {"repo": repo, "env": team_env(tmp, bindir), "bin": bindir, "log": []}
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "inflection 0.5.1 with the team's skills")
    team["fixes"] = _history(repo)
    return team


def _history(repo: Path) -> dict[str, str]:
    """Each bug arrives in a commit and leaves in a later one that adds its test, on main, as a team's history
    reads: returns each fix's commit."""
    fixes = {}
    for name, (right, wrong), test in BUGS:
        text = (repo / MODULE).read_text()
        assert text.count(right) == 1, right
        (repo / MODULE).write_text(text.replace(right, wrong))
        _git(repo, "commit", "-qam", f"Refactor {name}")
        (repo / MODULE).write_text(text)
        with (repo / "test_inflection.py").open("a") as f:
            f.write(f"\n\n{test}")
        _git(repo, "commit", "-qam", f"Fix a bug in inflection.{name}: restore it and test it")
        fixes[name] = _git(repo, "rev-parse", "HEAD").strip()
    return fixes


def test_a_second_library_adopts_skillevo_with_init_s_plan_and_ends_in_a_promotion(team):
    repo, folder = team["repo"], team["repo"] / "evolve"
    done = _skillevo(team, "init", "evolve", cwd=repo)
    assert done.returncode == 0, done.stderr
    assert "one arm per evolvable skill (skill_fixer, skill_reviewer)" in done.stdout, done.stdout
    plan = (folder / "params.yaml").read_bytes()
    for name, fix in team["fixes"].items():
        done = _skillevo(team, "task", "add", "--from-commit", fix, "--id", name, cwd=folder)
        assert done.returncode == 0, done.stderr
    assert (folder / "params.yaml").read_bytes() == plan  # the plan as init wrote it, unedited
    loaded = yaml.safe_load((folder / "tasks/tasks.yaml").read_text())["tasks"]
    assert [t["id"] for t in loaded] == list(team["fixes"])  # init's placeholder replaced by the first
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "skillevo: the pipeline and four tasks from our fixes")

    done = _skillevo(team, "check", cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 task(s) set up and unsolved as given" in done.stdout + done.stderr
    assert "check: price: the incumbent side: 80 sessions" in done.stdout, done.stdout  # 4 tasks x 4 arms x 5

    done = _dvc(team, "repro", cwd=folder)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    proposal = (folder / "results/proposal/proposal.md").read_text()
    assert f"Instruction removed: {COSTLY}" in proposal, proposal  # the costliest line, cited by its runs
    promotion = json.loads((folder / "results/gate/promotion.json").read_text())
    assert {d["candidate_arm"]: d["decision"] for d in promotion["decisions"]} == {
        "candidate_auto": "promote", "candidate_skill_fixer": "promote"}, [d["reasons"] for d in
                                                                          promotion["decisions"]]
    assert (folder / "results/gate/index.html").is_file()

    done = _skillevo(team, "apply", cwd=folder)
    assert done.returncode == 0, done.stderr
    diff = _git(repo, "diff", "--", ".claude/skills")
    assert [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")] == [
        f"-{COSTLY}"], diff
    done = _skillevo(team, "revert", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert _git(repo, "status", "--short", "--", ".claude") == ""
    print("timings (s): " + "; ".join(f"{Path(args[0]).name} {' '.join(args[1:3])}: {secs}"
                                     for args, _, secs in team["log"]))
