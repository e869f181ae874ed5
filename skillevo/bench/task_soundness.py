"""The task checks `skillevo check` runs and the bench runs before its first paid session: each task's setup runs;
its visible check and hidden oracle fail on the target as given (a task already solved measures nothing) and, when
it has a solution, pass with it applied (a task no agent can pass measures nothing either); and each runs
bench.check_runs times on each tree, in fresh workspaces, so a test whose outcome differs between identical runs
(a flaky test, which would turn noise into a measured fix) refuses its task, naming the test and what it did. In
the bench's own sandbox, no model involved."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from skillevo import sandbox
from skillevo.bench import scoring, workspace
from skillevo.core.config import Params
from skillevo.core.tasks import Task
from skillevo.files import safefs
from skillevo.files.errors import BadInput
from skillevo.sandbox import SandboxSpec


def _said(oracle: scoring.Oracle) -> str:
    """An outcome as the team reads it: an error with how it happened (the task's own tree ran, no agent's code)."""
    return f"{oracle.outcome} ({oracle.how})" if oracle.how else oracle.outcome


@dataclass(frozen=True)
class Outcomes:
    """What `check_runs` identical runs of a task's checks on one tree saw: a flaky test shows as two outcomes."""

    setup: str | None  # why setup failed (first run), or None
    verify: tuple[bool, ...]
    oracle: tuple[scoring.Oracle, ...]

    def flaky(self) -> list[str]:
        """One phrase per check whose outcome differed between the runs, naming each test and what it did."""
        out = []
        if len(set(self.verify)) > 1:
            out.append("verify " + ", ".join("passed" if v else "failed" for v in self.verify))
        if len({o.outcome for o in self.oracle}) > 1 or len({o.failing for o in self.oracle}) > 1:
            tests = sorted(set().union(*(o.failing for o in self.oracle)))
            for test in tests:
                seen = ["failed" if test in o.failing else _said(o) if o.outcome == "error" else "passed"
                        for o in self.oracle]
                if len(set(seen)) > 1:
                    out.append(f"oracle test {test} " + ", ".join(seen))
            if not out or not out[-1].startswith("oracle"):
                out.append("the oracle " + ", ".join(_said(o) for o in self.oracle))
        return out

    @property
    def differing(self) -> int:
        """Runs whose outcome (verify's, the oracle's, or which oracle tests failed) is not the first run's."""
        first = (self.verify[0], self.oracle[0].outcome, self.oracle[0].failing)
        return sum((v, o.outcome, o.failing) != first for v, o in zip(self.verify, self.oracle, strict=True))

    @property
    def verified(self) -> bool:
        return self.verify[0]

    @property
    def outcome(self) -> str:
        return self.oracle[0].outcome


def _checks(task: Task, params: Params, tree: Path, scratch: Path) -> Outcomes:
    """Setup, verify and the oracle on a tree, in the bench's own sandbox, bench.check_runs times, each run in a
    fresh workspace of its own (a test that only fails beside a file an earlier run left is flaky too)."""
    limits, timeout = params.bench.limits, params.bench.phase_timeout_s
    verified, oracles = [], []
    for run in range(params.bench.check_runs):
        ws, private = scratch / f"run{run}" / "ws", scratch / f"run{run}" / "private"
        workspace.build_template(tree, {}, None, ws)
        if task.setup:
            done = sandbox.run(SandboxSpec(workspace=ws, private=private / "setup", env=sandbox.base_env(),
                                           limits=limits), ["/bin/sh", "-c", task.setup], timeout_s=timeout)
            if done.state != "exited" or done.returncode != 0:
                tail = done.stderr_tail.decode(errors="replace").strip().splitlines()[-1:] or [done.state]
                return Outcomes(f"{done.state}, exit {done.returncode}: {tail[0][:200]}", (False,),
                                (scoring.Oracle("error"),))
        verified.append(scoring.verify(task.verify, ws, private / "verify", timeout_s=timeout, limits=limits).passed)
        oracles.append(scoring.oracle(task.oracle_command, task.oracle_files, task.binding["oracle_tests"], ws,
                                     private / "oracle", timeout_s=timeout, limits=limits))
        safefs.remove_tree(scratch / f"run{run}")
    return Outcomes(None, tuple(verified), tuple(oracles))


def _flaky(where: str, at: str, seen: Outcomes) -> list[str]:
    found = seen.flaky()
    return [f"{where}: flaky {at}, in {len(seen.verify)} identical runs (TZ, PYTHONHASHSEED and the locale pinned): "
            f"{'; '.join(found)}: a check that decides by chance turns noise into a measured fix (rule: a "
            "deterministic oracle)"] if found else []


Stability = dict[str, tuple[int, int, int]]  # task id -> (runs at the bug, runs with the solution, runs that differed)


def task_problems(task: Task, params: Params, scratch: Path, source: str, stability: Stability | None = None
                  ) -> list[str]:
    """Setup runs, and verify and the oracle fail, on the task's target as given, in the bench's own sandbox; with
    a solution, both pass once it is applied; and, run bench.check_runs times each, neither ever changes its mind.
    What the runs saw goes into `stability`, when given."""
    where = f"{source}: task {task.id}"
    workspace.export_tree(task, scratch / "tree")
    given = _checks(task, params, scratch / "tree", scratch / "given")
    if stability is not None:
        stability[task.id] = (len(given.verify), 0, given.differing)
    if given.setup is not None:
        return [f"{where}: setup failed ({given.setup}) (rule: setup runs)"]
    problems = _flaky(where, "at the bug", given)
    if given.verified and not problems:
        problems.append(f"{where}: verify passes on the target as given: it cannot tell the work done from not "
                        "(rule: an unsolved task)")
    if given.outcome == "passed" and not problems:
        problems.append(f"{where}: the hidden oracle passes on the target as given: the task is already solved "
                        "(rule: an unsolved task)")
    if task.solution is None:
        return problems
    workspace.export_solved(task, scratch / "solved")
    solved = _checks(task, params, scratch / "solved", scratch / "with-solution")
    if stability is not None:
        stability[task.id] = (len(given.verify), len(solved.verify), given.differing + solved.differing)
    if solved.setup is not None:
        return [*problems, f"{where}: setup failed with the solution applied ({solved.setup}) (rule: setup runs)"]
    flaky = _flaky(where, "with the solution applied", solved)
    if flaky:
        return [*problems, *flaky]
    if not solved.verified:
        problems.append(f"{where}: verify fails with the solution applied: it would refuse the work done "
                        "(rule: the solution passes)")
    if solved.outcome != "passed":
        problems.append(f"{where}: the hidden oracle is {solved.outcome} with the solution applied: no agent could "
                        "pass it (rule: the solution passes)")
    return problems


def run_tasks(loaded: list[Task], params: Params, source: str,
              on_task: Callable[[Task], None] | None = None, stability: Stability | None = None) -> list[str]:
    """task_problems for every task, each in a scratch directory of its own, removed after."""
    problems = []
    for task in loaded:
        if on_task is not None:
            on_task(task)
        scratch = Path(tempfile.mkdtemp(prefix=f"skillevo-check-{task.id}-"))
        try:
            problems += task_problems(task, params, scratch, source, stability)
        except (BadInput, OSError) as e:
            problems.append(f"{source}: task {task.id}: {e}")
        finally:
            safefs.remove_tree(scratch)
    return problems
