"""`skillevo check` says, before anything is paid, every problem a bench, a freeze or the gate would stop on later,
one line each naming the file and the rule, all in one pass; and the bench itself refuses an evolvable name that
is not a skill before its first session."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from skillevo.bench import plan, run_side
from skillevo.core import config
from skillevo.files.errors import BadInput
from skillevo.ops import check as check_cmd
from tests.bench_fixtures import ROOT, make_mini, params_doc

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


def _world(root: Path, runs: int = 20, **params: dict) -> Path:
    """A committed repository with the mini tasks (one gate task), the demo's family and its mirror, and params
    whose gate can promote (runs x 1 gate task >= min_total_runs)."""
    make_mini(root)
    shutil.copytree(ROOT / "skills", root / "skills")
    shutil.copytree(ROOT / "skills", root / ".claude/skills")
    shutil.copy(ROOT / "skill-modes.json", root / "skill-modes.json")
    doc = params_doc(runs=runs)
    doc["tasks"].update(gate=["greet"], evidence=["cheat"])
    doc["gate"].update(min_total_runs=20)
    for section, values in params.items():
        doc[section] = {**doc.get(section, {}), **values}
    (root / "params.yaml").write_text(yaml.safe_dump(doc))
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*GIT, "-C", str(root), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(root), "commit", "-qm", "world"], check=True)
    return root


def _check(root: Path, *extra: str) -> int:
    return check_cmd.main(["--params", str(root / "params.yaml"), "--tasks", str(root / "tasks/tasks.yaml"),
                           "--modes", str(root / "skill-modes.json"), "--repo", str(root), *extra])


def test_a_sound_world_passes_and_its_price_is_stated(tmp_path, capsys):
    assert _check(_world(tmp_path), "--no-tasks") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("check: ok:")
    assert [line.split(":")[1] for line in out[:3]] == [" price"] * 3, out  # before anything is paid
    assert out[0].startswith("check: price: the incumbent side: ") and "a candidate side: at most" in out[1]


def test_every_problem_is_one_line_in_one_pass(tmp_path, capsys):
    root = _world(tmp_path)
    doc = yaml.safe_load((root / "params.yaml").read_text())
    doc["skills"]["evolvable"] = ["plan", "wrok"]  # misspelt
    doc["sampling"]["runs"] = 4  # 4 runs on 1 gate task: below min_total_runs 20
    (root / "params.yaml").write_text(yaml.safe_dump(doc))
    skill = root / "skills/work/SKILL.md"
    skill.write_text(skill.read_text() + "\n- an uncommitted line\n")
    assert _check(root, "--no-tasks") == 2
    err = capsys.readouterr().err.splitlines()
    problems = [line for line in err if line.startswith("check: ") and "(rule: " in line]
    rules = sorted(line.rsplit("(rule: ", 1)[1].rstrip(")") for line in problems)
    assert "evolvable skills exist" in rules and "no drift" in rules, err
    assert any("below gate.min_total_runs 20" in line for line in problems), err
    assert any("skills/work/SKILL.md: differs from its committed bytes" in line for line in problems), err
    assert err[-1].startswith("check: refused: ") and "problem(s) above" in err[-1]


def test_a_problem_two_checks_meet_is_said_once(tmp_path, capsys):
    """The bench's plan and check's own reading of the family both meet a bad frontmatter; check said it twice
    (issue 32, rough edges)."""
    root = _world(tmp_path)
    skill = root / "skills/work/SKILL.md"
    skill.write_text(skill.read_text().replace("name: work", "name: Work Skill", 1))
    assert _check(root, "--no-tasks") == 2
    problems = [line for line in capsys.readouterr().err.splitlines() if "(rule: " in line]
    assert problems and len(problems) == len(set(problems)), problems
    assert sum("skills/work/SKILL.md" in line for line in problems) == 1, problems


def test_a_real_backend_without_a_credential_is_a_problem(tmp_path, capsys, monkeypatch):
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    root = _world(tmp_path, model={"backend": "anthropic", "name": "claude-sonnet-4-6"})
    assert _check(root, "--no-tasks") == 2
    assert "(rule: a credential from the environment)" in capsys.readouterr().err


def test_the_bench_refuses_an_evolvable_name_that_is_not_a_skill(tmp_path):
    root = _world(tmp_path)
    doc = yaml.safe_load((root / "params.yaml").read_text())
    doc["skills"]["evolvable"] = ["wrok"]
    with pytest.raises(BadInput, match=r"skills.evolvable: 'wrok' is not a skill .*\(rule: evolvable skills exist\)"):
        plan("incumbent", root / "tasks/tasks.yaml", root / "skills", None, config.parse(doc))


@pytest.mark.bwrap
def test_a_task_already_solved_or_a_setup_that_fails_is_said_before_any_session(tmp_path, capsys):
    root = _world(tmp_path)
    assert _check(root) == 0  # the mini tasks are unsolved as given
    assert "2 task(s) set up and unsolved as given" in capsys.readouterr().out
    (root / "tasks/targets/greet/pkg/greet.py").write_text('def greet():\n    return "hello"\n')  # solved
    doc = yaml.safe_load((root / "tasks/tasks.yaml").read_text())
    doc["tasks"][1]["setup"] = "exit 3"
    (root / "tasks/tasks.yaml").write_text(yaml.safe_dump(doc))
    assert _check(root) == 2
    err = capsys.readouterr().err
    assert "task greet: the hidden oracle passes on the target as given: the task is already solved" in err
    assert "task cheat: setup failed (exited, exit 3" in err


def test_a_simulated_task_the_simulator_cannot_play_is_a_problem(tmp_path, capsys):
    root = _world(tmp_path)
    doc = yaml.safe_load((root / "tasks/tasks.yaml").read_text())
    doc["tasks"].append({**doc["tasks"][0], "id": "unknown", "prompt": "a task no playbook knows"})
    (root / "tasks/tasks.yaml").write_text(yaml.safe_dump(doc))
    assert _check(root, "--no-tasks") == 2
    assert ("task unknown: the offline simulator cannot play it: no playbook task matches its prompt and it has no "
            "solution (rule: a simulated task has a solution or a playbook)") in capsys.readouterr().err


@pytest.mark.bwrap
def test_a_solution_must_pass_both_checks(tmp_path, capsys):
    root = _world(tmp_path)
    (root / "tasks/solutions").mkdir()
    for name, word in (("right", "hello"), ("wrong", "hey")):
        (root / f"tasks/solutions/{name}.diff").write_text(
            f'--- a/pkg/greet.py\n+++ b/pkg/greet.py\n@@ -1,2 +1,2 @@\n def greet():\n-    return "hi"\n'
            f'+    return "{word}"\n')
    doc = yaml.safe_load((root / "tasks/tasks.yaml").read_text())
    doc["tasks"][0].update(verify="python3 -c 'from pkg.greet import greet; assert greet().startswith(\"he\")'",
                           solution={"patch": "right.diff"})
    doc["tasks"][1].update(verify=doc["tasks"][0]["verify"], solution={"patch": "wrong.diff"})
    (root / "tasks/tasks.yaml").write_text(yaml.safe_dump(doc))
    assert _check(root) == 2
    err = capsys.readouterr().err
    problems = [line for line in err.splitlines() if "(rule: " in line and "refused:" not in line]
    assert problems == [f"check: {root}/tasks/tasks.yaml: task cheat: the hidden oracle is failed with the solution "
                        "applied: no agent could pass it (rule: the solution passes)"], err


@pytest.mark.bwrap
@pytest.mark.cli
def test_the_bench_checks_its_tasks_before_its_first_session(tmp_path):
    root = _world(tmp_path)
    (root / "tasks/targets/greet/pkg/greet.py").write_text('def greet():\n    return "hello"\n')  # already solved
    params = config.parse(yaml.safe_load((root / "params.yaml").read_text()))
    side = plan("incumbent", root / "tasks/tasks.yaml", root / "skills", None, params)
    with pytest.raises(BadInput, match=r"task greet: the hidden oracle passes on the target as given.*"
                                       r"\(rule: check before paying\)"):
        run_side(side, params, tmp_path / "out", quiet=True)
    assert not (tmp_path / "out").exists()


@pytest.mark.bwrap
def test_a_flaky_oracle_test_refuses_its_task_naming_the_test_and_what_it_did(tmp_path, capsys):
    """Issue 33, item 1: each task's checks run bench.check_runs times on each tree, each in a fresh workspace; an
    oracle test that passes in one run and fails in another (here a coin from os.urandom, the one entropy the
    checks cannot pin) refuses its task with the test's name and its outcomes, before anything is paid. At 16 runs a
    fair coin looks steady with probability 2**-15."""
    root = _world(tmp_path, bench={"check_runs": 16})
    oracle = root / "tasks/oracles/test_greet_oracle.py"
    oracle.write_text(oracle.read_text() + "\n\ndef test_coin():\n    import os\n\n    assert os.urandom(1)[0] < 128\n")
    subprocess.run([*GIT, "-C", str(root), "commit", "-qam", "a flaky oracle test"], check=True)
    assert _check(root) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "flaky at" in line]
    assert len(lines) == 2, err  # both mini tasks bind this oracle file
    for line, task in zip(lines, ("greet", "cheat"), strict=True):
        assert f"task {task}: flaky at the bug, in 16 identical runs (TZ, PYTHONHASHSEED and the locale pinned): " \
            in line
        outcomes = line.split("oracle test test_greet_oracle::test_coin ", 1)[1].split(":", 1)[0].split(", ")
        assert len(outcomes) == 16 and set(outcomes) == {"passed", "failed"}, line
        assert "(rule: a deterministic oracle)" in line and "test_hello" not in line  # the steady tests are not named


def test_the_incumbent_report_gives_each_task_s_flake_rate_as_the_checks_measured_it():
    from skillevo.bench.report import task_checks

    provenance = {"side": "incumbent", "task_bindings": [{"id": "greet"}, {"id": "cheat"}]}
    lines = task_checks(provenance, {"greet": (3, 3, 0), "cheat": (3, 0, 1)})
    assert lines[0] == "## Task checks: oracle and verify stability"
    assert "| cheat | 3 | no solution | 1 (33%) |" in lines and "| greet | 3 | 3 | 0 (0%) |" in lines
    assert "TZ=UTC, PYTHONHASHSEED=0, LC_ALL=C.UTF-8" in lines[2]
    assert "Not run by this bench" in task_checks(provenance, None)[2]


def test_a_flaky_oracle_says_how_each_error_happened():
    """The team's own tree ran (no agent's code), so the refusal names how an oracle run ended in an error: a harness
    fault (a limit, a timeout) reads differently from a test that errors by chance."""
    from skillevo.bench.scoring import Oracle
    from skillevo.bench.task_soundness import Outcomes

    failing = frozenset({"test_x::test_a"})
    seen = Outcomes(None, (False, False, False),
                    (Oracle("error", how="limit: disk"), Oracle("failed", failing), Oracle("failed", failing)))
    assert seen.flaky() == ["oracle test test_x::test_a error (limit: disk), failed, failed"]
    assert Outcomes(None, (False, False), (Oracle("error", how="no report"), Oracle("passed"))).flaky() == \
        ["the oracle error (no report), passed"]
