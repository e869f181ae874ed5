"""What containment costs: the sandboxed session runner vs the bare CLI on the same simulated session.

Prints per-run walls, the medians and, last, `session_overhead_ratio=<sandboxed median / bare median>`.
Runs are interleaved (sandboxed, bare, sandboxed, ...) so drift on the machine hits both alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import bare
from skillevo import sandbox
from skillevo.agent import SessionSpec, cli, run_session
from skillevo.simulator import Simulator, demo


def sandboxed(sim: Simulator, root: Path) -> float:
    ws = demo.make_workspace(root)
    start = time.monotonic()
    record = run_session(SessionSpec(prompt=demo.PROMPT, workspace=ws, model=demo.MODEL, endpoint=sim.url(),
                                     transcript_dir=root / "t", transcript_name="s", expected_skill="work",
                                     timeout_s=120))
    wall = time.monotonic() - start
    assert record["ok"], record
    return wall


def bare_run(sim: Simulator, root: Path, binary: Path) -> float:
    return bare.session(binary, sim.url(), demo.MODEL, demo.PROMPT, demo.make_workspace(root), root / "home")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sandbox.preflight()
    binary = cli.locate()
    walls: dict[str, list[float]] = {"sandboxed": [], "bare": []}
    with Simulator(demo.book()) as sim, tempfile.TemporaryDirectory(prefix="skillevo-bench-") as tmp:
        bare_run(sim, Path(tmp) / "warm", binary)  # page the 200 MB binary in before measuring
        for i in range(args.runs):
            walls["sandboxed"].append(sandboxed(sim, Path(tmp) / f"s{i}"))
            walls["bare"].append(bare_run(sim, Path(tmp) / f"b{i}", binary))
            print(f"run {i + 1}: sandboxed {walls['sandboxed'][-1]:.3f}s  bare {walls['bare'][-1]:.3f}s", flush=True)
    med = {k: statistics.median(v) for k, v in walls.items()}
    print(f"median sandboxed {med['sandboxed']:.3f}s, median bare {med['bare']:.3f}s ({os.cpu_count()} cores)")
    print(f"session_overhead_ratio={med['sandboxed'] / med['bare']:.2f}")


if __name__ == "__main__":
    main()
