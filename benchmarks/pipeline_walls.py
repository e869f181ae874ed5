"""Pipeline walls: the identity stage alone, `make demo` on a fresh clone, then a no-op `dvc repro` in it.

Prints `identity_s=<median of 5>` (the stage every repro runs; target <= 0.3), `demo_s=<seconds>` (target <= 180
on 2 cores; the line before it gives each stage's share) and, last, `noop_repro_s=<median of 5>` (target <= 1.5): a
repro in which only the identity stage, which always runs, may run. `--identity` measures the first alone. The
clone reuses this checkout's venv and CLI (VENV/TOOLS), so setup time is not counted.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def identity_walls(runs: int = 5) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="skillevo-identity-") as tmp:
        argv = [sys.executable, "-m", "skillevo.stages.identity", "--params", str(ROOT / "params.yaml"), "--out", tmp]
        walls = []
        for _ in range(runs):
            start = time.monotonic()
            subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
            walls.append(time.monotonic() - start)
    return walls


def demo_stages(argv: list[str], env: dict[str, str]) -> list[tuple[str, float]]:
    """Runs `make demo`, echoing its output, and returns each stage's wall: from DVC's "Running stage" line to the
    next (the first is the setup and whatever make does before DVC, the last runs to make's exit)."""
    marks = [("setup", time.monotonic())]
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True, bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            found = re.search(r"Running stage '([^']+)'", line)
            if found:
                marks.append((found.group(1), time.monotonic()))
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, argv)
    ends = [at for _, at in marks[1:]] + [time.monotonic()]
    return [(stage, end - at) for (stage, at), end in zip(marks, ends, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--identity", action="store_true", help="measure the identity stage only")
    args = parser.parse_args()
    walls = identity_walls()
    print(f"identity stage: {', '.join(f'{w:.2f}' for w in walls)} s")
    print(f"identity_s={statistics.median(walls):.2f}")
    if args.identity:
        return
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    with tempfile.TemporaryDirectory(prefix="skillevo-walls-") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        make = ["make", "-C", str(clone), f"VENV={ROOT / '.venv'}", f"TOOLS={ROOT / '.tools'}"]
        start = time.monotonic()
        stages = demo_stages(make + ["demo"], env)
        demo = time.monotonic() - start
        dvc = [str(ROOT / ".venv/bin/dvc"), "repro"]
        walls = []
        for _ in range(5):
            start = time.monotonic()
            out = subprocess.run(dvc, cwd=clone, check=True, env=env, capture_output=True, text=True)
            walls.append(time.monotonic() - start)
            ran = re.findall(r"Running stage '([^']+)'", out.stdout)
            assert ran in ([], ["identity"]), out.stdout  # identity always runs (dvc.yaml); nothing else may
    print(f"make demo on a fresh clone: {demo:.1f}s ({os.cpu_count()} cores)")
    print("where it goes: " + ", ".join(f"{stage} {wall:.1f}" for stage, wall in stages) + " s")
    print(f"no-op dvc repro: {', '.join(f'{w:.2f}' for w in walls)} s")
    print(f"demo_s={demo:.1f}")
    print(f"noop_repro_s={statistics.median(walls):.2f}")


if __name__ == "__main__":
    main()
