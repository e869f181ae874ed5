"""Bench cell figures: workspace time vs history size, containment overhead per cell, throughput.

The simulator answers at once, so the first throughput figure is CPU-bound. Real cells mostly wait on the
model: the second one runs with the simulator holding every reply back by a model-latency profile
(skillevo/simulator/latency.py, sources in docs/simulator.md) and shows how far local workers overlap.

Prints, last:
  workspace_s=<demo target>,<10,000-commit git target>   per-cell workspace phase (median of 5)
  cell_overhead_ratio=<x>       cell wall / sum of its bare phases (bare CLI sessions + bare verify + bare oracle)
  cells_per_minute=<w1>,<w2>    the demo incumbent side (1 run per arm) with 1 and 2 local workers, no latency
  latency=<profile>             the model-latency profile of the next two lines
  latency_cells_per_minute=<w1>,<w4>,<w8>   the demo tasks' auto cells (LATENCY_RUNS) at 1, 4 and 8 local workers
  speedup_8v1=<x>               8 workers' rate over 1 worker's, under that latency
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import random
import resource
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from benchmarks import bare
from skillevo import sandbox
from skillevo.agent import cli
from skillevo.bench import CellSpec, LocalExecutor, RayExecutor, SidePlan, build_cells, plan, run_cell, workspace
from skillevo.core import config, layout, models, tasks
from skillevo.core.config import Params
from skillevo.simulator import Simulator, load_dir
from skillevo.simulator.latency import PROFILES, SONNET_4_6, Latency

ROOT = Path(__file__).resolve().parents[1]
# Under latency: one session a cell (the auto arm, in which every overlay is judged) on every demo task, with
# runs 1..n of each task at each worker count. Every count runs the same mix (each task equally often; without
# noise every run of a cell plays the same session), 4 and 8 workers get two full rounds, and one run of the
# whole benchmark stays under 10 minutes.
LATENCY_ARM, LATENCY_RUNS = "auto", {1: 2, 4: 2, 8: 4}  # workers -> runs per task
CPU_SAMPLE_S = 0.5
_TICK = os.sysconf("SC_CLK_TCK")
OK_KINDS = (None, "oracle-failed", "verify-failed")  # measured outcomes of the demo's cells, never a broken harness


def generate_history(repo: Path, commits: int = 10_000, blob_bytes: int = 3000) -> None:
    """A git repository with `commits` commits of incompressible data (~30 MB of history), via fast-import."""
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    rng = random.Random(0)
    proc = subprocess.Popen(["git", "-C", str(repo), "fast-import", "--quiet"], stdin=subprocess.PIPE)
    for i in range(commits):
        data = rng.randbytes(blob_bytes)  # incompressible: ~30 MB of packed history
        msg = f"commit {i}".encode()
        # consecutive commits on one branch chain by themselves: each one's parent is the branch tip
        proc.stdin.write(b"commit refs/heads/main\ncommitter bench <b@b> %d +0000\ndata %d\n%s\n"
                         b"M 644 inline data/file%03d.txt\ndata %d\n%s\n"
                         % (946684800 + i, len(msg), msg, i % 200, len(data), data))
    proc.stdin.close()
    if proc.wait() != 0:
        raise RuntimeError("git fast-import failed")
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "main"], check=True)


def _task_for(target: Path, root: Path) -> tasks.Task:
    (root / "oracles").mkdir(parents=True, exist_ok=True)
    (root / "oracles/o.py").write_text("def test_nothing():\n    pass\n")  # an oracle must hold a test
    (root / "tasks.yaml").write_text(
        f"schema_version: 1\ntasks:\n  - {{id: big, class: trivial, target: {target}, prompt: p, verify: 'true',\n"
        "     oracle: {command: 'true', files: [{source: o.py, target: o.py}]}}\n")
    return tasks.load(root / "tasks.yaml", target_roots=[target])[0]  # a target outside tasks/, allowed by name


def workspace_seconds(task: tasks.Task, skills: Path, scratch: Path, repeats: int = 5) -> tuple[float, float]:
    """(one-time template build, median per-cell workspace phase)."""
    start = time.monotonic()
    workspace.export_tree(task, scratch / "tree")
    workspace.build_template(scratch / "tree", layout.read_family(skills), None, scratch / "template")
    template_s = time.monotonic() - start
    walls = []
    for i in range(repeats):
        start = time.monotonic()
        workspace.materialize(scratch / "template", scratch / f"ws{i}")
        walls.append(time.monotonic() - start)
    return template_s, statistics.median(walls)


def bare_cell(cell: CellSpec, binary: Path) -> float:
    """The same cell's phases run bare, each in a directory of its own, exactly as the cell lays them out."""
    with tempfile.TemporaryDirectory(prefix="skillevo-bare-") as tmp:
        ws = Path(tmp) / "ws"
        workspace.materialize(cell.template, ws)
        total = sum(bare.session(binary, cell.model.endpoint, cell.model.name, s.prompt.format(prompt=cell.task.prompt),
                                 ws, Path(tmp) / f"home{i}") for i, s in enumerate(cell.arm.sessions))
        total += bare.command(cell.task.verify, ws)
        oracle = Path(tmp) / "oracle"
        for target, data in cell.task.oracle_files:
            (oracle / target).parent.mkdir(parents=True, exist_ok=True)
            (oracle / target).write_bytes(data)
        return total + bare.command(cell.task.oracle_command, ws, {"SKILLEVO_ORACLE_DIR": str(oracle)})


class TreeCpu:
    """CPU seconds while it runs: of this process (the simulator, the relays, the watchers; exact) and of the
    processes it started, the sandboxes' (sampled from /proc every CPU_SAMPLE_S, so one that lives shorter
    than that is missed), split into the CLI and the rest. This says whether cells that wait on the model are
    held back by CPU, and whose."""

    def __init__(self) -> None:
        self._seen: dict[tuple[int, int], tuple[str, float]] = {}  # (pid, start time) -> (comm, CPU s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> TreeCpu:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self._self = usage.ru_utime + usage.ru_stime
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.harness_s = usage.ru_utime + usage.ru_stime - self._self
        split = collections.Counter()
        for comm, cpu in self._seen.values():
            split["cli" if comm == Path(cli.CLI_DST).name else "other"] += cpu
        self.cli_s, self.other_s = split["cli"], split["other"]

    def _sample(self) -> None:
        me = os.getpid()
        while not self._stop.wait(CPU_SAMPLE_S):
            stats, children = {}, collections.defaultdict(list)
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    try:
                        with open(f"/proc/{entry.name}/stat", "rb") as f:
                            stat = f.read()
                    except OSError:
                        continue
                    fields = stat.rsplit(b")", 1)[1].split()
                    stats[int(entry.name)] = (stat[stat.index(b"(") + 1:stat.rindex(b")")].decode(), fields)
                    children[int(fields[1])].append(int(entry.name))
            todo = list(children[me])
            while todo:
                pid = todo.pop()
                todo += children.get(pid, [])
                comm, fields = stats[pid]
                self._seen[(pid, int(fields[19]))] = (comm, (int(fields[11]) + int(fields[12])) / _TICK)


def latency_rates(side: SidePlan, params: Params, playbooks: Path, profile: Latency, scratch: Path,
                  unpaced: dict[tuple, tuple]) -> list[float]:
    """Cells per minute at each worker count of LATENCY_RUNS with the simulator pacing replies by `profile`.
    A cell also run without latency (`unpaced`: its usage and cost) must have paid exactly the same."""
    side = dataclasses.replace(side, arms=[a for a in side.arms if a.name == LATENCY_ARM],
                               runs=max(LATENCY_RUNS.values()))
    assert side.arms, f"the latency cells need the {LATENCY_ARM!r} arm in params"
    rates = []
    scratch.mkdir()
    with Simulator(load_dir(playbooks), latency=profile) as slow:
        mdl, _ = models.resolve(params.model, slow.url())
        cells = build_cells(side, params.bench, mdl, scratch)
        for workers, runs in LATENCY_RUNS.items():
            batch = [c for c in cells if c.run <= runs]
            done: list[dict] = []
            with TreeCpu() as cpu:
                start = time.monotonic()
                LocalExecutor(workers).run(batch, lambda c, r, done=done: done.append(r.row), threading.Event())
                wall = time.monotonic() - start
            for row in done:
                assert row["error_kind"] in OK_KINDS, row
                key = (row["task"], row["arm"], row["run"])
                assert key not in unpaced or unpaced[key] == _paid(row), (key, unpaced[key], _paid(row))
            rates.append(len(done) / wall * 60)
            walls = sorted(row["wall_s"] for row in done)
            n = len(done)
            print(f"latency {profile.name}, {workers} worker(s): {n} cells in {wall:.1f}s (cells {walls[0]:.1f}-"
                  f"{walls[-1]:.1f}s, mean {statistics.mean(walls):.1f}s); CPU per cell: CLI {cpu.cli_s / n:.2f}s, "
                  f"other sandboxed {cpu.other_s / n:.2f}s, this process {cpu.harness_s / n:.2f}s; load average "
                  f"{os.getloadavg()[0]:.2f}", flush=True)
    return rates


def _paid(row: dict) -> tuple:
    return tuple(row[f] for f in ("input_tokens", "output_tokens", "cache_creation_input_tokens",
                                  "cache_read_input_tokens", "cost_usd"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=Path, default=ROOT / "tasks/tasks.yaml")
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    parser.add_argument("--executor", choices=["local", "ray"], default=os.environ.get("EXECUTOR", "local"))
    parser.add_argument("--latency", choices=[*PROFILES, "none"], default=SONNET_4_6.name,
                        help="the model-latency profile of the latency figures (none: skip them)")
    args = parser.parse_args()
    sandbox.preflight()
    binary = cli.locate()
    params = config.load(args.params)
    skills = ROOT / params.skills.skills
    side = plan("incumbent", args.tasks, skills, None, params)
    side.runs = 1
    with tempfile.TemporaryDirectory(prefix="skillevo-bench-cells-") as tmp, \
            Simulator(load_dir(args.tasks.parent / "playbooks")) as sim:
        scratch = Path(tmp)
        small = workspace_seconds(side.tasks[0], skills, scratch / "small")
        print(f"workspace, demo target {side.tasks[0].id}: template {small[0]:.3f}s once, {small[1]:.3f}s per cell")
        with tempfile.TemporaryDirectory(prefix="skillevo-history-") as hist:
            start = time.monotonic()
            generate_history(Path(hist) / "big-repo")
            size = sum(f.stat().st_size for f in (Path(hist) / "big-repo/.git").rglob("*") if f.is_file()) / 1e6
            print(f"generated 10,000-commit target in {time.monotonic() - start:.1f}s ({size:.1f} MB of .git)")
            large = workspace_seconds(_task_for(Path(hist) / "big-repo", Path(hist) / "tasks"), skills,
                                      Path(hist) / "large")
        print(f"workspace, 10,000-commit target: template {large[0]:.3f}s once, {large[1]:.3f}s per cell")

        mdl, _ = models.resolve(params.model, sim.url())
        cells = build_cells(side, params.bench, mdl, scratch)
        bare_cell(cells[0], binary)  # warm the page cache for the 200 MB binary
        cell_walls, bare_walls, paid = [], [], {}
        for cell in cells:
            result = run_cell(cell)
            assert result is not None and result.row["error_kind"] in OK_KINDS, result.row
            paid[(cell.task.id, cell.arm.name, cell.run)] = _paid(result.row)
            cell_walls.append(result.row["wall_s"])
            bare_walls.append(bare_cell(cell, binary))
            print(f"{cell.name}: cell {cell_walls[-1]:.2f}s, bare phases {bare_walls[-1]:.2f}s", flush=True)
        ratio = sum(cell_walls) / sum(bare_walls)

        rates = []
        for workers in (1, 2):
            done = []
            start = time.monotonic()
            LocalExecutor(workers).run(cells, lambda c, r, done=done: done.append(r), threading.Event())
            wall = time.monotonic() - start
            rates.append(len(done) / wall * 60)
            print(f"local executor, {workers} worker(s): {len(done)} cells in {wall:.1f}s")
        if args.executor == "ray":
            done = []
            start = time.monotonic()
            RayExecutor.from_params(params.bench).run(cells, lambda c, r: done.append(r), threading.Event())
            ray_rate = len(done) / (time.monotonic() - start) * 60
            print(f"ray_cells_per_minute={ray_rate:.1f}")
        print(f"load average after the figures above: {os.getloadavg()[0]:.2f}")
        if args.latency != "none":
            profile = PROFILES[args.latency]
            slow = latency_rates(side, params, args.tasks.parent / "playbooks", profile, scratch / "latency", paid)
    print(f"workspace_s={small[1]:.3f},{large[1]:.3f}")
    print(f"cell_overhead_ratio={ratio:.2f}")
    print(f"cells_per_minute={rates[0]:.1f},{rates[1]:.1f}")
    if args.latency != "none":
        print(f"latency={profile.describe()}")
        print("latency_cells_per_minute=" + ",".join(f"{r:.1f}" for r in slow))
        print(f"speedup_8v1={slow[-1] / slow[0]:.2f}")


if __name__ == "__main__":
    main()
