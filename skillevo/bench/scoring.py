"""Scoring a run, in the verify and oracle phases: run the task's checks with tools the workspace cannot replace,
and read the hidden oracle's outcome from a report, not from an exit status.

Both phases run read-only, without network, with a hardened interpreter: PYTHONSAFEPATH keeps the workspace off
the front of sys.path (the harness's sitecustomize appends it after site-packages, and loads the workspace's
modules from source only, never from bytecode the agent left), user site-packages and pytest's plugin autoload
are off, and HOME and /tmp are the sandbox's own. The oracle additionally runs with
skillevo's own pytest.ini (`-c`), rootdir and conftest discovery confined to the oracle's directory, and a
JUnit report written outside the workspace. It passes only when the runner exits 0 and the report shows every
bound oracle test (tasks.oracle_tests) passed and nothing else. Its output is never read, and its timing is
never recorded: the code under test runs inside the oracle process and can read the oracle while it runs, so
only one bit may leave the phase (docs/security.md).
"""

from __future__ import annotations

import re
import shlex
import threading
from dataclasses import dataclass
from pathlib import Path

from defusedxml import ElementTree
from defusedxml.common import DefusedXmlException

from skillevo import sandbox
from skillevo.files import safefs
from skillevo.files.errors import BadInput
from skillevo.sandbox import Mount, SandboxSpec

PYBOOT = Path(__file__).resolve().parent / "pyboot"
PYBOOT_DST = "/opt/skillevo/pyboot"
ORACLE_DST = "/oracle"
REPORT_DST = "/run/skillevo-report"
REPORT = "oracle.xml"
MAX_REPORT_BYTES = 4 << 20
MAX_OUTPUT = 1 << 20
_PARAMS = re.compile(r"\[.*\]$", re.S)


# What a check could read as entropy, the same in every run (the locale is base_env's C.UTF-8): a test that still
# differs between identical runs is flaky in itself (skillevo.bench.task_soundness), never because of the clock's
# zone or the string hash seed
PINNED = {"TZ": "UTC", "PYTHONHASHSEED": "0"}


def interpreter_env() -> dict[str, str]:
    """What every check process gets: no runner, module or plugin can come from the workspace."""
    return {**sandbox.base_env(), "PYTHONSAFEPATH": "1", "PYTHONNOUSERSITE": "1", "PYTHONPATH": PYBOOT_DST,
            "SKILLEVO_CODE_DIR": sandbox.WORKDIR, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **PINNED}


def oracle_env() -> dict[str, str]:
    # --assert=plain: pytest's assertion rewriting would load a rewritten .pyc from a __pycache__ beside a
    # test-named module the agent wrote; the oracle's output is never read, so plain asserts lose nothing.
    # --import-mode=importlib: each oracle file is loaded from its own path, never found by name on sys.path, where
    # the workspace's test module of the same name (a fix's changed test file: task add --from-commit) came first
    opts = ["-c", f"{PYBOOT_DST}/pytest.ini", f"--rootdir={ORACLE_DST}", f"--confcutdir={ORACLE_DST}",
            "-p", "no:cacheprovider", "--assert=plain", "--import-mode=importlib", f"--junitxml={REPORT_DST}/{REPORT}",
            "-o", "junit_family=xunit2"]
    return {**interpreter_env(), "PYTEST_ADDOPTS": shlex.join(opts), "SKILLEVO_ORACLE_DIR": ORACLE_DST,
            "SKILLEVO_ORACLE_REPORT": f"{REPORT_DST}/{REPORT}"}


def _spec(ws: Path, private: Path, env: dict[str, str], mounts: tuple[Mount, ...], limits: sandbox.Limits | None
          ) -> SandboxSpec:
    return SandboxSpec(workspace=ws, private=private, env=env, workspace_writable=False, limits=limits,
                       mounts=(Mount(PYBOOT, PYBOOT_DST), *mounts))


@dataclass(frozen=True)
class Verify:
    passed: bool
    state: str
    returncode: int | None
    output: bytes  # stdout and the stderr tail: the agent's own visible check, kept for the evidence


def verify(command: str, ws: Path, private: Path, *, timeout_s: float, limits: sandbox.Limits | None = None,
           cancel: threading.Event | None = None) -> Verify:
    finished = sandbox.run(_spec(ws, private, interpreter_env(), (), limits), ["/bin/sh", "-c", command],
                           timeout_s=timeout_s, max_stdout=MAX_OUTPUT, cancel=cancel)
    return Verify(finished.state == "exited" and finished.returncode == 0, finished.state, finished.returncode,
                  finished.stdout + finished.stderr_tail)


FAILED = "the hidden oracle failed"
NO_REPORT = "the hidden oracle produced no usable report (a test did not run, a collection error, an exit before " \
            "the report, a timeout, or interference)"


# how an oracle phase can end in an error, as the harness sees it (Oracle.how)
HOW = frozenset({"timeout", "limit", "limit: processes", "limit: memory", "limit: cpu", "limit: disk",
                 "cancelled", "spawn-failure", "no report", "unreadable report",
                 "a test that is not bound", "a bound test missing", "passed but exited nonzero"})


@dataclass(frozen=True)
class Oracle:
    """The only thing that leaves the oracle phase: one of three outcomes, each with one constant sentence
    (a count or a reason chosen by code running in the oracle could carry the oracle's bytes)."""

    outcome: str  # passed | failed | error
    failing: frozenset[str] = frozenset()  # the bound tests that did not pass (a usable report only): for the task
    # checks' flake detection, never in a row (their names are the task's, their outcomes are the reference's)
    how: str = ""  # an error as the harness saw it, one of HOW's words: for the operator's log, never a row or the
    # evidence (the code under test chooses it, so it may carry a few bits; only the operator reads it)

    def __post_init__(self) -> None:
        if self.how and self.how not in HOW:
            raise ValueError(f"an oracle error's `how` is one of HOW's words, not {self.how!r}")

    @property
    def detail(self) -> str:
        return {"passed": "", "failed": FAILED}.get(self.outcome, NO_REPORT)


def read_report(data: bytes, bound: list[str]) -> Oracle:
    """The oracle's outcome from its JUnit report: every bound test present, every reported test bound and passed."""
    try:
        root = ElementTree.fromstring(data)
    except (ElementTree.ParseError, DefusedXmlException, ValueError):
        return Oracle("error", how="unreadable report")
    seen: set[str] = set()
    failing: set[str] = set()
    for case in root.iter("testcase"):
        test = f"{case.get('classname', '')}::{_PARAMS.sub('', case.get('name', ''))}"
        if test not in bound:
            return Oracle("error", how="a test that is not bound")  # a collection error, or not the oracle's
        seen.add(test)
        if any(child.tag in ("failure", "error", "skipped") for child in case):
            failing.add(test)
    if set(bound) - seen:
        return Oracle("error", how="a bound test missing")
    return Oracle("failed", frozenset(failing)) if failing else Oracle("passed")


def oracle(command: str, files: tuple[tuple[str, bytes], ...], bound: list[str], ws: Path, private: Path, *,
           timeout_s: float, limits: sandbox.Limits | None = None, cancel: threading.Event | None = None) -> Oracle:
    """Stage the oracle files read-only (only now: the agent has exited), run, and read the report."""
    staged, report = private / "oracle", private / "report"
    staged.mkdir(mode=0o755, parents=True)
    report.mkdir(mode=0o777)
    report.chmod(0o777)  # the sandbox user is another uid
    for target, data in files:
        path = staged / target
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        path.write_bytes(data)
        path.chmod(0o444)
    mounts = (Mount(staged, ORACLE_DST), Mount(report, REPORT_DST, writable=True))
    finished = sandbox.run(_spec(ws, private / "box", oracle_env(), mounts, limits), ["/bin/sh", "-c", command],
                           timeout_s=timeout_s, max_stdout=0, cancel=cancel)
    # stdout is discarded unread (max_stdout=0): the agent's code could have printed the hidden bytes
    for target, data in files:
        if (staged / target).read_bytes() != data:
            raise RuntimeError(f"staged oracle file {target} changed while the oracle ran")
    if finished.state != "exited":  # a timeout, a limit, a cancel; which limit by its kind only (its number is
        # the code's doing, so it is never kept)
        kind = f"limit: {(finished.limit or '').split(':', 1)[0]}"
        return Oracle("error", how=kind if finished.state == "limit" and kind in HOW else finished.state)
    try:
        data = safefs.read_file(report / REPORT, max_bytes=MAX_REPORT_BYTES, what="oracle report")
    except BadInput:
        return Oracle("error", how="no report")
    outcome = read_report(data, bound)
    if outcome.outcome == "passed" and finished.returncode != 0:
        return Oracle("error", how="passed but exited nonzero")
    return outcome
