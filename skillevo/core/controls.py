"""Contemporaneous controls the gate can check, not only a flag it reads (docs/gate.md, controls).

The candidate side runs in blocks of (task, run): every candidate arm and its control, the incumbent arm
measured beside it, in a random order drawn from a seed of the overlay and the replicate (`order`, which the
bench runs and the gate recomputes). Every candidate-side row records its slot in that order, the candidate it
ran beside (`control_for`), and when it started and ended. `check` refuses, with `rule: contemporaneous
controls`, a side whose rows were not measured so:

- a row whose slot is not its cell's slot in the recomputed order (a block run out of its order, a row moved
  to another block);
- a control that did not run beside this candidate (`control_for` is not the side's overlay: a stored incumbent
  row relabelled, a control from another generation) or a candidate row that claims to be a control;
- a cell that did not run inside its block's window: cells start in slot order (the executors take them first
  in, first out), so within a block each cell starts no earlier than the one before it and no later than that
  one ended, each within SLACK_S (threads racing for a clock, a Ray node's scheduling). A control measured a
  day or a month before its candidate breaks this;
- a re-run block (a block measured again because a harness or API fault spoiled it before the model answered,
  `replaces` naming the run of the block it stands for) that replaces a block without such a fault, a block
  replaced twice, a re-run inside the scheduled runs, or more re-run blocks than the side's budget (bench.json
  `fault_reruns`);
- results.jsonl that is not the file the bench wrote (bench.json's `results_sha256`), and, when a team key is
  set (SKILLEVO_CELL_KEY), a bench.json whose `mac` does not verify under it: without the key a forger who
  rewrites rows, times and bench.json together is not caught here, with it nobody without the key can.
"""

from __future__ import annotations

import hmac
import math
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from skillevo.core.events import USAGE_FIELDS
from skillevo.core.results import is_excluded
from skillevo.files.digests import KEY_ENV, mac_of, team_key
from skillevo.files.errors import BadInput

SLACK_S = 30.0
RULE = "(rule: contemporaneous controls)"

Cell = tuple[str, str, int]  # (task, arm, run)


def seed(overlay_digest: str | None, replicate: int) -> str:
    """The order's seed: the overlay and the replicate, out of any agent's reach, so a resumed bench measures the
    same cells in the same slots and the gate can draw the order again."""
    return f"skillevo interleave {overlay_digest} {replicate}"


def order(overlay_digest: str | None, replicate: int, tasks: Sequence[str], arms: Sequence[str], runs: int
          ) -> list[Cell]:
    """Run by run, the (task, run) blocks in a random order, and within a block every arm in a random order. The
    order of `runs` runs starts with the order of fewer: more runs only add slots."""
    rng = random.Random(seed(overlay_digest, replicate))
    out: list[Cell] = []
    for run in range(1, runs + 1):
        blocks = list(tasks)
        rng.shuffle(blocks)
        for task in blocks:
            block = list(arms)
            rng.shuffle(block)
            out += [(task, arm, run) for arm in block]
    return out


Block = tuple[str, int]  # (task, run)


def blind(row: Mapping[str, Any]) -> bool:
    """A run lost to a harness or API fault before the model answered it anything (no token, no cost): the fault
    could not depend on how the run was going, nor could the agent, which had not acted, provoke it. Only such a
    fault leaves the statistics by a re-run; a fault later in a run may have struck because the run was long (a
    loop hits more faults) or because the agent made it, so it keeps counting at its worst for the candidate."""
    return is_excluded(row) and not row.get("cost_usd") and not any(row.get(f) for f in USAGE_FIELDS)


def spoiled(rows: Sequence[Mapping[str, Any]]) -> list[Block]:
    """Blocks holding a run lost blind (`blind`) that no re-run block replaces yet, in run order: what the bench
    measures again (docs/gate.md, faults)."""
    replaced = {(row["task"], row["replaces"]) for row in rows if row.get("replaces") is not None}
    return sorted({(row["task"], row["run"]) for row in rows if blind(row)} - replaced,
                  key=lambda block: (block[1], block[0]))


def rerun_budget(pct: float, blocks: int) -> int:
    """How many re-run blocks a side that scheduled `blocks` blocks may add (params bench.fault_reruns_pct)."""
    return math.floor(pct * blocks / 100 + 1e-9)


def settle(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The candidate side as the statistics read it: each re-run block in the place of the block it replaces (its
    rows carry that block's run), the replaced block's rows gone, so both arms of every block stay paired and the
    rounds of the test keep the order they were measured in (a block is re-run inside the look that spoiled it).
    Settled rows replace nothing (settling twice changes nothing); a side without re-runs comes back unchanged."""
    blocks: dict[Block, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        blocks[(row["task"], row["run"])].append(row)
    home: dict[Block, int] = {}
    for task, run in sorted((b for b, found in blocks.items() if found[0].get("replaces") is not None),
                            key=lambda block: block[1]):
        target = home.get((task, blocks[(task, run)][0]["replaces"]), blocks[(task, run)][0]["replaces"])
        blocks[(task, target)] = [{**row, "run": target, "replaces": None} for row in blocks.pop((task, run))]
        home[(task, run)] = target
    return sorted((dict(row) for found in blocks.values() for row in found),
                  key=lambda r: (r["task"], r["arm"], r["run"]))


def binding(rows_sha256: str, bench: Mapping[str, Any]) -> dict[str, Any]:
    """What the side's `mac` covers: its rows (by digest) and the identity of the side they were measured for."""
    return {"results_sha256": rows_sha256, "side": bench["side"], "overlay_digest": bench["overlay_digest"],
            "replicate": bench["replicate"], "skills_digest": bench["skills_digest"]}


def sign(rows_sha256: str, bench: Mapping[str, Any]) -> str | None:
    """bench.json's `mac` under the team key, or None without one."""
    secret = team_key()
    return None if secret is None else mac_of(secret, binding(rows_sha256, bench))


def check(bench: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], rows_sha256: str, where: str) -> None:
    """Refuse a candidate side whose controls were not measured beside its candidate, in its order and its time;
    `where` names the side's directory in every message."""
    if bench["side"] != "candidate":
        return
    if bench.get("results_sha256") != rows_sha256:
        raise BadInput(f"{where}/results.jsonl: is not the file the bench wrote (bench.json's results_sha256 "
                       f"{bench.get('results_sha256')}) {RULE}")
    secret = team_key()
    if secret is not None:
        mac = bench.get("mac")
        if not (isinstance(mac, str) and hmac.compare_digest(mac, mac_of(secret, binding(rows_sha256, bench)))):
            raise BadInput(f"{where}/bench.json: $.mac: does not verify under this team's key {KEY_ENV} (written "
                           f"without it, or edited) {RULE}")
    overlay = bench["overlay_digest"]
    tasks = [b["id"] for b in bench["task_bindings"]]
    arms = [a["name"] for a in bench["arms"]]
    runs = max((row["run"] for row in rows), default=0)
    slots = {cell: slot for slot, cell in enumerate(order(overlay, bench["replicate"], tasks, arms, runs))}
    blocks: dict[tuple[str, int], list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        name = f"{where}/results.jsonl: row {row['task']}/{row['arm']}/run{row['run']}"
        control = row["arm"] == row["incumbent_arm"]
        if row.get("control_for") != (overlay if control else None):
            raise BadInput(f"{name}: control_for is {row.get('control_for')!r}, not "
                           + (f"this candidate's overlay {overlay}: a control that did not run beside this candidate "
                              "(a stored incumbent row relabelled, or one from another generation)" if control else
                              "null: a candidate arm's run is no control") + f" {RULE}")
        expected = slots.get((row["task"], row["arm"], row["run"]))
        if row.get("slot") != expected:
            raise BadInput(f"{name}: ran in slot {row.get('slot')}, but the order drawn from the side's seed puts it "
                           f"in slot {expected}: its block ran out of its recorded order {RULE}")
        blocks[(row["task"], row["run"])].append(row)
    for (task, run), block in sorted(blocks.items()):
        _check_window(sorted(block, key=lambda r: r["slot"]), f"{where}/results.jsonl: block {task}/run{run}")
    _check_reruns(bench, blocks, f"{where}/results.jsonl")


def _check_reruns(bench: Mapping[str, Any], blocks: Mapping[Block, Sequence[Mapping[str, Any]]], where: str) -> None:
    """A re-run block stands for a block a fault spoiled, once, past the scheduled runs, within the budget."""
    reruns = bench.get("fault_reruns") or {"pct": 0.0, "blocks": 0}
    taken: set[Block] = set()
    for (task, run), block in sorted(blocks.items(), key=lambda item: item[0][1]):
        replaces = {row.get("replaces") for row in block}
        if replaces == {None}:
            continue
        name = f"{where}: block {task}/run{run}"
        if len(replaces) != 1 or None in replaces:
            raise BadInput(f"{name}: its rows disagree on the block they replace ({sorted(map(str, replaces))}) "
                           f"{RULE}")
        (target,) = replaces
        if not isinstance(target, int) or run <= bench["runs"] or not 1 <= target < run:
            raise BadInput(f"{name}: replaces run {target}, but a re-run block is numbered past the side's "
                           f"{bench['runs']} scheduled runs and after the block it replaces {RULE}")
        if not any(blind(row) for row in blocks.get((task, target), ())):
            raise BadInput(f"{name}: replaces block {task}/run{target}, which no fault spoiled before the model "
                           f"answered: only such a fault is measured again, never a run that counts {RULE}")
        if (task, target) in taken:
            raise BadInput(f"{name}: block {task}/run{target} is replaced twice {RULE}")
        taken.add((task, target))
    scheduled = len({b for b, block in blocks.items() if block[0].get("replaces") is None and b[1] <= bench["runs"]})
    if len(taken) != reruns["blocks"] or len(taken) > rerun_budget(reruns["pct"], scheduled):
        raise BadInput(f"{where}: {len(taken)} re-run blocks; bench.json's fault_reruns says {reruns['blocks']}, "
                       f"at most {reruns['pct']:g}% of the {scheduled} scheduled blocks {RULE}")


def _check_window(block: Sequence[Mapping[str, Any]], where: str) -> None:
    times = [(_time(row, "started_at", where), _time(row, "recorded_at", where)) for row in block]
    for row, (start, end) in zip(block, times, strict=True):
        if end < start:
            raise BadInput(f"{where}: {row['arm']} ended at {row['recorded_at']}, before it started at "
                           f"{row['started_at']} {RULE}")
    for (prev, (p_start, p_end)), (row, (start, _)) in zip(zip(block, times, strict=True),
                                                            zip(block[1:], times[1:], strict=True), strict=False):
        early = (p_start - start).total_seconds()
        late = (start - p_end).total_seconds()
        if early > SLACK_S or late > SLACK_S:
            raise BadInput(f"{where}: {row['arm']} (slot {row['slot']}) started at {row['started_at']}, "
                           + (f"{early:.0f} s before" if early > SLACK_S else f"{late:.0f} s after the end of")
                           + f" {prev['arm']} (slot {prev['slot']}), the cell before it in the block: a cell that "
                           f"did not run inside its block's window (at most {SLACK_S:g} s apart) {RULE}")


def _time(row: Mapping[str, Any], key: str, where: str) -> datetime:
    value = row.get(key)
    try:
        moment = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        moment = None
    if moment is None or moment.utcoffset() is None:
        raise BadInput(f"{where}: {row['arm']}: {key} {value!r} is not a time with its offset {RULE}")
    return moment
