"""The oracle's outcome comes from its JUnit report, matched against the tests bound at task load."""

from __future__ import annotations

import pytest

from skillevo.bench.checks import (
    NO_REPORT,
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
    assert read_report(data, BOUND) == Oracle(outcome)


def test_only_constant_words_leave_the_oracle():
    assert {Oracle(o).detail for o in ("passed", "failed", "error")} == {"", "the hidden oracle failed", NO_REPORT}


def test_the_check_environment_keeps_the_workspace_behind_site_packages():
    env = interpreter_env()
    assert env["PYTHONSAFEPATH"] == "1" and env["PYTHONNOUSERSITE"] == "1"
    assert env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1" and env["SKILLEVO_CODE_DIR"] == "/work"
    addopts = oracle_env()["PYTEST_ADDOPTS"]
    for option in ("-c /opt/skillevo/pyboot/pytest.ini", "--rootdir=/oracle", "--confcutdir=/oracle",
                   "--junitxml=/run/skillevo-report/oracle.xml"):
        assert option in addopts
