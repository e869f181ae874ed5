"""The cell store: a key that covers what can change a cell, entries that are refused unless they are what they
say, and benches that serve stored cells instead of paying for them — also after a kill."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skillevo.bench import CellResult, build_cells, cellstore, harness, plan, run_side
from skillevo.core import models
from skillevo.files.digests import canonical_json
from tests.bench_fixtures import ROOT, make_mini, params, write_params

SECRET = b"team-secret-0123456789abcdef"
CTX = cellstore.Context(harness="h" * 64, replicate=0, simulator={"noise": "none", "seed": 0, "playbooks": "p"})


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    """Real cell specs of the mini tasks (templates built, no session run)."""
    tmp = tmp_path_factory.mktemp("specs")
    p = params(runs=2)
    side = plan("incumbent", make_mini(tmp), ROOT / "skills", None, p)
    mdl = models.Model("simulator", "claude-sonnet-4-6", "http://127.0.0.1:1")
    return build_cells(side, p.bench, mdl, tmp / "scratch")


def test_the_key_covers_everything_that_can_change_a_cell(specs):
    base = next(c for c in specs if c.arm.name == "workflow" and c.run == 1 and c.task.id == "greet")
    session = base.arm.sessions[0]
    variants = {
        "run": dataclasses.replace(base, run=2),
        "side": dataclasses.replace(base, side="candidate"),
        "skills": dataclasses.replace(base, skills_digest="0" * 64),
        "overlay": dataclasses.replace(base, overlay_digest="1" * 64),
        "template": dataclasses.replace(base, base_commit="2" * 40),
        "task": dataclasses.replace(base, task=dataclasses.replace(base.task, binding={**base.task.binding,
                                                                                        "prompt_sha256": "3" * 64})),
        "arm prompt": dataclasses.replace(base, arm=dataclasses.replace(base.arm, sessions=(
            dataclasses.replace(session, prompt=session.prompt + " "), *base.arm.sessions[1:]))),
        "arm name": dataclasses.replace(base, arm=dataclasses.replace(base.arm, name="other", incumbent="other")),
        "model": dataclasses.replace(base, model=dataclasses.replace(base.model, name="claude-opus-4-6")),
        "effort": dataclasses.replace(base, model=dataclasses.replace(base.model, effort="high")),
        "limits": dataclasses.replace(base,
                                      limits=dataclasses.replace(base.limits, memory_mb=base.limits.memory_mb + 1)),
        "timeout": dataclasses.replace(base, phase_timeout_s=base.phase_timeout_s + 1),
        "retries": dataclasses.replace(base, max_retries=base.max_retries + 1),
        "churn": dataclasses.replace(base, churn_exclude=()),
    }
    keys = {name: cellstore.key(spec, CTX) for name, spec in variants.items()}
    keys["base"] = cellstore.key(base, CTX)
    for field, value in (("harness", "i" * 64), ("replicate", 1), ("simulator", {**CTX.simulator, "seed": 1}),
                         ("simulator", {**CTX.simulator, "playbooks": "q"})):
        keys[f"ctx {field} {value}"] = cellstore.key(base, dataclasses.replace(CTX, **{field: value}))
    assert len(set(keys.values())) == len(keys), keys
    # the simulator's port is chosen per run: it must not change the key
    moved = dataclasses.replace(base, model=dataclasses.replace(base.model, endpoint="http://127.0.0.1:2"))
    assert cellstore.key(moved, CTX) == keys["base"]
    # a real endpoint is part of what was measured
    real = dataclasses.replace(base, model=models.Model("endpoint", "claude-sonnet-4-6", "http://a.invalid"))
    assert cellstore.key(real, CTX) != cellstore.key(
        dataclasses.replace(real, model=dataclasses.replace(real.model, endpoint="http://b.invalid")), CTX)


def test_the_harness_digest_follows_the_bench_code_and_not_the_gate(tmp_path, monkeypatch):
    files = harness.closure(harness.BENCH_SCRIPT)
    assert {"skillevo/bench/cell.py", "skillevo/sandbox/bwrap.py", "skillevo/bench/cellstore.py",
            "skillevo/schemas"} <= files
    assert not any(f.startswith(("skillevo/gate/", "skillevo/apply/")) for f in files)
    for package in ("skillevo",):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(harness, "ROOT", tmp_path)
    before = harness.code_digest.__wrapped__()
    (tmp_path / "skillevo/gate/policy.py").write_text("# another gate\n")
    assert harness.code_digest.__wrapped__() == before
    cell = tmp_path / "skillevo/bench/cell.py"
    cell.write_bytes(cell.read_bytes() + b"\n")
    assert harness.code_digest.__wrapped__() != before
    assert all(v and not v.startswith("unavailable") for v in harness.tool_versions().values()), harness.tool_versions()


def test_a_simulator_edit_leaves_a_real_models_cells_servable_and_keys_simulated_ones(tmp_path, monkeypatch):
    """Issue 31, item 2: the bench's closure holds the simulator (the bench imports it), and every edit of it made
    every stored cell unservable, those paid against a real API too. A cell's key now holds the engine's digest
    (the closure without the simulator), and a simulated cell's the simulator's as well."""
    shutil.copytree(ROOT / "skillevo", tmp_path / "skillevo", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(harness, "ROOT", tmp_path)
    assert "skillevo/simulator/noise.py" in harness.closure(harness.BENCH_SCRIPT)
    engine, simulator = harness.engine_digest.__wrapped__(), harness.simulator_digest.__wrapped__()
    noise = tmp_path / "skillevo/simulator/noise.py"
    noise.write_bytes(noise.read_bytes() + b"# tuned\n")
    assert harness.engine_digest.__wrapped__() == engine  # a real model's cells: still served
    assert harness.simulator_digest.__wrapped__() != simulator  # a simulated cell's key moves with it
    cell = tmp_path / "skillevo/bench/cell.py"
    cell.write_bytes(cell.read_bytes() + b"\n")
    assert harness.engine_digest.__wrapped__() != engine


def test_a_simulated_sides_cells_are_keyed_on_the_simulators_code(tmp_path):
    from skillevo.bench import plan, store_context
    from skillevo.simulator.noise import Noise

    tasks_file = make_mini(tmp_path)
    p = params()
    side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
    ctx = store_context(p, side, Noise.from_params(p.simulator, p.sampling.replicate))
    assert ctx.simulator["code"] == harness.simulator_digest() and ctx.harness == harness.digest()
    assert harness.identity()["code"] == harness.engine_digest() != harness.code_digest()


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A mini incumbent side run once into a store: (tasks file, store, first output)."""
    tmp = tmp_path_factory.mktemp("stored")
    tasks_file = make_mini(tmp)
    p = params(runs=1)
    side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
    run_side(side, p, tmp / "first", quiet=True, store=tmp / "store")
    return tasks_file, tmp / "store", tmp / "first"


def _bench(tasks_file: Path, store: Path, out: Path, runs: int = 1) -> dict:
    p = params(runs=runs)
    run_side(plan("incumbent", tasks_file, ROOT / "skills", None, p), p, out, quiet=True, store=store)
    return json.loads((out / "bench.json").read_text())


@pytest.mark.cli
@pytest.mark.bwrap
def test_a_second_bench_pays_for_nothing_and_more_runs_pay_only_the_new_ones(stored, tmp_path):
    tasks_file, store, first = stored
    assert json.loads((first / "bench.json").read_text())["cell_store"] == {"served": 0, "paid": 6, "stored": 6,
                                                                            "canaries": []}
    again = _bench(tasks_file, store, tmp_path / "again")
    assert again["cell_store"] == {"served": 6, "paid": 0, "stored": 0, "canaries": []}
    assert (tmp_path / "again/results.jsonl").read_bytes() == (first / "results.jsonl").read_bytes()
    more = _bench(tasks_file, _copy_store(store, tmp_path), tmp_path / "more", runs=2)
    assert more["cell_store"] == {"served": 6, "paid": 6, "stored": 6, "canaries": []}
    assert {(r["task"], r["arm"], r["run"]) for r in _rows(tmp_path / "more")} == {
        (t, a, r) for t in ("cheat", "greet") for a in ("auto", "baseline", "workflow") for r in (1, 2)}


def _copy_store(store: Path, tmp_path: Path) -> Path:
    dest = tmp_path / f"store-{len(list(tmp_path.glob('store-*')))}"
    shutil.copytree(store, dest)
    return dest


def _head(store: cellstore.Store, k: str) -> bytes:
    """A stored entry's first line: its format and MAC."""
    return store.path(k).read_bytes().partition(b"\n")[0]


def _entry(store: cellstore.Store, k: str) -> dict:
    return json.loads(gzip.decompress(store.path(k).read_bytes().partition(b"\n")[2]))


def _write(store: cellstore.Store, k: str, entry: dict) -> None:
    """The entry's body replaced under its old first line: an edit made without the key."""
    store.path(k).write_bytes(_head(store, k) + b"\n" + gzip.compress(canonical_json(entry)))


def _tamper(entry: dict, how: str, other: dict) -> dict:
    row, arts = entry["row"], entry["artifacts"]
    if how == "cost":
        row["cost_usd"] = 0.01
    elif how == "artifact":
        path = row["transcripts"][0]["path"]
        arts[path] = base64.b64encode(base64.b64decode(arts[path]) + b" ").decode()
    elif how == "extra artifact":
        arts["transcripts/../../escape"] = base64.b64encode(b"x").decode()
    elif how == "material":
        entry["material"]["harness"] = "0" * 64
    elif how == "other cell":
        entry["row"], entry["artifacts"] = other["row"], other["artifacts"]
    elif how == "expired":
        row["recorded_at"] = (datetime.now(UTC) - timedelta(days=91)).isoformat(timespec="seconds")
    elif how == "future":
        row["recorded_at"] = (datetime.now(UTC) + timedelta(days=1)).isoformat(timespec="seconds")
    elif how == "excluded":
        row.update(error_kind="session-error", error_detail="api down", resolved=False)
    elif how == "schema":
        row["resolved"] = "yes"
    return entry


@pytest.mark.cli
@pytest.mark.bwrap
@pytest.mark.parametrize("how", ["cost", "artifact", "extra artifact", "material", "other cell", "expired", "future",
                                 "excluded", "schema", "garbage", "symlink", "bomb", "renamed"])
def test_an_entry_that_is_not_what_it_says_is_never_served(stored, tmp_path, how, monkeypatch):
    tasks_file, source, _ = stored
    store = cellstore.Store(_copy_store(source, tmp_path))
    p = params(runs=1)
    side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
    mdl = models.Model("simulator", "claude-sonnet-4-6", "http://127.0.0.1:1")
    cells = build_cells(side, p.bench, mdl, tmp_path / "scratch")
    from skillevo.bench import store_context  # noqa: PLC0415
    from skillevo.simulator.noise import Noise  # noqa: PLC0415

    ctx = store_context(p, side, Noise.from_params(p.simulator, 0))
    target = next(c for c in cells if c.task.id == "greet" and c.arm.name == "workflow")
    other = next(c for c in cells if c.task.id == "cheat" and c.arm.name == "auto")
    k, k_other = cellstore.key(target, ctx), cellstore.key(other, ctx)
    assert store.serve(target, ctx, 90).row["task"] == "greet"  # whole, it is served
    if how == "garbage":
        store.path(k).write_bytes(b"\x1f\x8b not really gzip")
    elif how == "symlink":
        store.path(k).unlink()
        store.path(k).symlink_to(store.path(k_other))
    elif how == "bomb":
        monkeypatch.setattr(cellstore, "MAX_EXPANDED_BYTES", 1000)
    elif how == "renamed":
        shutil.copyfile(store.path(k_other), store.path(k))
    else:
        _write(store, k, _tamper(_entry(store, k), how, _entry(store, k_other)))
    with pytest.raises(cellstore.Miss) as refused:
        store.serve(target, ctx, 90)
    assert str(store.path(k)) in str(refused.value) and "rule" in str(refused.value), refused.value
    if how == "cost":  # and a bench then pays for exactly that cell again
        out = _bench(tasks_file, store.root, tmp_path / "out")
        assert out["cell_store"] == {"served": 5, "paid": 1, "stored": 1, "canaries": []}


def test_faults_are_never_stored(tmp_path, specs):
    store = cellstore.Store(tmp_path / "store")
    row = {"error_kind": "session-error", "recorded_at": "2026-01-01T00:00:00+00:00"}
    from skillevo.bench import CellResult  # noqa: PLC0415

    for kind in sorted(cellstore.EXCLUDED_ERROR_KINDS):
        assert store.put("a" * 64, {}, CellResult({**row, "error_kind": kind})) is False
    assert list(store.keys()) == []


@pytest.mark.cli
@pytest.mark.bwrap
def test_gc_removes_only_what_can_never_be_served(stored, tmp_path):
    tasks_file, source, _ = stored
    store = cellstore.Store(_copy_store(source, tmp_path))
    keys = sorted(store.keys())
    _write(store, keys[0], _tamper(_entry(store, keys[0]), "expired", {}))
    store.path(keys[1]).write_bytes(b"damaged")
    stale = store.path(keys[2]).with_name(f".{keys[2]}.json.gz.abc.tmp")
    stale.write_bytes(b"half")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    counts = store.gc(90)
    assert counts == {"kept": 4, "damaged": 1, "expired": 1, "other_harness": 0, "temporary": 1}
    assert sorted(store.keys()) == keys[2:]
    # entries of this checkout's harness survive an --other-harness gc; entries of another do not
    assert store.gc(90, harness_digest="0" * 64)["other_harness"] == 4
    assert list(store.keys()) == []


@pytest.mark.cli
@pytest.mark.bwrap
def test_push_and_pull_through_the_dvc_remote(stored, tmp_path):
    _, source, _ = stored
    repo = tmp_path / "repo"
    repo.mkdir()
    dvc = [str(Path(sys.executable).with_name("dvc"))]
    subprocess.run([*dvc, "init", "--no-scm", "-q"], cwd=repo, check=True)
    subprocess.run([*dvc, "remote", "add", "-d", "shared", str(tmp_path / "remote")], cwd=repo, check=True)
    unkeyed = cellstore.Store(_copy_store(source, tmp_path))
    fs, base = cellstore.remote(repo, None, "push")
    assert base.endswith("/skillevo-cells")
    assert cellstore.push(unkeyed, fs, base, quiet=True) == (0, 6)  # no team key: nothing a teammate could vouch for
    mine = cellstore.Store(unkeyed.root, SECRET)
    for k in list(unkeyed.keys()):  # the same cells, stored under the team key
        entry = unkeyed.read(k)
        assert mine.put(k, entry["material"], CellResult(entry["row"], entry["artifacts"]), replace=True)
    assert cellstore.push(mine, fs, base, quiet=True) == (6, 0)
    assert cellstore.push(mine, fs, base, quiet=True) == (0, 0)  # entries never change: nothing to send twice
    # a forged entry on the remote is dropped on the way in: edited, and one re-checked whole but unkeyed
    forged, unsigned = sorted(mine.keys())[:2]
    remote_path = Path(base) / cellstore.ENTRIES / forged[:2] / f"{forged}{cellstore.SUFFIX}"
    remote_path.write_bytes(_head(mine, forged) + b"\n"
                            + gzip.compress(canonical_json(_tamper(_entry(mine, forged), "cost", {}))))
    (Path(base) / cellstore.ENTRIES / unsigned[:2] / f"{unsigned}{cellstore.SUFFIX}").write_bytes(
        cellstore.encode(unsigned, _entry(mine, unsigned), None))
    assert cellstore.pull(cellstore.Store(tmp_path / "nokey"), *cellstore.remote(repo, None, "pull"),
                          quiet=True) == (0, 6)  # without the key, nothing is fetched
    theirs = cellstore.Store(tmp_path / "theirs", SECRET)
    fetched, dropped = cellstore.pull(theirs, *cellstore.remote(repo, None, "pull"), quiet=True)
    assert (fetched, dropped) == (4, 2)
    assert sorted(theirs.keys()) == sorted(set(mine.keys()) - {forged, unsigned})
    assert all(theirs.path(k).read_bytes() == mine.path(k).read_bytes() for k in theirs.keys())


def _stage(tasks_file: Path, params_file: Path, store: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "skillevo.stages.bench", "--side", "incumbent", "--tasks", str(tasks_file),
            "--skills", str(ROOT / "skills"), "--params", str(params_file), "--store", str(store), "--out", str(out)]


@pytest.mark.cli
@pytest.mark.bwrap
@pytest.mark.parametrize("after", [1, 4])
def test_a_bench_killed_with_sigkill_resumes_paying_for_no_finished_cell(tmp_path, after):
    tasks_file = make_mini(tmp_path)
    params_file = write_params(tmp_path / "params.yaml", runs=2, workers=2)
    store, out = tmp_path / "store", tmp_path / "results/bench-incumbent"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(_stage(tasks_file, params_file, store, out), cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while sum(1 for _ in cellstore.Store(store).keys()) < after and time.monotonic() < deadline:
        assert proc.poll() is None, "the bench ended before it could be killed"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = set(cellstore.Store(store).keys())
    assert len(finished) >= after
    assert not out.exists()  # nothing half-written where DVC looks: the side was being staged beside it
    done = subprocess.run(_stage(tasks_file, params_file, store, out), cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    bench = json.loads((out / "bench.json").read_text())
    assert bench["cell_store"]["served"] == len(finished)  # every finished cell served, none paid again
    assert bench["cell_store"]["paid"] == 12 - len(finished)
    rows = _rows(out)
    assert len(rows) == 12 == len({(r["task"], r["arm"], r["run"]) for r in rows})
    assert not list(out.parent.glob(".bench-incumbent.staging-*"))  # the killed bench's staging was cleared


def test_a_cell_never_stored_is_a_quiet_miss(tmp_path, specs):
    """The bench names every refused entry, but not a cell that simply has not run yet (one line per cell)."""
    with pytest.raises(cellstore.Miss) as missed:
        cellstore.Store(tmp_path / "store").serve(specs[0], CTX, 90)
    assert str(missed.value) == cellstore.NOT_STORED


def test_a_real_backends_bench_propose_and_check_import_no_simulator():
    """Issue 31, item 2: the simulator is one backend, imported where params choose it and nowhere else (the bench,
    the propose stage, check and the backends registry imported it on every run)."""
    code = ("import sys\n"
            "import skillevo.bench.api, skillevo.stages.bench, skillevo.stages.propose, skillevo.readiness\n"
            "import skillevo.backends, skillevo.ops.one_cell\n"
            "from skillevo import backends\n"
            "from skillevo.core import models\n"
            "model = models.Model('anthropic', 'claude-sonnet-4-6', 'https://api.anthropic.com')\n"
            "backends.session_endpoint(model, backends.SessionRef('t', 'a', 1, 1, 'm', 0))\n"
            "print(' '.join(m for m in sys.modules if m.startswith('skillevo.simulator')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert loaded.stdout.split() == [], loaded.stdout
