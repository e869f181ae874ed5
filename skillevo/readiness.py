"""What can be known wrong before any money is spent: `skillevo check` runs it all; the bench runs the plan's part
(sideplan.plan: the family, its modes, the arms' and evolvable skills) and, before its first paid session, the task
checks (skillevo.bench.task_soundness).

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

from collections.abc import Callable
from pathlib import Path

from skillevo import backends, freeze
from skillevo.bench import sideplan
from skillevo.core import config, layout, placeholder, sampling, tasks
from skillevo.core.config import Params
from skillevo.core.tasks import Task
from skillevo.files.errors import SkillevoError


def _each(problems: list[str], check: Callable[[], object]) -> object | None:
    """Run one check; its refusal becomes a problem line (once: the bench's plan and check's own reading meet the
    same family and tasks) and the other checks still run."""
    try:
        return check()
    except placeholder.Placeholder:
        return None  # init's placeholder task: a to-do (tasks.placeholders), not a problem
    except SkillevoError as e:
        if str(e) not in problems:
            problems.append(str(e))
        return None


def configuration(params_file: Path, tasks_file: Path, modes_file: Path, repo: Path | None = None
                  ) -> tuple[list[str], Params | None, list[Task]]:
    """The problems (one line each) of everything a bench reads but the tasks' code; with the parsed params and
    tasks when they parse (init's placeholder task left out: tasks.placeholders says to replace it). `repo`: the git
    repository the skills paths are relative to [params skills.root]."""
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
    loaded = [t for t in loaded if t.cls != placeholder.PLACEHOLDER_CLASS] if isinstance(loaded, list) else []
    split = _each(problems, lambda: tasks.split(loaded, params.tasks.gate, params.tasks.evidence, params.tasks.shared,
                                                params.source)) if loaded else None
    if isinstance(split, tasks.Split):
        problems += [f"{params.source}: {why} (rule: a promotion is possible)"
                     for why in sampling.unpromotable(len(split.gate), params.sampling, params.gate)]
    _each(problems, lambda: backends.preflight(params.model))
    if params.model.simulated and loaded:
        from skillevo import simulator  # a backend like the others: imported only when params choose it

        book = _each(problems, lambda: simulator.load_dir(tasks_file.parent / "playbooks"))
        if isinstance(book, simulator.Playbook):
            problems += [f"{tasks_file}: task {t.id}: the offline simulator cannot play it: no playbook task matches "
                         "its prompt and it has no solution (rule: a simulated task has a solution or a playbook)"
                         for t in loaded if t.solution is None and book.task_for(t.prompt) is None]
    return problems, params, loaded
