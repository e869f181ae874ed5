"""The task checks `skillevo check` runs and the bench runs before its first paid session: each task's setup runs;
its visible check and hidden oracle fail on the target as given (a task already solved measures nothing) and, when
it has a solution, pass with it applied (a task no agent can pass measures nothing either). In the bench's own
sandbox, no model involved."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from skillevo import sandbox
from skillevo.bench import checks, workspace
from skillevo.core import safefs
from skillevo.core.config import Params
from skillevo.core.errors import BadInput
from skillevo.core.tasks import Task
from skillevo.sandbox import SandboxSpec


def _checks(task: Task, params: Params, tree: Path, scratch: Path) -> tuple[str | None, bool, str]:
    """(why setup failed or None, verify passed, the oracle's outcome) on a tree, in the bench's own sandbox."""
    ws, private = scratch / "ws", scratch / "private"
    workspace.build_template(tree, {}, None, ws)
    limits, timeout = params.bench.limits, params.bench.phase_timeout_s
    if task.setup:
        done = sandbox.run(SandboxSpec(workspace=ws, private=private / "setup", env=sandbox.base_env(), limits=limits),
                           ["/bin/sh", "-c", task.setup], timeout_s=timeout)
        if done.state != "exited" or done.returncode != 0:
            tail = done.stderr_tail.decode(errors="replace").strip().splitlines()[-1:] or [done.state]
            return f"{done.state}, exit {done.returncode}: {tail[0][:200]}", False, "not run"
    verify = checks.verify(task.verify, ws, private / "verify", timeout_s=timeout, limits=limits)
    oracle = checks.oracle(task.oracle_command, task.oracle_files, task.binding["oracle_tests"], ws,
                           private / "oracle", timeout_s=timeout, limits=limits)
    return None, verify.passed, oracle.outcome


def task_problems(task: Task, params: Params, scratch: Path, source: str) -> list[str]:
    """Setup runs, and verify and the oracle fail, on the task's target as given, in the bench's own sandbox; with
    a solution, both pass once it is applied."""
    where = f"{source}: task {task.id}"
    workspace.export_tree(task, scratch / "tree")
    setup, verified, oracle = _checks(task, params, scratch / "tree", scratch / "given")
    if setup is not None:
        return [f"{where}: setup failed ({setup}) (rule: setup runs)"]
    problems = []
    if verified:
        problems.append(f"{where}: verify passes on the target as given: it cannot tell the work done from not "
                        "(rule: an unsolved task)")
    if oracle == "passed":
        problems.append(f"{where}: the hidden oracle passes on the target as given: the task is already solved "
                        "(rule: an unsolved task)")
    if task.solution is None:
        return problems
    workspace.export_solved(task, scratch / "solved")
    setup, verified, oracle = _checks(task, params, scratch / "solved", scratch / "with-solution")
    if setup is not None:
        return [*problems, f"{where}: setup failed with the solution applied ({setup}) (rule: setup runs)"]
    if not verified:
        problems.append(f"{where}: verify fails with the solution applied: it would refuse the work done "
                        "(rule: the solution passes)")
    if oracle != "passed":
        problems.append(f"{where}: the hidden oracle is {oracle} with the solution applied: no agent could pass it "
                        "(rule: the solution passes)")
    return problems


def run_tasks(loaded: list[Task], params: Params, source: str,
              on_task: Callable[[Task], None] | None = None) -> list[str]:
    """task_problems for every task, each in a scratch directory of its own, removed after."""
    problems = []
    for task in loaded:
        if on_task is not None:
            on_task(task)
        scratch = Path(tempfile.mkdtemp(prefix=f"skillevo-check-{task.id}-"))
        try:
            problems += task_problems(task, params, scratch, source)
        except (BadInput, OSError) as e:
            problems.append(f"{source}: task {task.id}: {e}")
        finally:
            safefs.remove_tree(scratch)
    return problems
