"""What can be known wrong before any money is spent: `skillevo check` runs it all, the bench the part that reads
no tasks' code (sideplan.plan: the family, its modes, the arms' and evolvable skills).

Each problem is one line that names the file (and key) and the rule, so a user fixes them all in one pass instead
of paying for a bench that a freeze, a gate or a missing key stops later:

- configuration: params and tasks parse; the family reads, its execute bits are the recorded ones, every arm and
  every evolvable name is a skill of it; the family and its mirrors are committed (freeze binds committed bytes);
  the gate's tasks x sampling.runs can reach a promotion at all; a real backend has its credential; on the offline
  simulator, every task has a solution or a playbook (it cannot play a task without either);
- tasks (sandboxed, no model): each task's setup runs, and its visible check and hidden oracle fail on the target
  as given (a task already solved measures nothing) and pass with its solution, when it has one (a task no
  agent can pass measures nothing either).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from skillevo import freeze, sandbox, simulator
from skillevo.bench import checks, sideplan, workspace
from skillevo.core import config, layout, models, safefs, sampling, tasks
from skillevo.core.config import Params
from skillevo.core.errors import BadInput, SkillevoError
from skillevo.core.tasks import Task
from skillevo.sandbox import SandboxSpec


def _each(problems: list[str], check: Callable[[], object]) -> object | None:
    """Run one check; its refusal becomes a problem line and the other checks still run."""
    try:
        return check()
    except SkillevoError as e:
        problems.append(str(e))
        return None


def configuration(params_file: Path, tasks_file: Path, modes_file: Path, repo: Path | None = None
                  ) -> tuple[list[str], Params | None, list[Task]]:
    """The problems (one line each) of everything a bench reads but the tasks' code; with the parsed params and
    tasks when they parse. `repo`: the git repository the skills paths are relative to [params skills.root]."""
    problems: list[str] = []
    params = _each(problems, lambda: config.load(params_file))
    if not isinstance(params, Params):
        return problems, None, []
    repo = Path(params.skills.root) if repo is None else repo
    skills_dir = repo / params.skills.skills
    _each(problems, lambda: sideplan.plan("incumbent", tasks_file, skills_dir, None, params, modes=modes_file))
    family: dict[str, bytes] = {}
    _each(problems, lambda: family.update(layout.read_family(skills_dir, params.skills.frontmatter_keys)))
    if family:
        rels = [f"{root}/{rel}" for root in params.skills.roots for rel in sorted(family)]
        _each(problems, lambda: freeze.committed_digests(repo, rels))
    loaded = _each(problems, lambda: tasks.load(tasks_file, target_roots=params.tasks.target_roots))
    loaded = loaded if isinstance(loaded, list) else []
    split = _each(problems, lambda: tasks.split(loaded, params.tasks.gate, params.tasks.evidence, params.tasks.shared,
                                                params.source)) if loaded else None
    if isinstance(split, tasks.Split):
        problems += [f"{params.source}: {why} (rule: a promotion is possible)"
                     for why in sampling.unpromotable(len(split.gate), params.sampling, params.gate)]
    if not params.model.simulated:
        _each(problems, lambda: models.resolve(params.model, None))
    elif loaded:
        book = _each(problems, lambda: simulator.load_dir(tasks_file.parent / "playbooks"))
        if isinstance(book, simulator.Playbook):
            problems += [f"{tasks_file}: task {t.id}: the offline simulator cannot play it: no playbook task matches "
                         "its prompt and it has no solution (rule: a simulated task has a solution or a playbook)"
                         for t in loaded if t.solution is None and book.task_for(t.prompt) is None]
    return problems, params, loaded


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
