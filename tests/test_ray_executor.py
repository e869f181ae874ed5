"""The Ray executor on a real two-node Ray cluster on 127.0.0.1 (a head and one more node, started here).

Rows equal the local executor's in every field but timings and session ids; a worker killed mid-cell is
retried, or kept as an infra-error row once its tries are used up; the key travels only in the job's
runtime environment; nothing Ray starts listens or connects anywhere but loopback.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import ipaddress
import json
import os
import pickle
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import pytest

try:
    import ray
except ImportError as e:  # no skip: without the `ray` extra every test here fails, as CI must notice
    ray, RAY_MISSING = None, f"Ray is not installed ({e}): pip install -e '.[ray]'"

from skillevo.backends import gateway
from skillevo.bench import RayExecutor, RayExecutorError, build_cells, plan, ray_executor, ray_gateway, run_side
from skillevo.core import config, models
from skillevo.core.models import Model
from skillevo.files.digests import canonical_json, sha256_bytes
from skillevo.files.errors import BrokenEnvironment
from skillevo.files.schemas import validate
from skillevo.simulator import Simulator, demo, load_all
from tests.bench_fixtures import ROOT, make_mini, params, params_doc
from tests.conftest import carrying, cmdline, process_tree, session_processes
from tests.gateway import BearerGateway

pytestmark = [pytest.mark.ray, pytest.mark.cli, pytest.mark.bwrap]
TASKS = ROOT / "tasks/tasks.yaml"
CELL_TITLE = "ray::skillevo_cell"
# timings, and what names a session (transcript paths carry the session id: their count is compared)
UNCOMPARABLE = ("wall_s", "duration_s", "phases", "session_ids", "transcripts", "recorded_at",
                "started_at")  # when a run started: a clock reading, never the same twice
KEY = "skillevo-planted-credential-5b0e7c1d9a"  # no known key pattern: redaction could not hide a leak


# --- processes and sockets ------------------------------------------------------------------------------

def _cluster_pids(marker: str) -> set[int]:
    """Every process of the cluster: those started with its temp dir in their command line, and theirs."""
    return process_tree(carrying(marker))


def _loopback(endpoint: str) -> bool:
    host = endpoint.rsplit(":", 1)[0].strip("[]").split("%")[0]
    if host == "*":
        return False
    addr = ipaddress.ip_address(host)
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return str(addr) in ("127.0.0.1", "::1")


def _sockets(pids: set[int]) -> list[tuple[str, str, str, str]]:
    """(state, local, peer, owner) of every TCP/UDP socket of `pids` (what this test started, nothing else)."""
    out = subprocess.run(["ss", "-H", "-t", "-u", "-a", "-n", "-p"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 7 or fields[1] == "TIME-WAIT":
            continue
        owners = re.findall(r'\("([^"]*)",pid=(\d+)', line)
        if any(int(pid) in pids for _, pid in owners):
            found.append((fields[1], fields[4], fields[5], " ".join(f"{n}/{p}" for n, p in owners)))
    return found


class SocketWatch(threading.Thread):
    """Polls `ss` while a bench runs: every socket of the cluster, the driver or a cell must be loopback."""

    def __init__(self, marker: str | None) -> None:
        super().__init__(daemon=True)
        self.marker, self.stop, self.bad = marker, threading.Event(), set()
        self.listening: set[str] = set()
        # processes an earlier test on this worker left running are not this bench's (xdist: a worker runs many);
        # the cluster's own are always watched, whenever they started
        self.before = process_tree({os.getpid()}) - {os.getpid()} - self._cluster()

    def _cluster(self) -> set[int]:
        return _cluster_pids(self.marker) if self.marker else set()

    def check(self) -> None:
        mine = process_tree({os.getpid()}) - self.before
        for state, local, peer, owner in _sockets(self._cluster() | mine):
            if state in ("LISTEN", "UNCONN"):
                self.listening.add(owner.split("/")[0])
                if not _loopback(local):
                    self.bad.add(f"{owner} listens on {local}")
            elif not (_loopback(local) and _loopback(peer)):
                self.bad.add(f"{owner} connects {local} -> {peer}")

    def run(self) -> None:
        while not self.stop.wait(0.5):
            self.check()

    def __enter__(self) -> SocketWatch:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join()


class Killer(threading.Thread):
    """SIGKILLs the first Ray worker seen running a cell whose agent session is under way."""

    def __init__(self, marker: str) -> None:
        super().__init__(daemon=True)
        self.marker, self.stop, self.killed = marker, threading.Event(), []

    def run(self) -> None:
        while not self.stop.wait(0.05) and not self.killed:
            for pid in _cluster_pids(self.marker):
                if not cmdline(pid).startswith(CELL_TITLE):
                    continue
                for child in process_tree({pid}) - {pid}:
                    # the session must be alive at the kill itself: a worker caught starting its next sandbox
                    # would orphan it (bwrap's --die-with-parent is armed only once bwrap runs)
                    if "/opt/claude/claude" in cmdline(child):
                        os.kill(pid, signal.SIGKILL)
                        self.killed.append(pid)
                        return

    def __enter__(self) -> Killer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join()


# --- the cluster ----------------------------------------------------------------------------------------

@dataclasses.dataclass
class Cluster:
    address: str
    temp_dir: str


# Ray's fixed defaults (ray_constants: GCS, dashboard, dashboard agent; Ray Client's server)
RAY_DEFAULT_PORTS = {6379, 8265, 52365, 10001}


def _free_port() -> int:
    """A free loopback port that is none of Ray's fixed defaults: the kernel hands out 52365 (the dashboard
    agent's default, inside the ephemeral range) now and then, and Ray refuses a GCS port equal to it (CI)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in RAY_DEFAULT_PORTS:
            return port


def _die_with_this_process() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _ray_node(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """`ray start --block` (Ray's CLI with 127.0.0.1 kept as given; Ray would swap in the interface address
    and listen there). It dies with this process, and Ray's reaper then takes the node's processes along."""
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "skillevo.bench.ray_executor", "start", "--block", *args],
                                env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_die_with_this_process)
    deadline = time.monotonic() + 120
    while b"Ray runtime started" not in log.read_bytes():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    return proc


@pytest.fixture(scope="module", autouse=True)
def ray_auth():
    """Ray's token auth, with a token of this module's own (nothing read from or written to ~/.ray)."""
    if ray is None:
        pytest.fail(RAY_MISSING)
    from ray._raylet import Config  # noqa: PLC0415 - Ray reads RAY_AUTH_MODE when imported; re-read it

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "token")
        mp.setenv("RAY_AUTH_TOKEN", secrets.token_hex(32))
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        Config.initialize("")
        yield
    Config.initialize("")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    temp = tmp_path_factory.mktemp("ray")
    if len(str(temp)) > 40:  # Ray puts Unix sockets ~70 bytes below it; their paths must stay under 107
        temp = Path(tempfile.mkdtemp(prefix="skr-"))
    # a credential may come only from the job
    env = {k: v for k, v in os.environ.items() if k not in models.CREDENTIAL_ENVS}
    port = _free_port()
    node = ["--node-ip-address=127.0.0.1", f"--temp-dir={temp}", "--num-cpus=1", "--object-store-memory=100000000",
            "--disable-usage-stats", f"--resources={json.dumps({ray_executor.SANDBOX_RESOURCE: 1})}"]
    nodes = []
    try:
        nodes.append(_ray_node(["--head", f"--port={port}", "--include-dashboard=false", "--dashboard-host=127.0.0.1",
                                *node], env, temp / "head.log"))
        nodes.append(_ray_node([f"--address=127.0.0.1:{port}", *node], env, temp / "node.log"))
        watch = SocketWatch(str(temp))
        with socket.socket() as probe:  # the watch sees a socket that is not on loopback (never connected to)
            probe.bind(("0.0.0.0", 0))
            probe.listen()
            watch.check()
            assert any(f"listens on 0.0.0.0:{probe.getsockname()[1]}" in bad for bad in watch.bad), watch.bad
        watch.bad.clear()
        watch.check()
        assert not watch.bad, watch.bad
        assert {"gcs_server", "raylet"} <= watch.listening, watch.listening
        yield Cluster(f"127.0.0.1:{port}", str(temp))
    finally:
        # stop exactly this cluster (`ray stop` would stop every Ray on the machine): each node's `ray start
        # --block` stops its processes on SIGTERM; whatever is left of the cluster is killed
        for proc in reversed(nodes):
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        pids = _cluster_pids(str(temp)) - {os.getpid()}
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.1)
        shutil.rmtree(temp, ignore_errors=True)


def _ray_doc(cluster: Cluster, runs: int = 1, **bench) -> dict:
    return params_doc(runs=runs, bench={"executor": "ray", "ray_address": cluster.address, **bench})


def _ray_params(cluster: Cluster, runs: int = 1, **bench) -> config.Params:
    return config.parse(_ray_doc(cluster, runs, **bench))


def _executor(address: str | None, **bench) -> RayExecutor:
    """A RayExecutor as the bench makes it, from the project's bench params with `bench` changed."""
    return RayExecutor.from_params(dataclasses.replace(params().bench, ray_address=address, **bench))


def _scratch(tmp_path: Path) -> Path:
    """The cells' scratch: every sandbox of the test names it, so leftovers are found among other tests'."""
    path = tmp_path / "scratch"
    path.mkdir(exist_ok=True)
    return path


def _sessions_left(tmp_path: Path) -> list[str]:
    """Sandboxes of this test still alive after a moment (a killed worker's go with it, not at once)."""
    deadline = time.monotonic() + 10
    while session_processes(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [f"{line} [parent {_parent(int(line.split(':')[0]))}]" for line in session_processes(str(tmp_path))]


def _reap_sandboxes_of_killed_workers(tmp_path: Path) -> None:
    """A SIGKILLed worker's sandbox should go with it. Sometimes the sandbox's PID-1 (bwrap) and its relay
    socat outlive it (the sandbox layer kills that init from its host process, which was just killed):
    a flaw of the sandbox layer, not of the executor. Reported as a warning and cleaned up here."""
    left = _sessions_left(tmp_path)
    for line in left:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
    if left:
        warnings.warn(f"sandbox processes outlived their killed Ray worker: {left}", stacklevel=2)


def _parent(pid: int) -> str:
    try:
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return "?"
    return f"{ppid}: {cmdline(ppid)[:80]}"


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def _comparable(row: dict) -> dict:
    return {**{k: v for k, v in row.items() if k not in UNCOMPARABLE},
            "transcripts": len(row["transcripts"]), "session_ids": len(row["session_ids"]),
            "verify_tail": re.sub(r" in [0-9.]+s\b", " in <t>s", row["verify_tail"])}  # pytest's own timing


def _shape(out: Path, rows: list[dict]) -> set[str]:
    """The side's files, session ids taken out of transcript names."""
    names = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    for row in rows:
        for sid in row["session_ids"]:
            names = {n.replace(sid, "<session>") for n in names}
    return names


# --- the tests ------------------------------------------------------------------------------------------

def test_demo_side_on_ray_equals_the_local_executor(cluster, demo_incumbent, tmp_path):
    local_out, local_rows = demo_incumbent
    out = tmp_path / "ray"
    doc = _ray_doc(cluster)
    doc["simulator"]["noise"] = "none"  # as demo_incumbent ran
    p = config.parse(doc)
    with SocketWatch(cluster.temp_dir) as watch:
        rows = run_side(plan("incumbent", TASKS, ROOT / "skills", None, p), p, out,
                        quiet=True, scratch_root=_scratch(tmp_path))  # bench.executor: ray: the Ray executor
    watch.check()
    assert not watch.bad, watch.bad
    assert "ray::skillevo_cell" in watch.listening or "ray::IDLE" in watch.listening, watch.listening

    assert len(rows) == len(local_rows) == 12  # 4 tasks x (workflow, auto, baseline)
    assert [_comparable(r) for r in rows] == [_comparable(r) for r in local_rows]
    assert _rows(out) == rows
    assert _shape(out, rows) == _shape(local_out, local_rows)
    for row, local in zip(rows, local_rows, strict=True):
        assert (out / row["patch"]["path"]).read_bytes() == (local_out / local["patch"]["path"]).read_bytes()
        for art in row["transcripts"]:
            assert sha256_bytes((out / art["path"]).read_bytes()) == art["sha256"]
    bench, local_bench = (json.loads((d / "bench.json").read_text()) for d in (out, local_out))
    assert bench.pop("results_sha256") == sha256_bytes((out / "results.jsonl").read_bytes())  # rows hold timings
    assert local_bench.pop("results_sha256") == sha256_bytes((local_out / "results.jsonl").read_bytes())
    assert bench == local_bench
    assert not _sessions_left(tmp_path)


def _mini_side(tmp_path: Path, p: dict, tasks: int | None = None):
    tasks_file = make_mini(tmp_path)
    side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
    side.tasks = side.tasks[:tasks] if tasks else side.tasks
    side.arms = [a for a in side.arms if not a.is_baseline]
    return side, tasks_file


def test_worker_killed_mid_cell_is_retried_and_the_result_set_is_complete(cluster, tmp_path):
    p = _ray_params(cluster, ray_max_retries=2)
    side, tasks_file = _mini_side(tmp_path, p)
    with Killer(cluster.temp_dir) as killer:
        rows = run_side(side, p, tmp_path / "out", quiet=True,
                        scratch_root=_scratch(tmp_path))
    assert len(killer.killed) == 1 and not Path(f"/proc/{killer.killed[0]}").exists()
    assert len(rows) == 4 and _rows(tmp_path / "out") == rows
    by = {(r["task"], r["arm"]): r for r in rows}
    for arm in ("auto", "workflow"):
        assert by[("greet", arm)]["resolved"] is True, by[("greet", arm)]["error_detail"]
        assert by[("cheat", arm)]["error_kind"] == "oracle-failed"
    _reap_sandboxes_of_killed_workers(tmp_path)


def test_worker_lost_on_every_try_becomes_an_infra_error_row(cluster, tmp_path):
    p = _ray_params(cluster, ray_max_retries=0, max_excluded_pct=100)  # half the side is lost: still kept here
    side, tasks_file = _mini_side(tmp_path, p, tasks=1)
    with Killer(cluster.temp_dir) as killer:
        rows = run_side(side, p, tmp_path / "out", quiet=True,
                        scratch_root=_scratch(tmp_path))
    assert len(killer.killed) == 1
    assert len(rows) == 2
    lost = [r for r in rows if r["error_kind"] == "infra-error"]
    assert len(lost) == 1 and "lost on all 1 tries" in lost[0]["error_detail"], rows
    assert lost[0]["resolved"] is False and lost[0]["recorded_at"]
    assert [r for r in rows if r not in lost][0]["resolved"] is True
    bench = json.loads((tmp_path / "out/bench.json").read_text())
    assert bench["cells"] == bench["rows"] == 2
    _reap_sandboxes_of_killed_workers(tmp_path)


@pytest.mark.parametrize("env", models.CREDENTIAL_ENVS)
def test_api_key_travels_only_in_the_runtime_env(cluster, tmp_path, monkeypatch, env):
    assert "runtime_env" not in RayExecutor.from_params(params().bench).init_kwargs()  # no key (simulator): none sent
    p = params(runs=1)
    side, tasks_file = _mini_side(tmp_path, p, tasks=1)
    side.arms = [a for a in side.arms if a.name == "auto"]
    submitted = []
    original = RayExecutor._submit
    monkeypatch.setattr(RayExecutor, "_submit",
                        lambda self, task, *args: submitted.append(args) or original(self, task, *args))
    scratch = _scratch(tmp_path)
    results = []
    # the endpoint backend against a simulator that refuses any other key (behind a gateway that answers only
    # `Authorization: Bearer` for the token): a resolved row proves the credential arrived, sent as its variable says
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(Simulator(load_all([tasks_file.parent / "playbooks/mini.yaml"]), api_key=KEY)).url()
        gateway = stack.enter_context(BearerGateway(url, KEY)) if env == models.AUTH_TOKEN_ENV else None
        url = gateway.url if gateway else url
        cells = build_cells(side, p.bench, Model("endpoint", demo.MODEL, url), scratch)
        RayExecutor.from_params(dataclasses.replace(p.bench, ray_address=cluster.address),
                                models.Credential(env, KEY)).run(cells, lambda c, r: results.append(r),
                                                                 threading.Event())
    [result] = results
    assert result.row["resolved"] is True and result.row["backend"] == "endpoint", result.row["error_detail"]
    assert gateway is None or (gateway.seen and all(r["authorized"] for r in gateway.seen)), gateway.seen
    assert len(submitted) == 1 and KEY.encode() not in pickle.dumps(submitted)
    assert KEY.encode() not in canonical_json(result.row)
    assert result.artifacts and all(KEY.encode() not in data for data in result.artifacts.values())
    validate(result.row, "result-row.schema.json", "row")
    # Ray's runtime-env agent logs the runtime envs it sets up (README says so): there and nowhere else
    logged = {p.name for p in Path(cluster.temp_dir).rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()}
    assert logged and all(re.fullmatch(r"runtime_env_agent(\.\d+)?\.log", name) for name in logged), logged


def test_a_cluster_that_cannot_run_the_cells_stops_the_run_clearly(cluster, tmp_path):
    p = params(runs=1)
    side, _ = _mini_side(tmp_path, p, tasks=1)
    with Simulator(load_all([tmp_path / "tasks/playbooks/mini.yaml"])) as sim:
        mdl, _ = models.resolve(p.model, sim.url())
        cells = build_cells(side, p.bench, mdl, tmp_path)
        moved = [dataclasses.replace(c, template=Path("/nonexistent/template")) for c in cells]
        with pytest.raises(RayExecutorError, match="has no cell template /nonexistent/template"):
            _executor(cluster.address).run(moved, lambda c, r: None, threading.Event())
        with pytest.raises(RayExecutorError, match="no node of the Ray cluster .* offers"):
            _executor(cluster.address, ray_cell_resources={"num_cpus": 1, "gpu_box": 1}).run(
                cells, lambda c, r: None, threading.Event())
    with pytest.raises(RayExecutorError, match="no Ray cluster answers at 127.0.0.1:1 "):
        _executor("127.0.0.1:1").run(cells, lambda c, r: None, threading.Event())


def test_ctrl_c_cancels_outstanding_cells_and_keeps_the_finished_ones(cluster, tmp_path):
    tasks_file = make_mini(tmp_path)
    (tmp_path / "params.yaml").write_text(json.dumps(_ray_doc(cluster, runs=3)))
    out = tmp_path / "out"
    env = {**os.environ, "TMPDIR": str(_scratch(tmp_path))}  # the side's scratch, so its sandboxes can be found
    proc = subprocess.Popen([sys.executable, "-m", "skillevo.stages.bench", "--side", "incumbent",
                             "--tasks", str(tasks_file), "--skills", str(ROOT / "skills"),
                             "--params", str(tmp_path / "params.yaml"), "--out", str(out)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 120
    staged = tmp_path / f".out.staging-{proc.pid}" / "results.jsonl"  # the side is staged beside --out
    while not (staged.is_file() and staged.read_bytes()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "timeout"
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err
    assert b"interrupted" in err and re.search(rb"bench: +\d+%.*\| *[1-9]\d*/18 ", err), err  # the progress bar
    rows = _rows(out)
    assert 1 <= len(rows) < 18 and not (out / "bench.json").exists()  # 2 tasks x 3 arms x 3 runs
    assert (out / ".partial").is_file()  # published whole, marked: what an interrupted bench kept
    for row in rows:
        validate(row, "result-row.schema.json", "row")
    assert not _sessions_left(tmp_path)
    assert not [pid for pid in _cluster_pids(cluster.temp_dir) if cmdline(pid).startswith(CELL_TITLE)]


def test_a_local_instance_for_the_run_stays_on_loopback_and_goes_away(tmp_path, monkeypatch):
    for name in models.CREDENTIAL_ENVS:
        monkeypatch.delenv(name, raising=False)
    p = params(runs=1, workers=1)  # ray_address: null
    side, _ = _mini_side(tmp_path, p, tasks=1)
    side.arms = [a for a in side.arms if a.name == "auto"]
    results, sessions = [], set()

    def keep(cell, result):
        results.append(result)
        sessions.add(ray._private.worker._global_node.get_session_dir_path())

    # with a key: the instance's workers inherit it from this process, so no runtime_env (nor its log) has it
    with Simulator(load_all([tmp_path / "tasks/playbooks/mini.yaml"]), api_key=KEY) as sim:
        cells = build_cells(side, p.bench, Model("endpoint", demo.MODEL, sim.url()),
                            _scratch(tmp_path))
        with SocketWatch(None) as watch:  # this process's tree: the instance is started from here
            RayExecutor.from_params(p.bench, models.Credential(models.API_KEY_ENV, KEY)).run(cells, keep,
                                                                                          threading.Event())
    watch.check()
    assert not watch.bad, watch.bad
    assert {"gcs_server", "raylet"} <= watch.listening, watch.listening
    assert [r.row["resolved"] for r in results] == [True], results[0].row["error_detail"]
    assert not set(models.CREDENTIAL_ENVS) & set(os.environ)  # set for the instance's processes only
    [session] = sessions
    assert not [p for p in Path(session).rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]

    deadline = time.monotonic() + 30
    while _cluster_pids(Path(session).name) and time.monotonic() < deadline:
        time.sleep(0.2)  # ray.shutdown stops the instance it started
    assert not [cmdline(pid) for pid in _cluster_pids(Path(session).name)]
    shutil.rmtree(session, ignore_errors=True)  # the instance's logs, under Ray's default temp dir


class ProxyWatch(threading.Thread):
    """Polls the cluster's processes while a bench runs: each LiteLLM proxy seen, by the raylet (node) it runs under."""

    def __init__(self, marker: str) -> None:
        super().__init__(daemon=True)
        self.marker, self.stop, self.proxies = marker, threading.Event(), {}

    def _node(self, pid: int) -> int | None:
        while pid > 1:
            if "/raylet/raylet" in cmdline(pid):
                return pid
            try:
                pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                return None
        return None

    def run(self) -> None:
        while not self.stop.wait(0.3):
            for pid in _cluster_pids(self.marker):
                if pid not in self.proxies and "litellm" in cmdline(pid) and "--config" in cmdline(pid):
                    self.proxies[pid] = self._node(pid)

    def __enter__(self) -> ProxyWatch:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join()


@pytest.mark.gateway  # the pinned LiteLLM proxy
def test_a_gateway_backend_sends_each_nodes_cells_to_that_nodes_own_proxy(cluster, tmp_path, monkeypatch):
    """bench.executor ray with model.backend openai (offline: the simulator upstream): each of the two nodes starts its
    own LiteLLM proxy on its loopback, every cell resolves through a proxy, the upstream key is in no task's or
    actor's arguments (only in Ray's runtime-env log, as the anthropic key is), and every proxy goes with the run."""
    tasks_file = make_mini(tmp_path)
    doc = _ray_doc(cluster, runs=2)
    doc["model"].update(backend="openai", name="gpt-5-mini", upstream="simulator")
    p = config.parse(doc)
    side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
    side.tasks, side.arms = side.tasks[:1], [a for a in side.arms if not a.is_baseline]  # greet: the one to resolve
    submitted, actors = [], []
    original = RayExecutor._submit
    monkeypatch.setattr(RayExecutor, "_submit",
                        lambda self, task, *args: submitted.append(args) or original(self, task, *args))
    real_start = ray_gateway.start
    monkeypatch.setattr(ray_gateway, "start", lambda ray_, plan_, *a, **k: actors.append(plan_) or real_start(
        ray_, plan_, *a, **k))
    with SocketWatch(cluster.temp_dir) as watch, ProxyWatch(cluster.temp_dir) as proxies:
        rows = run_side(side, p, tmp_path / "out", quiet=True, scratch_root=_scratch(tmp_path))
    watch.check()
    assert not watch.bad, watch.bad
    assert len(rows) == len(submitted) == 4  # a task x 2 arms x 2 runs
    for row in rows:
        assert row["resolved"] is True and row["backend"] == "openai", row["error_detail"]
        assert row["served_models"] == ["gpt-5-mini"] and row["simulated"] is True and row["cost_usd"] > 0
    # one proxy on each node, under each node's own raylet
    assert len(proxies.proxies) == 2 and len(set(proxies.proxies.values())) == 2, proxies.proxies
    assert None not in proxies.proxies.values()
    [plan_] = actors
    [key] = plan_.environ.values()
    assert key.startswith("sk-skillevo-provider-") and key not in repr(plan_)
    assert key.encode() not in pickle.dumps(submitted) and key.encode() not in pickle.dumps(
        (plan_.params, plan_.upstream_url))  # what the actors are created with
    for f in (tmp_path / "out").rglob("*"):
        assert not f.is_file() or key.encode() not in f.read_bytes(), f
    logged = {f.name for f in Path(cluster.temp_dir).rglob("*") if f.is_file() and key.encode() in f.read_bytes()}
    assert logged and all(re.fullmatch(r"runtime_env_agent(\.\d+)?\.log", name) for name in logged), logged
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() for pid in proxies.proxies) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in proxies.proxies if Path(f"/proc/{pid}").exists()]
    assert not _sessions_left(tmp_path)


@pytest.mark.gateway  # the pinned LiteLLM proxy
def test_a_local_instance_runs_a_gateway_side_and_leaves_no_proxy_and_no_key_behind(tmp_path, monkeypatch):
    """`ray_address: null` with model.backend openai: the instance's one node starts its proxy, inheriting the
    upstream key from this process for the run only; nothing listens off loopback, and nothing stays."""
    tasks_file = make_mini(tmp_path)
    doc = params_doc(runs=1, workers=1, bench={"executor": "ray"})
    doc["model"].update(backend="openai", name="gpt-5-mini", upstream="simulator")
    p = config.parse(doc)
    side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
    side.tasks, side.arms = side.tasks[:1], [a for a in side.arms if a.name == "auto"]
    sessions = set()
    release = RayExecutor._release

    def recording(ray_, owned, env):
        sessions.add(ray_._private.worker._global_node.get_session_dir_path())
        return release(ray_, owned, env)

    monkeypatch.setattr(RayExecutor, "_release", staticmethod(recording))
    before = process_tree({os.getpid()})
    with SocketWatch(None) as watch:
        [row] = run_side(side, p, tmp_path / "out", quiet=True, scratch_root=_scratch(tmp_path))
    watch.check()
    assert not watch.bad, watch.bad
    assert row["resolved"] is True and row["backend"] == "openai", row["error_detail"]
    assert "litellm" in watch.listening, watch.listening  # the node's proxy, on loopback
    assert gateway.SIMULATED_KEY_ENV not in os.environ  # set for the instance's processes only
    deadline = time.monotonic() + 30
    while process_tree({os.getpid()}) - before - {os.getpid()} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [cmdline(pid) for pid in process_tree({os.getpid()}) - before - {os.getpid()}]
    [session] = sessions
    shutil.rmtree(session, ignore_errors=True)  # the instance's logs, under Ray's default temp dir


@pytest.mark.gateway  # the pinned LiteLLM proxy
def test_a_node_whose_proxy_cannot_start_stops_the_run_before_any_cell_saying_why(cluster, tmp_path):
    """A node without the provider's key (the job gave none): its proxy refuses to start, so no cell runs anywhere
    and the run says what the node said; no actor and no proxy stays."""
    p = params(runs=1)
    side, _ = _mini_side(tmp_path, p, tasks=1)
    absent = "SKILLEVO_TEST_ABSENT_PROVIDER_KEY"
    model = config.parse(params_doc(model={"backend": "litellm", "name": "qwen3", "provider_model": "ollama/qwen3",
                                           "key_env": absent, "prices": {"input": 0, "cached_input": 0,
                                                                         "output": 0}})).model
    plan_ = ray_gateway.NodePlan(dataclasses.replace(model), None, {})  # what the driver would have put: nothing
    cells = build_cells(side, p.bench, Model("litellm", "qwen3", ray_gateway.NODE_ENDPOINT), tmp_path)
    ran = []
    with pytest.raises(BrokenEnvironment, match=f"a node's gateway proxy did not start .*{absent} is not set"):
        RayExecutor.from_params(dataclasses.replace(p.bench, ray_address=cluster.address), gateway=plan_).run(
            cells, lambda c, r: ran.append(r), threading.Event())
    assert not ran
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and [p for p in _cluster_pids(cluster.temp_dir) if "litellm" in cmdline(p)]:
        time.sleep(0.2)
    assert not [cmdline(p) for p in _cluster_pids(cluster.temp_dir) if "litellm" in cmdline(p)]
