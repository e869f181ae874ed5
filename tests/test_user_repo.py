"""A team evolves the skills of its own repository, as the README tells it to, end to end.

The repository is a real public library: six 1.17.0's sdist from PyPI (pure Python, its own pytest suite). The team
keeps two skills of its own and a third-party one with an executable script in `.claude/skills`, its library's own
tests as hidden oracles (in the pipeline's folder, which no workspace gets), and four tasks on the repository
itself: each a commit with a bug, with the commit before it as the reference solution. skillevo is installed from
a wheel of this working tree into a fresh venv, then `skillevo init`, `skillevo check`, `dvc repro` (one offline
generation: the generic simulated agent plays the tasks from their solutions), `skillevo apply` and `skillevo
revert` run there. The third-party skill stands in for a public one (GitHub is not reachable from CI; PyPI is).

With SKILLEVO_TEST_IMAGE set (`.ci/image.sh demo` sets it), the same steps run in that container image instead
(`make image-run`: the repository mounted at its own path, owned by the image's user), at the image demo's size."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.wheel import fresh_install, sdist_tree

pytestmark = [pytest.mark.cli, pytest.mark.bwrap, pytest.mark.timeout(1500)]
ROOT = Path(__file__).resolve().parents[1]
SDIST = "six==1.17.0"
IMAGE = os.environ.get("SKILLEVO_TEST_IMAGE")  # run the skillevo and dvc steps in this image
IMAGE_UID = os.environ.get("SKILLEVO_TEST_IMAGE_UID", "10001")
GIT = ["git", "-c", "user.name=team", "-c", "user.email=team@example.invalid", "-c", "commit.gpgsign=false",
       "-c", "safe.directory=*"]  # in image mode the repository belongs to the image's user
# (task, the bug: (old, new) in six.py, the visible check, the library's own tests that are its hidden oracle)
TASKS = [
    ("int2byte", ('int2byte = struct.Struct(">B").pack', 'int2byte = struct.Struct(">H").pack'),
     "python3 -c 'import six; assert six.int2byte(3) == b\"\\x03\"'", ["test_int2byte"]),
    ("byte2int", ("byte2int = operator.itemgetter(0)", "byte2int = operator.itemgetter(-1)"),
     "python3 -c 'import six; assert six.byte2int(b\"\\x03\\x04\") == 3'", ["test_byte2int"]),
    ("indexbytes", ("indexbytes = operator.getitem", "indexbytes = lambda buf, i: buf[i + 1]"),
     "python3 -c 'import six; assert six.indexbytes(b\"hello\", 1) == ord(\"e\")'", ["test_bytesindex"]),
    ("iterbytes", ("iterbytes = iter\n", "iterbytes = reversed\n"),
     "python3 -c 'import six; assert list(six.iterbytes(b\"hi\")) == [104, 105]'", ["test_bytesiter"]),
]
FIXER = """---
name: fixer
description: Fix a bug in a function of the six compatibility module (six.py), test first.
---

# Fixing a bug in six

- Find the function's definition with `grep -n "def \\|= " six.py | head -n 60`.
- Keep the change to the one line that is wrong; never reformat the module.
- Check the change with the task's own check before you finish.
- Before you finish, look around once more: `git log --oneline -n 5`, `cat six.py`, `cat CHANGES` and
  `ls -la documentation`, to be sure nothing else moved.
"""
REVIEWER = """---
name: reviewer
description: Review a change to this repository before it is committed.
---

# Review

- Look at what changed with `git diff --stat`.
- Say what the change does in one sentence.
"""
RUNNER = """---
name: test-runner
description: Run a Python project's tests and summarise the failures.
---

# Test runner

Run `scripts/run_tests.sh` from the repository root; it prints one line per failing test.
"""
RUN_TESTS = "#!/bin/sh\n# one line per failing test\npython3 -m pytest -q -p no:cacheprovider 2>&1 | tail -n 5\n"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _oracle(tests: str, names: list[str]) -> str:
    """The library's own tests of a task, verbatim, in a file of their own (with the suite's imports)."""
    tree = ast.parse(tests)
    found = [ast.get_source_segment(tests, node) for node in tree.body
             if isinstance(node, ast.FunctionDef) and node.name in names]
    assert len(found) == len(names), names
    return "import pytest\n\nimport six\n\n\n" + "\n\n\n".join(found) + "\n"


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("team")
    bindir = None if IMAGE else fresh_install(tmp / "install")[1].parent
    repo = sdist_tree(tmp, SDIST, "six")
    suite = (repo / "test_six.py").read_text()
    (repo / "test_six.py").unlink()  # the team's suite is its hidden oracles (below)
    skills = repo / ".claude/skills"
    for name, text in (("fixer", FIXER), ("reviewer", REVIEWER), ("test-runner", RUNNER)):
        (skills / name).mkdir(parents=True)
        (skills / name / "SKILL.md").write_text(text)
    (skills / "test-runner/scripts").mkdir()
    (skills / "test-runner/scripts/run_tests.sh").write_text(RUN_TESTS)
    (skills / "test-runner/scripts/run_tests.sh").chmod(0o755)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "six 1.17.0 with the team's skills")
    return {"repo": repo, "env": team_env(tmp, bindir), "bin": bindir, "suite": suite, "log": []}


def team_env(home: Path, bindir: Path | None) -> dict[str, str]:
    """What a team member's shell holds: the fresh venv's commands first, a home of its own, the pinned CLI."""
    return {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(home),
            "SKILLEVO_CLAUDE": os.environ.get("SKILLEVO_CLAUDE", ""), "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
            "GIT_AUTHOR_NAME": "team", "GIT_AUTHOR_EMAIL": "team@example.invalid", "GIT_COMMITTER_NAME": "team",
            "GIT_COMMITTER_EMAIL": "team@example.invalid"}


def _run(team, *args: str, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    """A step of the team's: in the fresh venv, or (image mode) in the image on the repository mounted there."""
    command, env = list(args), team["env"]
    if IMAGE:
        subprocess.run(["chown", "-R", f"{IMAGE_UID}:{IMAGE_UID}", str(team["repo"])], check=True)
        command = ["make", "--no-print-directory", "-C", str(ROOT), "image-run", f"IMAGE={IMAGE}",
                   f"IMAGE_UID={IMAGE_UID}", f"REPO={team['repo']}", f"RUN_IN={cwd}", f"RUN={shlex.join(args)}"]
        env = {**os.environ, "CONTAINER_ENGINE": os.environ.get("CONTAINER_ENGINE", "podman")}
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    team["log"].append((args, done.returncode, round(time.monotonic() - started, 1)))
    return done


def _skillevo(team, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return _run(team, "skillevo" if IMAGE else str(team["bin"] / "skillevo"), *args, cwd=cwd)


def _dvc(team, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return _run(team, "python" if IMAGE else str(team["bin"] / "python"), "-m", "dvc", *args, cwd=cwd, timeout=1400)


def _tasks(team) -> dict:
    repo, out = team["repo"], []
    for task_id, _, verify, names in TASKS:
        out.append({"id": task_id, "class": "bytes", "target": "../..", "ref": f"bug-{task_id}",
                    "prompt": f"six.{task_id} is broken on Python 3: fix it in six.py.", "verify": verify,
                    "oracle": {"command": 'python3 -m pytest -q -p no:cacheprovider --rootdir="$SKILLEVO_ORACLE_DIR" '
                                          f'"$SKILLEVO_ORACLE_DIR/test_{task_id}.py"',
                               "files": [{"source": f"test_{task_id}.py", "target": f"test_{task_id}.py"}]},
                    "solution": {"ref": "fixed"}})
        (repo / f"evolve/tasks/oracles/test_{task_id}.py").write_text(_oracle(team["suite"], names))
    return {"schema_version": 1, "tasks": out}


def test_init_check_repro_apply_revert_in_a_team_repository(team):
    repo = team["repo"]
    folder = repo / "evolve"
    done = _skillevo(team, "init", "evolve", cwd=repo)
    assert done.returncode == 0, done.stderr
    params = yaml.safe_load((folder / "params.yaml").read_text())
    assert params["skills"]["evolvable"] == ["fixer", "reviewer", "test-runner"]
    params["skills"]["evolvable"] = ["fixer", "reviewer"]  # the third-party skill is not the team's to rewrite
    assert list(params["arms"]) == ["auto", "skill_fixer", "skill_reviewer", "skill_test_runner", "baseline"]
    params["arms"] = {name: params["arms"][name] for name in ("auto", "baseline")}  # the image demo's size (below);
    # init's plan as written is tests/test_adoption.py's
    # 3 gate tasks x 8 = 24 runs per arm (72 sessions in all), in CI's 30 minutes; with fewer runs than
    # gate.min_total_runs, `check` says no candidate can be promoted. At 8 runs one unresolved candidate run still
    # bounds the resolution drop within gate.max_resolution_drop_pct (18.3 points, against 23.8 at 6): CI once lost
    # a run to an oracle error no rerun showed (docs/benchmarks.md), and one lost run must not decide the path test
    params["sampling"].update(runs=8, incumbent_runs=3)
    params["sampling"]["sequential"]["first"] = 8  # one look: the gate's line and the status show one level
    params["gate"]["min_total_runs"] = 18
    params["gate"]["test"] = "bootstrap"  # 8 rounds: too few for the test by betting (tests/test_pipeline.py)
    params["simulator"]["noise"] = "demo"  # the demo's spread, no mistakes: the test is of the path, not of luck
    (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (folder / "tasks/oracles/test_example_oracle.py").unlink()
    (folder / "tasks/tasks.yaml").write_text(yaml.safe_dump(_tasks(team), sort_keys=False))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "skillevo: the pipeline, tasks and hidden oracles")
    _git(repo, "tag", "fixed")
    for task_id, (old, new), _, _ in TASKS:  # a commit with the bug, for each task
        _git(repo, "checkout", "-q", "-b", f"bug-{task_id}", "fixed")
        text = (repo / "six.py").read_text()
        assert text.count(old) == 1, old
        (repo / "six.py").write_text(text.replace(old, new))
        _git(repo, "commit", "-qam", f"a bug in six.{task_id}")
        _git(repo, "checkout", "-q", "main")

    done = _skillevo(team, "check", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert "4 task(s) set up and unsolved as given" in done.stdout + done.stderr
    # the price before paying (issue 32, item 5): 4 tasks x 3 runs x 2 arms (auto, baseline) on the incumbent side,
    # and at most 3 gate tasks x 8 runs x 2 cells (auto's candidate and its control) on a candidate side
    assert "check: price: the incumbent side: 24 sessions" in done.stdout, done.stdout
    assert "a candidate side: at most 48 sessions" in done.stdout, done.stdout

    done = _dvc(team, "repro", cwd=folder)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    promotion = json.loads((folder / "results/gate/promotion.json").read_text())
    assert [(d["decision"], d["reasons"]) for d in promotion["decisions"]][0][0] == "promote", promotion["decisions"]
    output = done.stdout + done.stderr
    gate_line = next(line for line in output.splitlines() if line.startswith("candidate_auto: promote ("))
    status = _skillevo(team, "status", cwd=folder)
    assert status.returncode == 0 and "next: `skillevo apply`" in status.stdout, status.stdout + status.stderr
    figures = re.findall(r"-?\d+(?:\.\d+)?%|p[<=>]+[0-9.e-]+", gate_line)
    assert len(figures) >= 4, gate_line  # the improvement, its interval's ends, the p-value
    for figure in figures:
        assert figure in status.stdout, (figure, gate_line, status.stdout)

    mode = (repo / ".claude/skills/test-runner/scripts/run_tests.sh").stat().st_mode
    done = _skillevo(team, "apply", cwd=folder)
    assert done.returncode == 0, done.stderr
    diff = _git(repo, "diff", "--", ".claude/skills")
    assert diff.startswith("diff --git a/.claude/skills/"), diff
    removed = [line for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    assert not [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    costly = FIXER.split("- Before you finish", 1)[1].splitlines()[:2]  # the list item and its continuation line
    assert removed == ["-- Before you finish" + costly[0], "-" + costly[1]], diff  # the costliest, whole
    assert (repo / ".claude/skills/test-runner/scripts/run_tests.sh").stat().st_mode == mode
    assert "test-runner" not in diff  # not evolvable: never touched

    done = _skillevo(team, "revert", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert _git(repo, "diff", "--", ".claude/skills") == ""
    assert _git(repo, "status", "--short", "--", ".claude") == ""
    print("timings (s): " + "; ".join(f"{Path(args[0]).name} {' '.join(args[1:])}: {secs}"
                                     for args, _, secs in team["log"]))
