"""Run bench cells as Ray tasks: the same `run(cells, on_result, cancel)` as LocalExecutor, on a cluster.

Each cell is one Ray task, `skillevo_cell(spec, stop_file)`, that calls `run_cell` on whichever node offers the
cell's resources (`bench.ray_cell_resources`; the custom resource `skillevo_sandbox` is how a node says
it has bwrap, socat and the pinned CLI). The task returns the CellResult — the row and its artifact
bytes, bounded — and the driver hands it to `on_result` exactly as the local executor does, so
results.jsonl, transcripts and patches are written by the same code.

- A worker lost mid-cell (killed, OOM, node gone) is retried by Ray up to `bench.ray_max_retries`
  times; when the tries are used up the cell becomes an infra-error row, never a gap.
- Cancellation (Ctrl-C) stops queued and running cells through a file in the (shared) scratch
  directory; running ones tear their sandboxes down as a cancelled local cell does. Whatever has not
  stopped within a grace period ends with the job (ray.shutdown kills its workers).
- The credential (an API key or a gateway's bearer token) travels only in the job's runtime environment,
  under the variable it was read from (`ANTHROPIC_API_KEY` or `ANTHROPIC_AUTH_TOKEN` on the workers, the
  other emptied, set at `ray.init`, and only when there is one) or in the workers' own environment (a local
  instance's workers inherit this process's): never in a task's arguments, and never in a row or artifact.
  A worker reads it with skillevo.core.models.credential(), the same rule as the driver.
- Behind a gateway backend (openai, litellm) each node runs its own proxy (skillevo.bench.ray_gateway), which
  alone holds the provider's key; a cell sends its node proxy's per-run key.
- A cell's spec holds paths on the driver's machine (its template and scratch directory). Remote
  workers need the same paths (a shared filesystem, or the project image with the checkout mounted at
  the same place); a worker without them, or without the sandbox's prerequisites, stops the run with
  a message that says so.

Ray rewrites a loopback address (127.0.0.1, localhost) into the machine's interface address and then
listens there. The executor turns that rewrite off while it connects, so a local instance, or a
one-machine cluster started with `python -m skillevo.bench.ray_executor start ...` (Ray's own CLI with
the same rewrite off), keeps every socket on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from skillevo.bench import ray_gateway
from skillevo.bench.cell import CellResult, CellSpec, infra_error, run_cell
from skillevo.bench.executor import OnResult
from skillevo.core import models
from skillevo.core.config import BenchParams
from skillevo.files.errors import BrokenEnvironment

log = logging.getLogger(__name__)

SANDBOX_RESOURCE = "skillevo_sandbox"
MAX_RESULT_BYTES = 64 << 20  # a cell's artifacts, all together (each is already bounded by the cell)
CANCEL_GRACE_S = 20.0  # a cancelled cell stops its sandboxes within a few seconds; then it is killed
LOCAL_OBJECT_STORE_BYTES = 256 << 20
_BUILTIN = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}
# a local instance turns on Ray's token auth (RAY_AUTH_MODE, token in ~/.ray/auth_token) for the process;
# the credential is set for the instance's processes to inherit
_ENV_RAY_SETS = ("RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED", *models.CREDENTIAL_ENVS)


class RayExecutorError(BrokenEnvironment):
    """The run cannot go on (no node offers the resources, a worker lacks the cell's paths...)."""


class NodeUnfit(BrokenEnvironment):
    """Raised on a worker that cannot run cells at all; the driver stops the run with this message."""


# --- on the worker --------------------------------------------------------------------------------------

_prerequisites_ok = False


def _check_node(spec: CellSpec) -> None:
    global _prerequisites_ok
    where = f"Ray worker on {socket.gethostname()}"
    for what, path in (("cell template", spec.template), ("scratch directory", spec.scratch)):
        if not path.is_dir():
            raise NodeUnfit(f"{where} has no {what} {path}: Ray workers need the driver's paths (a shared "
                            "filesystem, or the project image with the checkout and the bench scratch directory "
                            "mounted at the same paths; see docs/ray.md)")
    if not _prerequisites_ok:
        from skillevo import sandbox  # noqa: PLC0415 - only workers need these checks
        from skillevo.agent import cli  # noqa: PLC0415

        try:
            sandbox.preflight()
            cli.locate()
        except (sandbox.SandboxUnavailable, cli.CLIMissing) as e:
            raise NodeUnfit(f"{where} cannot run cells: {e}") from None
        _prerequisites_ok = True


def _credential(spec: CellSpec) -> models.Credential | None:
    """The credential comes from this worker's environment (the job's runtime_env puts the driver's there)."""
    return None if spec.model.simulated else models.credential()


def skillevo_cell(spec: CellSpec, stop_file: str, gateway_run: str | None = None) -> CellResult | None:
    """The Ray task: one cell, run in a thread and stopped the way a local cell stops (sandboxes torn
    down, scratch removed) once the driver creates `stop_file` in the shared scratch directory, or on
    Ray's own cancellation (a KeyboardInterrupt here). A cell stopped before it started returns None; one stopped
    while it ran returns its `cancelled` row. `gateway_run`: the run whose node proxies the sessions go to."""
    stop = Path(stop_file)
    if stop.exists():
        return None
    _check_node(spec)
    credential = _credential(spec)
    if gateway_run is not None:
        try:
            spec, credential = ray_gateway.on_node(spec, gateway_run)
        except LookupError as e:
            raise NodeUnfit(str(e)) from None
    cancel = threading.Event()
    outcome: dict[str, Any] = {}

    def job() -> None:
        try:
            outcome["result"] = run_cell(spec, credential=credential, cancel=cancel)
        except BaseException as e:  # noqa: BLE001 - handed to the task's thread below
            outcome["error"] = e

    thread = threading.Thread(target=job, name=f"cell-{spec.name}", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.2)
            if not cancel.is_set() and stop.exists():
                cancel.set()
    except KeyboardInterrupt:
        cancel.set()
        thread.join(CANCEL_GRACE_S / 2)
        raise
    if "error" in outcome:
        raise outcome["error"]
    result = outcome["result"]
    size = sum(len(data) for data in result.artifacts.values())
    if size > MAX_RESULT_BYTES:
        return infra_error(spec, f"the cell's artifacts are {size} bytes, over the {MAX_RESULT_BYTES} a Ray "
                                 "task may return")
    return result


# --- on the driver --------------------------------------------------------------------------------------

@contextlib.contextmanager
def keep_loopback() -> Iterator[None]:
    """While connecting, 127.0.0.1/localhost stay loopback instead of becoming this machine's interface
    address (Ray's default, so other machines could reach a head started as `localhost`)."""
    from ray._private import services  # noqa: PLC0415 - ray is optional

    original = services.resolve_ip_for_localhost
    services.resolve_ip_for_localhost = lambda host: host
    try:
        yield
    finally:
        services.resolve_ip_for_localhost = original


class RayExecutor:
    """Cells as Ray tasks on the cluster at `address` (None: a local instance started for this run)."""

    def __init__(self, address: str | None = None, *, max_retries: int, cell_resources: Mapping[str, float],
                 local_workers: int, credential: models.Credential | None = None,
                 gateway: ray_gateway.NodePlan | None = None) -> None:
        """Values come from params bench.* (validated by skillevo.core.config); `gateway`: a proxy on each node."""
        self.address = address or None
        self.max_retries = max_retries
        self.cell_resources = {name: float(amount) for name, amount in cell_resources.items()}
        self.local_workers = local_workers
        self._credential = credential
        self._gateway = gateway

    @classmethod
    def from_params(cls, bench: BenchParams, credential: models.Credential | None = None,
                    gateway: ray_gateway.NodePlan | None = None) -> RayExecutor:
        return cls(bench.ray_address, max_retries=bench.ray_max_retries, cell_resources=bench.ray_cell_resources,
                   local_workers=bench.workers, credential=credential, gateway=gateway)

    # what the task asks of a node, in Ray's terms
    def task_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"max_retries": self.max_retries, "retry_exceptions": False}
        custom = {}
        for name, amount in self.cell_resources.items():
            if name in _BUILTIN:
                options[name] = amount
            else:
                custom[name] = amount
        if custom:
            options["resources"] = custom
        return options

    def init_kwargs(self) -> dict[str, Any]:
        """ray.init's arguments. On a cluster the credential, when there is one, goes only into the job's
        runtime_env; a local instance's workers inherit it from this process's environment instead
        (Ray's runtime-env agent writes every runtime_env it sets up into its log file)."""
        # "local": always a new instance for this run, never whatever `ray start` left running here
        kwargs: dict[str, Any] = {"address": self.address or "local", "log_to_driver": False,
                                  "namespace": "skillevo"}
        if self._credential and self.address is not None:
            kwargs["runtime_env"] = {"env_vars": self._credential.environ()}
        if self.address is None:  # a local instance sized like LocalExecutor(bench.workers), on loopback only
            demand = {_BUILTIN.get(n, n): a * self.local_workers for n, a in self.cell_resources.items()}
            kwargs.update(num_cpus=math.ceil(max(demand.pop("CPU", 0), 1)), include_dashboard=False,
                          object_store_memory=LOCAL_OBJECT_STORE_BYTES, _node_ip_address="127.0.0.1")
            if "GPU" in demand:
                kwargs["num_gpus"] = math.ceil(demand.pop("GPU"))
            demand.pop("memory", None)
            kwargs["resources"] = demand
        return kwargs

    def _connect(self, ray: Any) -> None:
        """Connect, or start a local instance; a connection made before the bench is used as it is."""
        if ray.is_initialized():
            if self._credential:
                log.warning("ray was initialized before the bench: the credential must come from the workers' "
                            "own environment (%s)", self._credential.env)
            return
        self._check_reachable()
        if self.address is None:
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # offline: no usage reports
            if self._credential:  # the instance's processes start with this environment
                os.environ.update(self._credential.environ())
            if self._gateway:  # the nodes' proxies too (on a cluster, their own runtime_env carries it)
                os.environ.update(self._gateway.environ)
        # ray.init replaces the SIGTERM handler with sys.exit; the bench's own (cancel, keep finished
        # cells, exit 130) stays in charge
        main = threading.current_thread() is threading.main_thread()
        sigterm = signal.getsignal(signal.SIGTERM) if main else None
        try:
            with keep_loopback():
                ray.init(**self.init_kwargs())
        except ConnectionError as e:
            raise RayExecutorError(f"cannot reach the Ray cluster at {self.address} (bench.ray_address): {e}") from None
        finally:
            if sigterm is not None:
                signal.signal(signal.SIGTERM, sigterm)

    def _check_reachable(self) -> None:
        """A wrong host:port fails now, not after Ray's minutes of reconnecting."""
        if self.address is None or self.address == "auto" or "://" in self.address:
            return
        host, _, port = self.address.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
        except (OSError, ValueError) as e:
            raise RayExecutorError(f"no Ray cluster answers at {self.address} (bench.ray_address): {e}") from None

    def _check_capacity(self, ray: Any) -> list[str]:
        """The nodes that can run cells (their IDs); none stops the run, saying what to start."""
        need = {_BUILTIN.get(n, n): a for n, a in self.cell_resources.items() if a > 0}
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        fit = [n for n in nodes if all(n.get("Resources", {}).get(r, 0) >= a for r, a in need.items())]
        if not fit:
            wanted = ", ".join(f"{r}={a:g}" for r, a in sorted(need.items()))
            raise RayExecutorError(
                f"no node of the Ray cluster ({len(nodes)} alive) offers {wanted} (bench.ray_cell_resources): start "
                f"the workers that have bwrap, socat and the pinned CLI with `ray start ... --resources="
                f"'{{\"{SANDBOX_RESOURCE}\": <cells at once>}}'` (see docs/ray.md)")
        log.info("ray: %d of %d node(s) can run cells", len(fit), len(nodes))
        return [n["NodeID"] for n in fit]

    def _submit(self, task: Any, cell: CellSpec, stop_file: str, gateway_run: str | None = None) -> Any:
        return task.remote(cell, stop_file, gateway_run)

    @staticmethod
    def _stop_file(cell: CellSpec, run_id: str) -> str:
        return str(cell.scratch / f".skillevo-ray-stop-{run_id}")

    def _collect(self, ray: Any, ref: Any, cell: CellSpec) -> CellResult | None:
        try:
            return ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            return None
        except ray.exceptions.RayTaskError as e:
            if isinstance(getattr(e, "cause", None), NodeUnfit):
                raise RayExecutorError(str(e.cause)) from None
            return infra_error(cell, f"the Ray task failed: {type(getattr(e, 'cause', e)).__name__}: "
                                     f"{getattr(e, 'cause', e)}")
        except ray.exceptions.RayError as e:  # the worker or its node was lost on every try
            detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
            return infra_error(cell, f"the Ray worker running this cell was lost on all {self.max_retries + 1} "
                                     f"tries ({type(e).__name__}): {detail}")

    def _stop(self, ray: Any, pending: dict[Any, CellSpec], run_id: str, *, force: bool) -> dict[Any, CellSpec]:
        """Stop outstanding cells through a file in their scratch directory: queued ones return at once,
        running ones stop as a cancelled local cell does. (Not ray.cancel: in Ray 2.60 a cancel that
        meets a task's completion can abort the driver, task_manager.cc "task that was not pending".) Returns the
        cells that ended within the grace period."""
        stop_files = {Path(self._stop_file(cell, run_id)) for cell in pending.values()}
        for stop_file in stop_files:
            with contextlib.suppress(OSError):
                stop_file.touch()
        try:
            ready, stuck = ray.wait(list(pending), num_returns=len(pending), timeout=CANCEL_GRACE_S)
            if force:  # a connection made before the bench: its job goes on, so end the stragglers here
                for ref in stuck:
                    ray.cancel(ref, force=True)
        finally:
            for stop_file in stop_files:
                with contextlib.suppress(OSError):
                    stop_file.unlink()
        return {ref: pending[ref] for ref in ready}

    def run(self, cells: Sequence[CellSpec], on_result: OnResult, cancel: threading.Event) -> None:
        try:
            import ray  # noqa: PLC0415 - the optional extra
        except ImportError:
            raise RayExecutorError("bench.executor is ray, but Ray is not installed: pip install -e '.[ray]'") from None

        sets = (*_ENV_RAY_SETS, *(self._gateway.environ if self._gateway else ()))
        env = {name: os.environ.get(name) for name in sets}
        owned = not ray.is_initialized()
        run_id = uuid.uuid4().hex
        pending: dict[Any, CellSpec] = {}
        gateways: dict[str, Any] = {}
        try:
            self._connect(ray)
            nodes = self._check_capacity(ray)
            if self._gateway is not None:
                gateways = ray_gateway.start(ray, self._gateway, nodes, run_id, on_cluster=self.address is not None)
            gateway_run = run_id if self._gateway is not None else None
            task = ray.remote(skillevo_cell).options(**self.task_options())
            pending = {self._submit(task, cell, self._stop_file(cell, run_id), gateway_run): cell for cell in cells}
            while pending:
                if cancel.is_set():
                    break
                ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0.2)
                for ref in ready:
                    cell = pending.pop(ref)
                    result = self._collect(ray, ref, cell)
                    if result is not None:
                        on_result(cell, result)
        finally:
            try:
                if pending:
                    for ref, cell in self._stop(ray, pending, run_id, force=not owned).items():
                        with contextlib.suppress(RayExecutorError):  # the run is ending for a reason already
                            result = self._collect(ray, ref, cell)
                            if result is not None:  # it ran until the stop: its cancelled row is kept
                                on_result(cell, result)
            finally:
                try:
                    if gateways:
                        ray_gateway.stop(ray, gateways)
                finally:
                    self._release(ray, owned, env)

    @staticmethod
    def _release(ray: Any, owned: bool, env: dict[str, str | None]) -> None:
        if owned:
            ray.shutdown()  # ends whatever is left of the job; stops a local instance (even half-started)
            for name, value in env.items():  # what connecting set for this run only
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def main(argv: list[str] | None = None) -> int:
    """`ray` (start, stop, status...) with 127.0.0.1 kept as 127.0.0.1, for a one-machine cluster:

        python -m skillevo.bench.ray_executor start --head --node-ip-address=127.0.0.1 --port=6380 ...
    """
    from ray.scripts.scripts import main as ray_main  # noqa: PLC0415

    sys.argv = ["ray", *(sys.argv[1:] if argv is None else argv)]
    with keep_loopback():
        return ray_main()


if __name__ == "__main__":
    sys.exit(main())
