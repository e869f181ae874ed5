"""The oracle's outcome comes from its JUnit report, matched against the tests bound at task load."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from skillevo.bench.scoring import (
    HOW,
    NO_REPORT,
    PYBOOT,
    Oracle,
    interpreter_env,
    oracle_env,
    read_report,
)

BOUND = ["test_greet_oracle::test_hello", "test_greet_oracle.TestShape::test_type"]


def report(*cases: str) -> bytes:
    return ('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="2">'
            + "".join(cases) + "</testsuite></testsuites>").encode()


PASS_HELLO = '<testcase classname="test_greet_oracle" name="test_hello" time="0.001"/>'
PASS_TYPE = '<testcase classname="test_greet_oracle.TestShape" name="test_type" time="0.001"/>'


@pytest.mark.parametrize("data, outcome", [
    (report(PASS_HELLO, PASS_TYPE), "passed"),
    (report(PASS_HELLO, PASS_TYPE.replace("test_type", "test_type[case-1]")), "passed"),  # parametrized
    (report(PASS_HELLO, PASS_TYPE.replace("/>", "><failure message='no'/></testcase>")), "failed"),
    (report(PASS_HELLO, PASS_TYPE.replace("/>", "><error message='fixture'/></testcase>")), "failed"),
    (report(PASS_HELLO, PASS_TYPE.replace("/>", "><skipped message='skip'/></testcase>")), "failed"),
    (report(PASS_HELLO), "error"),  # a bound test did not run
    (report(PASS_HELLO, PASS_TYPE, '<testcase classname="conftest" name="test_forged"/>'), "error"),  # not the oracle's
    (report(PASS_HELLO, PASS_TYPE, '<testcase classname="" name="test_greet_oracle"><error/></testcase>'), "error"),
    (b"<testsuites><testsuite", "error"),  # cut short
    (b"not xml at all", "error"),
    (b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;">]><l>&b;</l>', "error"),
    (report(), "error"),
])
def test_the_report_decides(data, outcome):
    found = read_report(data, BOUND)
    assert found.outcome == outcome
    # the task checks' flake detection reads which bound test failed; nothing else does
    assert found.failing == ({"test_greet_oracle.TestShape::test_type"} if outcome == "failed" else set())


def test_only_constant_words_leave_the_oracle():
    assert {Oracle(o).detail for o in ("passed", "failed", "error")} == {"", "the hidden oracle failed", NO_REPORT}


@pytest.mark.parametrize("data, how", [
    (report(PASS_HELLO), "a bound test missing"),
    (report(PASS_HELLO, PASS_TYPE, '<testcase classname="conftest" name="test_forged"/>'), "a test that is not bound"),
    (b"not xml at all", "unreadable report"),
])
def test_an_error_says_how_it_happened_in_one_word_of_a_fixed_list_for_the_operator(data, how):
    """The operator's log tells a harness fault from the agent's doing (the bench prints `how`); the row and the
    evidence keep the one constant sentence, and no free text can become a `how`."""
    found = read_report(data, BOUND)
    assert (found.outcome, found.how, found.detail) == ("error", how, NO_REPORT) and how in HOW
    with pytest.raises(ValueError, match="one of HOW's words"):
        Oracle("error", how="the oracle's first line: def test_hello(): assert greet() == 'hello'")


def test_the_check_environment_hardens_the_interpreter():
    env = interpreter_env()
    assert env["PYTHONSAFEPATH"] == "1" and env["PYTHONNOUSERSITE"] == "1"
    assert env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1" and env["SKILLEVO_CODE_DIR"] == "/work"
    addopts = oracle_env()["PYTEST_ADDOPTS"]
    for option in ("-c /opt/skillevo/pyboot/pytest.ini", "--rootdir=/oracle", "--confcutdir=/oracle",
                   "--junitxml=/run/skillevo-report/oracle.xml", "--import-mode=importlib"):
        assert option in addopts
    assert env["TZ"] == "UTC" and env["PYTHONHASHSEED"] == "0" and env["LC_ALL"] == "C.UTF-8"  # entropy pinned


def test_the_code_under_test_is_the_workspace_s_even_where_the_machine_has_it_installed(tmp_path):
    """A team's library that the machine also has installed (Debian ships six, yaml, requests...) is tested as the
    workspace holds it; the runner and the standard library never are the workspace's (found in CI: six 1.17.0's
    own tests passed against Debian's six with the bug in the workspace). The interpreter the checks run."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    ws, installed = tmp_path / "ws", tmp_path / "site"
    for root, label in ((ws, "workspace"), (installed, "installed")):
        (root / "teamlib").mkdir(parents=True)
        (root / "teamlib/__init__.py").write_text(f"WHO = {label!r}\n")
        (root / "teamlib/sub.py").write_text(f"WHO = {label!r}\n")
    (ws / "pytest.py").write_text("raise SystemExit('the workspace stood in for the runner')\n")
    (ws / "json.py").write_text("raise SystemExit('the workspace stood in for the standard library')\n")
    (ws / "docs").mkdir()  # a directory without __init__.py stays a namespace portion
    code = ("import teamlib, teamlib.sub, pytest, json, docs; "
            "print(teamlib.WHO, teamlib.sub.WHO, pytest.__file__.startswith('/usr'), json.__file__.startswith('/usr'))")
    env = {**interpreter_env(), "PYTHONPATH": f"{PYBOOT}:{installed}", "SKILLEVO_CODE_DIR": str(ws), "PATH": "/usr/bin"}
    done = subprocess.run([python, "-c", code], cwd=ws, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["workspace", "workspace", "True", "True"]
    env["SKILLEVO_CODE_DIR"] = str(tmp_path / "elsewhere")  # not the workspace: sys.path decides as usual
    done = subprocess.run([python, "-c", "import teamlib; print(teamlib.WHO)"], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.split() == ["installed"], done.stderr


@pytest.mark.bwrap
def test_an_oracle_file_named_like_a_workspace_test_module_is_the_one_that_runs(tmp_path):
    """A fix that changes tests/test_calc.py makes an oracle file test_calc.py (task add --from-commit): the
    workspace's module of that name, found first on sys.path, made every such oracle a collection error ("import
    file mismatch"), and an agent could break any oracle so by naming a module after it. The oracle file is loaded
    from its own path."""
    from skillevo.bench import scoring

    ws = tmp_path / "ws"
    (ws / "calc").mkdir(parents=True)
    (ws / "calc/__init__.py").write_text("def add(a, b):\n    return a + b\n")
    (ws / "test_calc.py").write_text("def test_old():\n    assert True\n")
    data = b"from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    command = 'python3 -m pytest -q --rootdir="$SKILLEVO_ORACLE_DIR" "$SKILLEVO_ORACLE_DIR/test_calc.py"'
    (tmp_path / "private").mkdir()
    outcome = scoring.oracle(command, (("test_calc.py", data),), ["test_calc::test_add"], ws, tmp_path / "private",
                            timeout_s=120)
    assert outcome == Oracle("passed")


@pytest.mark.bwrap
def test_an_oracle_stopped_at_a_limit_says_which_kind_and_never_its_number(tmp_path):
    """The operator's log names the kind of limit an oracle crossed (a harness fault, such as the host's tmpfs once
    counted against a cell, reads as a kind no oracle should cross); the number, which the code under test chose,
    is left out."""
    from skillevo.bench import scoring
    from skillevo.core.limits import Limits

    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "private").mkdir()
    limits = Limits(processes=64, memory_mb=1024, cpu_s=60, disk_mb=16, tmp_mb=64, file_mb=64)
    command = "head -c 40000000 /dev/zero > /run/skillevo-report/fill; sleep 20"
    outcome = scoring.oracle(command, (("test_x.py", b"def test_x():\n    pass\n"),), ["test_x::test_x"], ws,
                             tmp_path / "private", timeout_s=60, limits=limits)
    assert (outcome.outcome, outcome.how) == ("error", "limit: disk")
    assert outcome.how in HOW
