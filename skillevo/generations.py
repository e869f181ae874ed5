"""Generations: run `dvc repro` until a candidate promotes, keep every generation, report them all.

    python -m skillevo.generations evolve --generations N
    python -m skillevo.generations report
    python -m skillevo.generations status

Each generation is archived under generations/gen-NNN/ (tracked by DVC, so `make push` shares it). A
generation that does not promote hands its candidate side, gate verdict and proposal to the next one
through previous/, which the evidence stage reads.

Stopping at the first promotion is a repeated look: over five generations of candidates that are no better,
a gate with a 5% error rate promotes one about 13-23% of the time (`make gate-study`). So a promotion found
by evolve is confirmed before it is final: `sampling.replicate` is raised and both sides of the same frozen
candidate are measured afresh (new sessions, new noise); only a second promotion ends the run. The
measured rate over the schedule falls to about alpha squared per generation.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from skillevo import config, documents, layout, safefs, stage
from skillevo.digests import sha256_file
from skillevo.errors import SkillevoError

RESULTS = layout.RESULTS
PREVIOUS = layout.PREVIOUS
ARCHIVE = Path("generations")
HANDED_ON = {"bench-candidate": "bench-candidate", "gate": "gate", "proposal/proposal.md": "proposal.md"}
ARCHIVED = ("gate", "proposal", "freeze/manifest.json", "evidence/manifest.json", "bench-candidate",
            "bench-incumbent/bench.json", "bench-incumbent/report.md")


def _json(path: Path) -> Any:
    return documents.load_json(path, what="pipeline output")


def decisions(results: Path = RESULTS) -> list[dict[str, Any]]:
    return _json(results / "gate/promotion.json")["decisions"]


def promoted(ds: list[dict[str, Any]]) -> bool:
    return bool(ds) and all(d["decision"] == "promote" for d in ds)


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst, copy_function=shutil.copyfile)
    else:
        shutil.copyfile(src, dst)


def archive(results: Path = RESULTS, archive_dir: Path = ARCHIVE, confirms: int | None = None) -> Path:
    """Copy this generation's outputs to generations/gen-NNN/ and record what it cost (and, for a confirmation
    run, which generation's promotion it re-measured)."""
    n = len(list(archive_dir.glob("gen-*"))) + 1
    dest = archive_dir / f"gen-{n:03d}"
    for rel in ARCHIVED:
        if (results / rel).exists():
            _copy(results / rel, dest / rel)
    incumbent_rows = results / "bench-incumbent/results.jsonl"
    prior = sorted(archive_dir.glob("gen-*/meta.json"))
    prior_sha = _json(prior[-1])["incumbent_results_sha256"] if prior else None
    sha = sha256_file(incumbent_rows)
    proposer = _json(results / "proposal/session.json")
    meta = {"generation": n, "incumbent_results_sha256": sha, "incumbent_reused": sha == prior_sha,
            "proposer_cost_usd": proposer.get("cost_usd"), "proposer_sessions": 1 if proposer.get("session_id") else 0,
            "confirms": confirms}
    safefs.write_atomic(dest / "meta.json", documents.dump_json(meta))
    return dest


def hand_on(results: Path = RESULTS, previous: Path = PREVIOUS) -> None:
    """Make this generation the next one's `previous/` (the README stays)."""
    for child in previous.iterdir():
        if child.name != "README.md":
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    for src, dst in HANDED_ON.items():
        _copy(results / src, previous / dst)


def _run(cmd: list[str]) -> None:
    print("+ " + " ".join(cmd), flush=True)
    code = subprocess.run(cmd).returncode
    if code != 0:
        raise SkillevoError(f"`{' '.join(cmd)}` exited {code}; its output above says why")


def evolve(generations: int, dvc: str, noise: str | None = None, params: Path = layout.PARAMS) -> int:
    """Generations until one promotes and a fresh replicate confirms it; `noise` sets the simulator's profile."""
    current = config.load(params)
    if noise and current.model.simulated and current.simulator.noise != noise:
        config.set_value(params, "simulator", "noise", noise)
        print(f"evolve: simulator.noise {current.simulator.noise} -> {noise} in {params} (docs/simulator.md)")
    for g in range(1, generations + 1):
        print(f"== generation {g} of {generations}", flush=True)
        ds = _generation(dvc)
        if promoted(ds):
            replicate = config.load(params).sampling.replicate + 1
            config.set_value(params, "sampling", "replicate", replicate)
            print(f"   confirming: sampling.replicate {replicate - 1} -> {replicate}, both sides measured afresh",
                  flush=True)
            ds = _generation(dvc, confirms=g)
            if promoted(ds):
                print(f"promoted in generation {g}, confirmed by replicate {replicate}: review with `make apply`, "
                      "then commit.")
                return 0
            print("   not confirmed: the first promotion was not repeated; the incumbent stays", flush=True)
        hand_on()
    print(f"no candidate cleared the gate in {generations} generation(s); the incumbent stays.")
    return 0


# A confirmation re-measures the frozen candidate as it is: only these stages run, so evidence, propose and
# freeze keep what dvc.lock recorded (a real proposer given fresh evidence would write another candidate).
CONFIRM_STAGES = ("bench@incumbent", "preflight", "bench@candidate", "gate")


def _generation(dvc: str, confirms: int | None = None) -> list[dict[str, Any]]:
    _run([dvc, "repro"] if confirms is None else [dvc, "repro", "--single-item", *CONFIRM_STAGES])
    ds = decisions()
    for d in ds:
        print(f"   {d['candidate_arm']}: {d['decision']} — {(d['reasons'] or [''])[0]}")
    archive(confirms=confirms)
    _run([dvc, "add", "-q", str(ARCHIVE)])
    return ds


def rows(archive_dir: Path = ARCHIVE) -> list[dict[str, Any]]:
    out = []
    for gen in sorted(archive_dir.glob("gen-*")):
        meta = _json(gen / "meta.json")
        metrics = _json(gen / "gate/metrics.json")
        ds = _json(gen / "gate/promotion.json")["decisions"]
        proposer = 0 if meta.get("confirms") else 1  # a confirmation re-measures; its proposal was paid already
        spent = metrics.get("candidate.total_cost_usd", 0.0) + proposer * (meta["proposer_cost_usd"] or 0.0)
        sessions = metrics.get("candidate.sessions", 0) + proposer * meta["proposer_sessions"]
        if not meta["incumbent_reused"]:
            spent += metrics.get("incumbent.total_cost_usd", 0.0)
            sessions += metrics.get("incumbent.sessions", 0)
        label = f"{meta['generation']} (confirms {meta['confirms']})" if meta.get("confirms") else meta["generation"]
        out.append({"generation": label,
                    "decision": ", ".join(f"{d['candidate_arm']}={d['decision']}" for d in ds),
                    "improvement_pct": ", ".join(_improvement(d) for d in ds),
                    "cost_usd": round(spent, 4), "sessions": sessions, "incumbent_reused": meta["incumbent_reused"]})
    return out


def _improvement(decision: dict[str, Any]) -> str:
    estimate = decision.get("estimate")
    if not estimate:
        return "n/a"
    low, high = estimate["interval_pct"]
    return f"{estimate['improvement_pct']:.1f}% ({low:.1f}% to {high:.1f}%)"


def report(archive_dir: Path = ARCHIVE) -> str:
    lines = ["| gen | decision | estimated improvement (interval) | cost spent $ | sessions run | incumbent side |",
             "|---|---|---|---|---|---|"]
    for r in rows(archive_dir):
        lines.append(f"| {r['generation']} | {r['decision']} | {r['improvement_pct']} | {r['cost_usd']:.4f} | "
                     f"{r['sessions']} | {'reused' if r['incumbent_reused'] else 'ran'} |")
    return "\n".join(lines) if len(lines) > 2 else "no generations archived yet (run `make evolve`)"


def status(results: Path = RESULTS) -> str:
    """The decision of the generation in results/, first, then where to read more."""
    if not (results / "gate/promotion.json").is_file():
        return "no gate decision yet: run `make demo` (or `dvc repro`)"
    ds = decisions(results)
    lines = [f"decision: {'promote' if promoted(ds) else 'keep the incumbent'}"]
    lines += [f"  {d['candidate_arm']}: {d['decision']} — {(d['reasons'] or [''])[0]}" for d in ds]
    lines += [f"report: {results / 'gate/report.md'}", f"proposal: {results / 'proposal/proposal.md'}"]
    if promoted(ds):
        lines.append("next: `make apply` writes the promoted skills for your review (it never commits)")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillevo.generations", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("evolve", help="run generations until one promotes")
    ev.add_argument("--generations", type=int, default=1)
    ev.add_argument("--dvc", default="dvc")
    ev.add_argument("--noise", choices=("none", "demo", "realistic"),
                    help="set params simulator.noise first (simulator backend only) [leave as is]")
    sub.add_parser("report", help="a table of all archived generations")
    sub.add_parser("status", help="the current generation's decision")
    return p


def run(args: argparse.Namespace) -> str | None:
    if args.command == "evolve":
        evolve(args.generations, args.dvc, args.noise)
        return None
    return report() if args.command == "report" else status()


def main(argv: list[str] | None = None) -> int:
    return stage.main("generations", parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
