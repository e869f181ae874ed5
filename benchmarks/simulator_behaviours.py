"""What the simulator's behaviours across time and the effects a skill can cause do to cost, through the real CLI.

Every session is a demo task's work session as a bench plays it (the real pinned CLI in bubblewrap, the
incumbent `plan` and `work` skills installed, "Use the work skill for: <task prompt>"), against the simulator
with the demo playbook plus BEHAVIOURS, instructions that carry effects. Each measurement compares sessions with
the same cell keys (common random numbers: the same prose, extra calls and mistakes), so a difference in cost is
the behaviour's and not luck's:

- retry / give-up / spread: the incumbent skill vs the same skill with the behaviour's phrase appended
  (realistic noise); per session the cost ratio, turns, whether verify passes and whether the workspace changed;
- warm: the same session in a warm cache window (a slot) vs in no window (no slot), at one moment;
- drift: sessions at --moments moments under the drifting profile (cache windows off), each moment's work factor
  known from its draw: the slope of log cost on the log factor, and what it makes of drift_sigma.

    python -m benchmarks.simulator_behaviours --runs 10 --moments 24 --drift-runs 2 --workers 8
    python -m benchmarks.simulator_behaviours --only warm,retry --runs 3
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import statistics
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from skillevo import sandbox
from skillevo.agent import SessionSpec, run_session
from skillevo.bench import verify
from skillevo.simulator import Simulator, agent, demo, playbook
from skillevo.simulator.noise import DRIFTING, REALISTIC, Noise, Profile, cell_key, moment_key, route

ROOT = Path(__file__).resolve().parents[1]
SEED = 5
# The behaviours measured, as a playbook declares them (schemas/playbook.schema.json, `effect`).
BEHAVIOURS: list[dict[str, Any]] = [
    {"id": "retry-loop", "phrase": "re-read the code and re-run the check until you are certain",
     "effect": {"retry_loop": {"rate": 0.25, "repeat": [7, 9]}}},
    {"id": "give-up", "phrase": "stop without changing anything if the request leaves any doubt",
     "effect": {"give_up": {"rate": 0.3}}},
    {"id": "spread", "phrase": "think aloud at whatever length the problem needs",
     "effect": {"spread": {"factor": 2}}},
]
# measurement -> phrase
PHRASES = dict(zip(("retry", "give-up", "spread"), (b["phrase"] for b in BEHAVIOURS), strict=True))
ARM = "behaviours"  # the arm name the cell keys are drawn under


def book() -> playbook.Playbook:
    """The demo playbook with BEHAVIOURS added: the demo's tasks, steps and instructions unchanged."""
    doc = yaml.safe_load((ROOT / "tasks/playbooks/demo.yaml").read_text(encoding="utf-8"))
    doc["instructions"] += BEHAVIOURS
    return playbook.parse(doc, "benchmarks.simulator_behaviours (tasks/playbooks/demo.yaml + BEHAVIOURS)")


TASKS = {t["id"]: t for t in yaml.safe_load((ROOT / "tasks/tasks.yaml").read_text(encoding="utf-8"))["tasks"]}
WORK = (ROOT / "skills/work/SKILL.md").read_text(encoding="utf-8")


def workspace(root: Path, task: dict, work_text: str) -> Path:
    """The task's target as a fresh git repository with the plan skill and `work_text` as the work skill."""
    ws = root / "ws"
    shutil.copytree(ROOT / "tasks" / task["target"], ws)
    for name, text in (("plan", (ROOT / "skills/plan/SKILL.md").read_text(encoding="utf-8")), ("work", work_text)):
        (ws / ".claude/skills" / name).mkdir(parents=True)
        (ws / ".claude/skills" / name / "SKILL.md").write_text(text, encoding="utf-8")
    demo.git(ws, "init", "-q")
    demo.git(ws, "add", "-A")
    demo.git(ws, "commit", "-qm", "start")
    return ws


@dataclasses.dataclass(frozen=True)
class Job:
    task: str
    run: int
    phrase: str | None = None  # appended to the work skill
    moment: str | None = None
    slot: int | None = None

    @property
    def route(self) -> str:
        return route(self.task, ARM, self.run, 1, moment=self.moment, slot=self.slot)


def play(sim: Simulator, job: Job, tmp: Path, counter: list[int], lock: threading.Lock) -> dict[str, Any]:
    with lock:
        counter[0] += 1
        root = tmp / f"s{counter[0]}"
    root.mkdir()
    text = WORK if job.phrase is None else WORK.rstrip("\n") + f"\n- {job.phrase[0].upper()}{job.phrase[1:]}.\n"
    task = TASKS[job.task]
    ws = workspace(root, task, text)
    rec = run_session(SessionSpec(
        prompt=f"Use the work skill for: {task['prompt']}\nRun the verification in the foreground before you finish.",
        workspace=ws, model=demo.MODEL, endpoint=sim.url(cell=job.route), transcript_dir=root / "t",
        transcript_name="s", expected_skill="work", timeout_s=600))
    changed = bool(demo.git(ws, "status", "--porcelain", "--untracked-files=all").strip())
    verified = verify(task["verify"], ws, root / "verify", timeout_s=120).passed
    out = {"task": job.task, "run": job.run, "ok": rec["ok"], "error_kind": rec["error_kind"], "cost": rec["cost_usd"],
           "turns": rec["num_turns"], "changed": changed, "verify": verified}
    shutil.rmtree(root, ignore_errors=True)
    return out


def run_all(profile: Profile, jobs: list[Job], workers: int, playbook_: playbook.Playbook) -> list[dict[str, Any]]:
    lock, counter = threading.Lock(), [0]
    with tempfile.TemporaryDirectory(prefix="skillevo-behaviours-") as tmp, \
            Simulator(playbook_, noise=Noise(profile, SEED)) as sim, ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda j: play(sim, j, Path(tmp), counter, lock), jobs))


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def _sd(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def log_sd(rows: list[dict]) -> float:
    """The pooled within-task sd of log cost: the spread of one task's runs, not the differences between tasks."""
    groups = [[math.log(r["cost"]) for r in rows if r["task"] == t] for t in TASKS]
    groups = [g for g in groups if len(g) > 1]
    if not groups:
        return math.nan  # one run per task: no spread to measure
    return math.sqrt(sum(_sd(g) ** 2 * (len(g) - 1) for g in groups) / sum(len(g) - 1 for g in groups))


def paired(name: str, base: list[dict], treated: list[dict], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per-session cost ratios of `treated` over `base` (same cells), and what the treated sessions did."""
    ratios = [t["cost"] / b["cost"] for b, t in zip(base, treated, strict=True)]
    diffs = [t["cost"] - b["cost"] for b, t in zip(base, treated, strict=True)]
    mean_base = statistics.fmean(b["cost"] for b in base)
    out = {"behaviour": name, "sessions": len(ratios), "mean_cost_base": mean_base,
           "mean_cost": statistics.fmean(t["cost"] for t in treated),
           "ratio_of_means": statistics.fmean(t["cost"] for t in treated) / mean_base,
           "ratio_of_means_se": _sd(diffs) / math.sqrt(len(diffs)) / mean_base,
           "log_sd_base": log_sd(base), "log_sd": log_sd(treated),
           "ratio_min": min(ratios), "ratio_median": statistics.median(ratios), "ratio_max": max(ratios),
           "verify_passed": sum(t["verify"] for t in treated), "changed": sum(t["changed"] for t in treated),
           "error_kinds": sorted({str(t["error_kind"]) for t in treated})}
    return out | (extra or {})


def measure_effects(which: set[str], runs: int, workers: int) -> list[dict[str, Any]]:
    pb = book()
    cells = [(t, r) for t in TASKS for r in range(1, runs + 1)]
    jobs = [Job(t, r) for t, r in cells] + [Job(t, r, PHRASES[w]) for w in sorted(which) for t, r in cells]
    rows = run_all(REALISTIC, jobs, workers, pb)
    base, results = rows[:len(cells)], []
    noise = Noise(REALISTIC, SEED)
    for i, w in enumerate(sorted(which)):
        treated = rows[len(cells) * (i + 1):len(cells) * (i + 2)]
        phrase = PHRASES[w]
        sessions = [noise.session(cell_key(t, ARM, r, 1)) for t, r in cells]
        fired = [agent.Affected(s) if s.skips_skill else  # the phrase never reaches an agent that skips its skill
                 agent.affected(pb, pb.task_for(TASKS[t]["prompt"]), phrase, s)
                 for (t, _), s in zip(cells, sessions, strict=True)]
        extra: dict[str, Any] = {}
        if w == "retry":
            looped = [(b, x, f.repeats) for b, x, f in zip(base, treated, fired, strict=True) if f.repeats]
            extra = {"looped": len(looped),  # (repeats, cost ratio, turns without, turns with) per looping session
                     "loops": sorted((k, x["cost"] / b["cost"], b["turns"], x["turns"]) for b, x, k in looped)}
        elif w == "give-up":
            gave = [(b, x) for b, x, f in zip(base, treated, fired, strict=True) if f.gives_up]
            extra = {"gave_up": len(gave), "give_up_costs": sorted(round(x["cost"], 4) for _, x in gave),
                     "give_up_changed": sum(x["changed"] for _, x in gave),
                     "give_up_verify": sum(x["verify"] for _, x in gave)}
        results.append(paired(w, base, treated, extra))
    return results


def measure_warm(runs: int, workers: int) -> dict[str, Any]:
    """The same sessions at one moment, without a slot (cold) and in a warm window (window 1, warm_rate 1)."""
    always = dataclasses.replace(REALISTIC, name="warm-always", warm_rate=1.0, window=1)
    cells = [(t, r) for t in TASKS for r in range(1, runs + 1)]
    jobs = [Job(t, r, moment="m") for t, r in cells] + [Job(t, r, moment="m", slot=r) for t, r in cells]
    rows = run_all(always, jobs, workers, book())
    cold, warm = rows[:len(cells)], rows[len(cells):]
    saved = [c["cost"] - w["cost"] for c, w in zip(cold, warm, strict=True)]
    return paired("warm", cold, warm, {"saved_min": min(saved), "saved_mean": statistics.fmean(saved),
                                       "saved_max": max(saved)})


def measure_drift(moments: int, runs: int, workers: int, sigma: float) -> dict[str, Any]:
    """log cost on log drift factor over sessions at many moments (drifting with drift_sigma `sigma`, cache windows
    off)."""
    profile = dataclasses.replace(DRIFTING, drift_sigma=sigma, warm_rate=0.0, window=0)
    names = [f"moment-{i}" for i in range(moments)]
    jobs = [Job(t, r, moment=m) for m in names for t in TASKS for r in range(1, runs + 1)]
    rows = run_all(profile, jobs, workers, book())
    noise = Noise(profile, SEED)
    factor = {m: noise.session("", moment_key(m)).drift for m in names}
    x = [math.log(factor[j.moment]) for j in jobs]  # type: ignore[index]
    task_mean = {t: statistics.fmean(math.log(r["cost"]) for r in rows if r["task"] == t) for t in TASKS}
    y = [math.log(r["cost"]) - task_mean[r["task"]] for r in rows]  # log cost, centred per task
    mx, my = statistics.fmean(x), statistics.fmean(y)
    slope = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / sum((a - mx) ** 2 for a in x)
    per_moment = [statistics.fmean(v for j, v in zip(jobs, y, strict=True) if j.moment == m) for m in names]
    within = statistics.fmean(statistics.variance([v for j, v in zip(jobs, y, strict=True) if j.moment == m])
                              for m in names)
    n = len(TASKS) * runs
    return {"behaviour": "drift", "drift_sigma": profile.drift_sigma, "moments": moments, "sessions": len(rows),
            "factors": {m: round(f, 3) for m, f in factor.items()}, "slope": slope,
            "implied_log_sd": slope * profile.drift_sigma,
            "between_moment_sd": math.sqrt(max(0.0, statistics.variance(per_moment) - within / n)),
            "within_moment_sd": math.sqrt(within), "mean_cost": statistics.fmean(r["cost"] for r in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="runs per demo task and arm of a comparison [10]")
    parser.add_argument("--moments", type=int, default=24, help="moments of the drift measurement [24]")
    parser.add_argument("--drift-runs", type=int, default=2, help="runs per demo task and moment [2]")
    parser.add_argument("--drift-sigma", type=float, default=DRIFTING.drift_sigma,
                        help=f"drift_sigma of the drift measurement [{DRIFTING.drift_sigma}, the drifting profile's]")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--only", default="retry,give-up,spread,warm,drift")
    args = parser.parse_args()
    which = set(args.only.split(","))
    sandbox.preflight()
    out = []
    effects = which & {"retry", "give-up", "spread"}
    if effects:
        out += measure_effects(effects, args.runs, args.workers)
    if "warm" in which:
        out.append(measure_warm(args.runs, args.workers))
    if "drift" in which:
        out.append(measure_drift(args.moments, args.drift_runs, args.workers, args.drift_sigma))
    for result in out:
        print(json.dumps(_rounded(result)))
    print(f"SIMULATED: every number above comes from the offline simulator (seed {SEED}), not a model.")


if __name__ == "__main__":
    main()
