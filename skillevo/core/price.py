"""The price of a generation before it is paid: sessions, minutes and dollars, stated by `skillevo check`.

Sessions are counted from the plan: the incumbent side runs every arm on every chosen task `incumbent_runs` times;
the candidate side runs, per gate task and run, each candidate arm beside its control (two cells), at most
`sampling.runs` times and at least its first look's runs when looks are on, plus the re-runs a fault may cost. What a
session costs and takes comes from the incumbent side's own rows on this model when there are some (the last `dvc
repro`), else from a stated prior: an estimate to act on, never a promise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillevo.core import sampling
from skillevo.files import safefs
from skillevo.files.errors import BadInput

# Per session, when nothing measured is at hand: the offline simulator (no money; a few seconds on 2 cores, as the
# demo's cells take) and a real model (a coding session of some ten turns on a Sonnet-class model).
PRIOR_SIMULATED = (0.0, 6.0)
PRIOR_REAL = (0.25, 120.0)
MAX_ROWS_BYTES = 64 << 20


@dataclass(frozen=True)
class Price:
    incumbent: int  # sessions
    candidate_first: int  # the candidate side's sessions at its first look (all of it without looks)
    candidate_max: int  # at sampling.runs, before fault re-runs
    rerun_pct: float  # fault re-runs may add up to this share of the candidate side's blocks
    usd: float  # per session
    seconds: float  # per session, one worker
    source: str  # where the per-session figures come from
    workers: int
    simulated: bool

    def lines(self) -> list[str]:
        def cost(sessions: int) -> str:
            minutes = sessions * self.seconds / max(self.workers, 1) / 60
            money = "no money (simulated)" if self.simulated else f"about ${sessions * self.usd:,.2f}"
            return f"{sessions} sessions, about {minutes:,.0f} min at {self.workers} worker(s), {money}"

        first = "" if self.candidate_first == self.candidate_max else \
            f"; it stops at its first look with {cost(self.candidate_first)} when the answer is clear"
        return [f"price: the incumbent side: {cost(self.incumbent)} (paid once per skill set, then served)",
                f"price: a candidate side: at most {cost(self.candidate_max)}, plus up to {self.rerun_pct:g}% of its "
                f"blocks again if faults spoil them{first}",
                f"price: per session {'$0' if self.simulated else f'${self.usd:.3f}'} and {self.seconds:.0f} s, "
                f"{self.source}"]


def measured(rows_file: Path, model: str, backend: str) -> tuple[float, float, int] | None:
    """Mean dollars and seconds per session over the valid rows of `rows_file` that ran `model` on `backend`, and how
    many sessions that is; None when there are none."""
    if not rows_file.is_file():
        return None
    try:
        text = safefs.read_text(rows_file, max_bytes=MAX_ROWS_BYTES, what="results")
    except BadInput:
        return None
    usd = seconds = 0.0
    sessions = 0
    for line in text.splitlines():
        try:
            row: dict[str, Any] = json.loads(line)
        except ValueError:
            return None
        spent = row.get("phases", {}).get("sessions_s") or []
        if row.get("model") != model or row.get("backend") != backend or row.get("cost_usd") is None or not spent:
            continue
        usd += row["cost_usd"]
        seconds += sum(spent)
        sessions += len(spent)
    return None if sessions == 0 else (usd / sessions, seconds / sessions, sessions)


def per_session(params: Any, rows_file: Path | None) -> tuple[float, float, str]:
    """Dollars and seconds a session of this model costs, and where the figures come from."""
    found = measured(rows_file, params.model.name, params.model.backend) if rows_file is not None else None
    if found is not None:
        usd, seconds, n = found
        return usd, seconds, f"the mean of {n} session(s) this model ran on the incumbent side ({rows_file})"
    usd, seconds = PRIOR_SIMULATED if params.model.simulated else PRIOR_REAL
    return usd, seconds, ("a prior (nothing measured on this model yet): run one task with `skillevo run TASK` to "
                          "see what a session of yours costs")


def side_line(sessions: int, params: Any, rows_file: Path | None) -> str:
    """One line a bench side prints before its first cell: its sessions at most, in minutes and dollars."""
    usd, seconds, source = per_session(params, rows_file)
    minutes = sessions * seconds / max(params.bench.workers, 1) / 60
    money = "no money (simulated)" if params.model.simulated else f"about ${sessions * usd:,.2f}"
    return (f"at most {sessions} sessions, about {minutes:,.0f} min at {params.bench.workers} worker(s), {money} "
            f"(per session: {source}; served cells cost nothing)")


def price(params: Any, incumbent_tasks: int, gate_tasks: int, rows_file: Path | None = None) -> Price:
    """The plan's sessions and their price under `params` (config.Params)."""
    arms = params.arms.values()
    per_run = sum(len(arm.sessions) for arm in arms)
    paired = sum(len(arm.sessions) for arm in arms if not arm.is_comparator and not arm.is_baseline)
    plan = params.sampling
    first = sampling.looks(plan)[0] if plan.sequential.enabled else plan.runs
    simulated = params.model.simulated
    usd, seconds, source = per_session(params, rows_file)
    return Price(incumbent=incumbent_tasks * plan.incumbent_runs * per_run,
                 candidate_first=gate_tasks * first * 2 * paired, candidate_max=gate_tasks * plan.runs * 2 * paired,
                 rerun_pct=params.bench.fault_reruns_pct, usd=usd, seconds=seconds, source=source,
                 workers=params.bench.workers, simulated=simulated)
