"""Generations: run `dvc repro` until a candidate promotes, keep every generation, report them all.

    python -m skillevo.ops.generations evolve --generations N
    python -m skillevo.ops.generations report
    python -m skillevo.ops.generations status

Each generation is archived under generations/gen-NNN/ (tracked by DVC, so `make push` shares it). At the start
of each generation, before `dvc repro`, the memory is rebuilt from that archive: previous/memory/ gets the newest
rejected generation's candidate side, gate verdict and proposal, and rejected.json every candidate rejected
against the current incumbent (skillevo.core.memory); `dvc add` records it in previous/memory.dvc. Handing on at the
start, not the end, keeps previous/ equal to what dvc.lock recorded, so `dvc status` is clean after evolve and a
teammate's `dvc repro --pull` reproduces the last generation as it ran (docs/generations.md).

Stopping at the first promotion is a repeated look: over five generations of candidates that are no better,
a gate with a 5% error rate promotes one about 13-23% of the time (`make gate-study`). So a promotion found
by evolve is confirmed before it is final: `sampling.replicate` is raised and both sides of the same frozen
candidate are measured afresh (new sessions, new noise); only a second promotion ends the run. The
measured rate over the schedule falls to about alpha squared per generation.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skillevo import stats
from skillevo.core import config, layout, memory, params_edit, prediction, stage
from skillevo.files import documents, safefs
from skillevo.files.digests import sha256_file
from skillevo.files.errors import BadInput, SkillevoError
from skillevo.gate import family

RESULTS, PREVIOUS, MEMORY = layout.RESULTS, layout.PREVIOUS, layout.MEMORY
ARCHIVE = Path("generations")
HANDED_ON = {"bench-candidate": "bench-candidate", "gate": "gate", "proposal/proposal.md": "proposal.md"}
ARCHIVED = ("gate", "proposal", "freeze/manifest.json", "freeze/overlay", "evidence/manifest.json", "bench-candidate",
            "bench-incumbent/bench.json", "bench-incumbent/report.md")
KEPT_IN_PREVIOUS = frozenset({"README.md", "memory", "memory.dvc", ".gitignore"})  # git's files, and the memory
MAX_OVERLAY_BYTES = 8 << 20


def _json(path: Path) -> Any:
    return documents.load_json(path, what="pipeline output")


def decisions(results: Path = RESULTS) -> list[dict[str, Any]]:
    return _json(results / "gate/promotion.json")["decisions"]


def promoted(ds: list[dict[str, Any]]) -> bool:
    return bool(ds) and all(d["decision"] == "promote" for d in ds)


def _copy(src: Path, dst: Path) -> None:
    """A plain copy: contents only, every file 0644 and directory 0755 (a frozen overlay's read-only modes stay in
    results/, so the archive and the memory can be replaced)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst, copy_function=shutil.copyfile)
        for sub in (dst, *(p for p in dst.rglob("*") if p.is_dir())):
            sub.chmod(0o755)
    else:
        shutil.copyfile(src, dst)


def _ledger(side: Path, since: str | None) -> dict[str, dict[str, float | int]]:
    """What a bench side cost, split by when each row was recorded: rows recorded since this generation started
    were paid now; older ones were served, by DVC's run-cache or the cell store (a row's `recorded_at` is when its
    cell finished, and a served row keeps it)."""
    out = {"paid": {"cost_usd": 0.0, "sessions": 0}, "served": {"cost_usd": 0.0, "sessions": 0}}
    path = side / "results.jsonl"
    if not path.exists():
        return out
    for line in documents.jsonl_lines(path.read_text(encoding="utf-8")):
        row = documents.parse_json(line, str(path))
        kind = "paid" if since is None or (row.get("recorded_at") or "") >= since else "served"
        out[kind]["cost_usd"] = round(out[kind]["cost_usd"] + (row.get("cost_usd") or 0.0), 6)
        out[kind]["sessions"] += len(row.get("session_ids") or [])
    bench = side / "bench.json"
    canaries = ((_json(bench).get("cell_store") or {}).get("canaries") or []) if bench.exists() else []
    for canary in canaries:  # paid besides the side's rows (params bench.canary)
        kind = "paid" if since is None or (canary.get("recorded_at") or "") >= since else "served"
        out[kind]["cost_usd"] = round(out[kind]["cost_usd"] + (canary.get("cost_usd") or 0.0), 6)
        out[kind]["sessions"] += canary.get("sessions") or 0
    return out


def archive(results: Path = RESULTS, archive_dir: Path = ARCHIVE, confirms: int | None = None,
            started_at: str | None = None, ran: frozenset[str] = frozenset({"propose"})) -> Path:
    """Copy this generation's outputs to generations/gen-NNN/ and record what it cost, paid now versus served
    from the cache (and, for a confirmation run, which generation's promotion it re-measured)."""
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
    proposer_paid = "propose" in ran
    ledger = {side: _ledger(results / f"bench-{side}", started_at) for side in ("incumbent", "candidate")}
    ledger["proposer"] = {kind: {"cost_usd": (proposer.get("cost_usd") or 0.0) if (kind == "paid") == proposer_paid
                                 else 0.0, "sessions": int(bool(proposer.get("session_id")))
                                 if (kind == "paid") == proposer_paid else 0} for kind in ("paid", "served")}
    simulated = _json(results / "bench-incumbent/bench.json")["model"]["simulated"]
    meta = {"generation": n, "incumbent_results_sha256": sha, "incumbent_reused": sha == prior_sha,
            "proposer_cost_usd": proposer.get("cost_usd"), "proposer_sessions": 1 if proposer.get("session_id") else 0,
            "confirms": confirms, "started_at": started_at, "ledger": ledger, "simulated": simulated}
    safefs.write_atomic(dest / "meta.json", documents.dump_json(meta))
    return dest


def _incumbent(params: Path) -> tuple[dict[str, bytes], set[str], str]:
    """The incumbent family as it is now: files, execute bits and the tree digest every bench.json records."""
    p = config.load(params)
    executables: set[str] = set()
    family = layout.read_family(p.skills.skills, p.skills.frontmatter_keys, executables)
    return family, executables, layout.tree_digest(family, executables)


def _frozen_overlay(gen: Path, promotion: dict[str, Any]) -> tuple[dict[str, bytes], set[str]] | None:
    """The overlay the gate judged: the archived frozen copy (its execute bits from the freeze manifest, as the
    archive keeps none), or for an archive older than that copy the proposal's overlay; None if neither has the
    digest the gate bound."""
    manifest = _json(gen / "freeze/manifest.json") if (gen / "freeze/manifest.json").is_file() else {"files": []}
    executables = {f["path"] for f in manifest["files"] if f["executable"]}
    for where in (gen / "freeze/overlay", gen / "proposal/overlay"):
        if where.is_dir():
            files = safefs.read_tree(where, max_file_bytes=MAX_OVERLAY_BYTES, max_total_bytes=MAX_OVERLAY_BYTES,
                                     what="archived overlay file")
            if layout.tree_digest(files, executables) == promotion["overlay_digest"]:
                return files, executables
    return None


def rejections(archive_dir: Path = ARCHIVE, params: Path = layout.PARAMS) -> list[tuple[Path, dict[str, Any]]]:
    """(archived generation, memory entry) for every candidate rejected against the current incumbent, newest
    first. A generation is a rejection when the gate promoted it on no arm or on only some (a confirmation that
    did not repeat a promotion is one too)."""
    family, executables, digest = _incumbent(params)
    out = []
    for gen in sorted(archive_dir.glob("gen-*"), reverse=True):
        number = re.fullmatch(r"gen-(\d+)", gen.name)
        if not (number and (gen / "gate/promotion.json").is_file() and (gen / "bench-candidate/bench.json").is_file()):
            continue
        bench = _json(gen / "bench-candidate/bench.json")
        promotion = _json(gen / "gate/promotion.json")
        if bench.get("skills_digest") != digest or promoted(promotion["decisions"]) or promotion.get("no_proposal"):
            continue  # a no_proposal generation froze no candidate: nothing was rejected
        overlay = _frozen_overlay(gen, promotion)
        if overlay is None:
            print(f"   {gen}: no archived overlay has the digest its gate bound; left out of the memory", flush=True)
            continue
        out.append((gen, memory.entry(int(number.group(1)), digest, family, executables, *overlay,
                                      promotion["decisions"])))
    return out


def hand_on(archive_dir: Path = ARCHIVE, previous: Path = PREVIOUS, params: Path = layout.PARAMS) -> bool:
    """Rebuild previous/memory/ from the archive for the current incumbent: the newest rejected generation's
    candidate side, verdict and proposal, and every rejected candidate in rejected.json. Returns whether a memory
    exists (False: a cold start, nothing written). It is a function of generations/ and skills/ alone, so running it
    again changes nothing; anything else in previous/ (an older layout) is removed."""
    tracked = archive_dir.with_suffix(".dvc")
    if tracked.exists() and not archive_dir.is_dir():
        raise BadInput(f"{archive_dir}: {tracked} tracks it but it is not in this checkout; run `make pull` first, or "
                       "the memory would be rebuilt without the generations it remembers (rule: the whole archive)")
    found = rejections(archive_dir, params)
    target = previous / MEMORY.relative_to(PREVIOUS)
    previous.mkdir(exist_ok=True)
    for child in previous.iterdir():
        if child.name not in KEPT_IN_PREVIOUS:
            safefs.remove_tree(child)
    if not found and not target.exists():
        return False
    safefs.remove_tree(target)
    target.mkdir(parents=True)
    if found:
        newest = found[0][0]
        for src, dst in HANDED_ON.items():
            if (newest / src).exists():
                _copy(newest / src, target / dst)
    rejected = target / memory.REJECTED_FILE
    safefs.write_atomic(rejected, memory.dump([e for _, e in found], str(rejected)))
    return True


def _run(cmd: list[str]) -> str:
    """Run `cmd`, showing its output as it comes, and return that output (DVC says there which stages ran)."""
    print("+ " + " ".join(cmd), flush=True)
    seen = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            seen.append(line)
    if proc.returncode != 0:
        raise SkillevoError(f"`{' '.join(cmd)}` exited {proc.returncode}; its output above says why")
    return "".join(seen)


def evolve(generations: int, dvc: str, noise: str | None = None, params: Path = layout.PARAMS) -> int:
    """Generations until one promotes and a fresh replicate confirms it; `noise` sets the simulator's profile."""
    current = config.load(params)
    if noise and current.model.simulated and current.simulator.noise != noise:
        params_edit.set_value(params, "simulator", "noise", noise)
        print(f"evolve: simulator.noise {current.simulator.noise} -> {noise} in {params} (docs/simulator.md)")
    for g in range(1, generations + 1):
        policy = config.load(params).gate
        spent = family_budget(policy.family_alpha)
        if not spent.allows(policy.alpha):
            print(f"evolve: stopping before generation {g}: another at gate.alpha {policy.alpha:g} would spend "
                  f"{family.per_generation(policy.alpha):.4g} more than the {spent.left:.4g} left ({spent.line()}); "
                  "raise gate.family_alpha, or lower gate.alpha, to go on")
            print(_to_commit())
            return 0
        print(f"== generation {g} of {generations} ({spent.line()})", flush=True)
        if hand_on():
            _run([dvc, "add", "-q", str(MEMORY)])
        ds = _generation(dvc)
        declined = _json(RESULTS / "gate/promotion.json").get("no_proposal")
        if declined:
            print(f"the proposer declined in generation {g}: {declined}; the incumbent stays (with the same evidence "
                  "it would decline again: add tasks or measure on another model)")
            print(_to_commit())
            return 0
        if promoted(ds):
            replicate = config.load(params).sampling.replicate + 1
            params_edit.set_value(params, "sampling", "replicate", replicate)
            print(f"   confirming: sampling.replicate {replicate - 1} -> {replicate}, both sides measured afresh",
                  flush=True)
            ds = _generation(dvc, confirms=g)
            if promoted(ds):
                print(f"promoted in generation {g}, confirmed by replicate {replicate}: review with "
                      "`skillevo apply` (`make apply` in a skillevo checkout), then commit.")
                print(_to_commit())
                return 0
            print("   not confirmed: the first promotion was not repeated; the incumbent stays", flush=True)
    print(f"no candidate cleared the gate in {generations} generation(s); the incumbent stays.")
    print(_to_commit())
    return 0


def family_budget(family_alpha: float, archive_dir: Path = ARCHIVE) -> family.Budget:
    """What the archived evolution has spent of gate.family_alpha: each generation that tested a candidate spends
    its gate.alpha squared (skillevo.gate.family); a confirmation is part of its generation's, a no_proposal none."""
    tested = []
    for gen in sorted(archive_dir.glob("gen-*")):
        if not (gen / "meta.json").is_file() or not (gen / "gate/promotion.json").is_file():
            continue
        promotion = _json(gen / "gate/promotion.json")
        if _json(gen / "meta.json").get("confirms") or promotion.get("no_proposal"):
            continue
        tested.append(float(promotion["policy"]["alpha"]))
    return family.budget(family_alpha, tested)


def _to_commit() -> str:
    tracked = [str(p) for p in (Path("dvc.lock"), layout.PARAMS, ARCHIVE.with_suffix(".dvc"),
                                MEMORY.with_suffix(".dvc")) if p.exists()]
    return (f"to share these generations: git add {' '.join(tracked)} && git commit, then `make push` "
            "(a teammate's `dvc repro --pull` then runs nothing)")


# A confirmation re-measures the frozen candidate as it is: only these stages run, so evidence, propose and
# freeze keep what dvc.lock recorded (a real proposer given fresh evidence would write another candidate).
CONFIRM_STAGES = ("bench@incumbent", "preflight", "bench@candidate", "gate")


def _generation(dvc: str, confirms: int | None = None) -> list[dict[str, Any]]:
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    out = _run([dvc, "repro"] if confirms is None else [dvc, "repro", "--single-item", *CONFIRM_STAGES])
    ran = frozenset(re.findall(r"Running stage '([^']+)'", out)) - {"identity"}  # that one runs every time
    ds = decisions()
    for d in ds:
        print(f"   {d['candidate_arm']}: {d['decision']} — {(d['reasons'] or [''])[0]}")
    archive(confirms=confirms, started_at=started_at, ran=ran)
    _run([dvc, "add", "-q", str(ARCHIVE)])
    return ds


def rows(archive_dir: Path = ARCHIVE) -> list[dict[str, Any]]:
    out = []
    for gen in sorted(archive_dir.glob("gen-*")):
        meta = _json(gen / "meta.json")
        promotion = _json(gen / "gate/promotion.json")
        ds = promotion["decisions"]
        ledger = meta["ledger"]
        paid = {k: sum(part["paid"][k] for part in ledger.values()) for k in ("cost_usd", "sessions")}
        served = {k: sum(part["served"][k] for part in ledger.values()) for k in ("cost_usd", "sessions")}
        label = f"{meta['generation']} (confirms {meta['confirms']})" if meta.get("confirms") else meta["generation"]
        out.append({"generation": label,
                    "decision": ", ".join(f"{d['candidate_arm']}={d['decision']}" for d in ds)
                    or ("no_proposal" if promotion.get("no_proposal") else ""),
                    "improvement_pct": ", ".join(_improvement(d) for d in ds),
                    "promoted_points": min((d["estimate"]["improvement_pct"] for d in ds), default=0.0)
                    if promoted(ds) and not meta.get("confirms") else 0.0,
                    "cost_usd": round(paid["cost_usd"], 4), "sessions": paid["sessions"],
                    "served_usd": round(served["cost_usd"], 4), "served_sessions": served["sessions"],
                    "incumbent_reused": ledger["incumbent"]["paid"]["sessions"] == 0,
                    "simulated": meta["simulated"]})
    return out


def _improvement(decision: dict[str, Any]) -> str:
    estimate = decision.get("estimate")
    if not estimate:
        return "n/a"
    low, high = estimate["interval_pct"]
    return f"{stats.improvement_text(estimate)} ({stats.bound_text(low)} to {stats.bound_text(high)})"


def report(archive_dir: Path = ARCHIVE) -> str:
    """Per generation and in all: what was paid for now and what DVC's run-cache or the cell store served, and
    what a promoted percentage point cost. Simulated sessions are labelled: their dollars are the simulator's
    arithmetic."""
    table = rows(archive_dir)
    if not table:
        return "no generations archived yet (run `make evolve`)"
    lines = ["| gen | decision | estimated improvement (interval) | paid $ (sessions) | served (run-cache, cell "
             "store) $ (sessions) | incumbent side |", "|---|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r['generation']} | {r['decision']} | {r['improvement_pct']} | {r['cost_usd']:.4f} "
                     f"({r['sessions']}) | {r['served_usd']:.4f} ({r['served_sessions']}) | "
                     f"{'reused' if r['incumbent_reused'] else 'ran'} |")
    paid, served = sum(r["cost_usd"] for r in table), sum(r["served_usd"] for r in table)
    sessions = sum(r["sessions"] for r in table)
    points = sum(r["promoted_points"] for r in table)
    lines += ["", f"in all: paid ${paid:.4f} for {sessions} sessions; served by the run-cache and the cell store "
                  f"${served:.4f} "
                  f"({sum(r['served_sessions'] for r in table)} sessions)"
              + (f"; ${paid / points:.4f} per promoted percentage point" if points > 0 else "; nothing promoted")]
    lines.append(prediction.record(_json(gen / "gate/promotion.json") for gen in sorted(archive_dir.glob("gen-*"))))
    if layout.PARAMS.is_file():
        lines.append(family_budget(config.load(layout.PARAMS).gate.family_alpha, archive_dir).line())
    if any(r["simulated"] for r in table):
        lines.append("simulated: these sessions ran on the offline simulator; the dollars are its arithmetic, "
                     "not a bill")
    return "\n".join(lines)


def status(results: Path = RESULTS) -> str:
    """The decision of the generation in results/, first, then where to read more."""
    if not (results / "gate/promotion.json").is_file():
        return "no gate decision yet: run `dvc repro` (`make demo` in a skillevo checkout)"
    ds = decisions(results)
    declined = _json(results / "gate/promotion.json").get("no_proposal")
    lines = [f"decision: no proposal this generation: {declined}" if declined else
             f"decision: {'promote' if promoted(ds) else 'keep the incumbent'}"]
    lines += [f"  {d['candidate_arm']}: {d['decision']} — {(d['reasons'] or [''])[0]}" for d in ds]
    lines += [f"report: {results / 'gate/report.md'}", f"proposal: {results / 'proposal/proposal.md'}"]
    if (results / "gate/index.html").is_file():  # a gate older than the page wrote none
        lines.append(f"page: {results / 'gate/index.html'} (open it in a browser: the decision, every transcript)")
    if promoted(ds):
        lines.append("next: `skillevo apply` (`make apply` in a skillevo checkout) writes the promoted skills for "
                     "your review (it never commits)")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillevo.ops.generations", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("evolve", help="run generations until one promotes")
    ev.add_argument("--generations", type=int, default=1)
    ev.add_argument("--dvc", default="dvc")
    ev.add_argument("--noise", choices=("none", "demo", "realistic"),
                    help="set params simulator.noise first (simulator backend only) [leave as is]")
    sub.add_parser("report", help="the current generation's decision, then a table of all archived generations")
    sub.add_parser("status", help="the current generation's decision")
    return p


def run(args: argparse.Namespace) -> str | None:
    if args.command == "evolve":
        evolve(args.generations, args.dvc, args.noise)
        return None
    if args.command == "report":  # after `make demo` nothing is archived: the generation in results/ is news
        current = status() if (RESULTS / "gate/promotion.json").is_file() else None
        parts = (current and f"current generation (results/):\n{current}", report())
        return "\n\n".join(part for part in parts if part)
    return status()


def main(argv: list[str] | None = None) -> int:
    return stage.main("generations", parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
