"""The simulator a bench side runs against: its playbooks, its noise, and the side's tasks it plays from their
reference solutions. The bench imports this only when params choose a simulated backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skillevo.core.tasks import Task
from skillevo.simulator import Simulator, generic, load_dir
from skillevo.simulator.noise import Noise


def for_side(tasks: list[Task], skills: frozenset[str], playbooks: Path, params: Any) -> tuple[Simulator, Noise]:
    """A simulator (not yet started) and its noise for a side of `tasks` with the family's `skills` under `params`
    (config.Params): the playbooks' tasks as scripted, the others that have a solution by the generic agent."""
    noise = Noise.from_params(params.simulator, params.sampling.replicate)
    book = load_dir(playbooks)
    solved = tuple(generic.solved(t, skills) for t in tasks
                   if t.solution is not None and book.task_for(t.prompt) is None)
    return Simulator(book, noise=noise, max_retries=params.bench.max_retries, solved=solved), noise
