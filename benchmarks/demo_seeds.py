"""How often the demo promotes its known-better candidate, over simulator seeds (issue target: >= 95%).

Clones this checkout, then for each seed sets `simulator.seed` in the clone's params.yaml and runs the
whole generation (`dvc repro`, every stage: the proposer sees that seed's evidence). Prints one line per
seed, then the estimated improvement per arm over seeds and, last,
`demo_promote_rate=<x> seeds=<n> min_improvement_pct=<m>`. About 5 minutes a seed on 2 cores.

    python -m benchmarks.demo_seeds --seeds 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from skillevo.core import config, layout, params_edit

ROOT = Path(__file__).resolve().parents[1]


def generation(clone: Path, seed: int) -> dict:
    params_edit.set_value(clone / layout.PARAMS, "simulator", "seed", seed)
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "PATH": f"{ROOT / '.venv/bin'}:{os.environ['PATH']}"}
    start = time.monotonic()
    subprocess.run([str(ROOT / ".venv/bin/dvc"), "repro", "-q"], cwd=clone, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    promotion = json.loads((clone / layout.PROMOTION).read_text())
    return {"seed": seed, "wall_s": time.monotonic() - start,
            "arms": {d["candidate_arm"]: (d["decision"], d["estimate"]["improvement_pct"])
                     for d in promotion["decisions"]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="number of seeds, 0..N-1 (default 20)")
    args = parser.parse_args()
    if not os.environ.get("SKILLEVO_CLAUDE"):
        raise SystemExit("run through `make demo-seeds` (it sets SKILLEVO_CLAUDE to the pinned CLI)")
    with tempfile.TemporaryDirectory(prefix="skillevo-demo-seeds-") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        minimum = config.load(clone / layout.PARAMS).gate.min_improvement_pct
        results = []
        for seed in tqdm(range(args.seeds), desc="seeds", unit="seed"):
            result = generation(clone, seed)
            results.append(result)
            arms = ", ".join(f"{arm} {decision} {pct:.1f}%" for arm, (decision, pct) in result["arms"].items())
            tqdm.write(f"seed {seed:3d}: {arms} ({result['wall_s']:.0f}s)")
    promoted = sum(all(d == "promote" for d, _ in r["arms"].values()) for r in results)
    for arm in results[0]["arms"]:
        pcts = [r["arms"][arm][1] for r in results if arm in r["arms"]]
        print(f"{arm}: improvement mean {statistics.mean(pcts):.1f}%, min {min(pcts):.1f}%, "
              f"max {max(pcts):.1f}% (required {minimum}%)")
    print(f"overlay promoted in {promoted} of {len(results)} seeds")
    print(f"demo_promote_rate={promoted / len(results):.3f} seeds={len(results)} min_improvement_pct={minimum}")


if __name__ == "__main__":
    main()
