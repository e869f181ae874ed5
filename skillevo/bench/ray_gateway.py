"""The gateway backends (openai, litellm) on a Ray cluster: each node that runs cells runs its own LiteLLM proxy on
its own loopback, and a cell's sessions go to the proxy of the node it runs on, never across the network.

- A node's proxy is a Ray actor pinned to that node (`NodeGateway`, named for the run and the node), started by
  the driver before the first cell and stopped after the last; its proxy process dies with it.
- The provider's key (or, offline, the simulator's) reaches only those actors, the way the anthropic backend's key
  reaches a cell's worker: in the actor's runtime environment under its own variable on a cluster, inherited from
  this process by a local instance's processes; never in a task's or an actor's arguments, a row or a transcript.
- The proxy's per-run key is minted on the node and handed only to cells on that node (in the actor's reply),
  whose relays send it; the sandbox holds a placeholder, as on one machine (skillevo.backends.gateway).
- Offline (`model.upstream: simulator`) the simulator answers on the driver's loopback: a one-machine cluster only.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from skillevo.backends import gateway
from skillevo.bench.cell import CellSpec
from skillevo.core import models
from skillevo.core.config import ModelParams
from skillevo.core.models import AUTH_TOKEN_ENV, Credential, Model
from skillevo.files.errors import BrokenEnvironment

NODE_ENDPOINT = "http://node-gateway.invalid"  # a cell's base URL until the node it runs on gives its proxy's
READY_TIMEOUT_S = gateway.READY_TIMEOUT_S + 60  # the actor's worker starts first
_endpoints: dict[str, tuple[str, str]] = {}  # per worker process: the actor name -> its proxy's URL and key


@dataclass(frozen=True)
class NodePlan:
    """What each node's proxy is started from: the model section (no secret in it) and, offline, the simulator's
    URL; `environ`, the variables the proxy reads its upstream key from, never leaves this process but as Ray's
    runtime environment (`repr` leaves it out)."""

    params: ModelParams
    upstream_url: str | None
    environ: Mapping[str, str] = dataclasses.field(repr=False, default_factory=dict)


def actor_name(run_id: str, node_id: str) -> str:
    """The name a node's proxy actor goes by, which its node's cells look up."""
    return f"skillevo-gateway-{run_id}-{node_id}"


class NodeGateway:
    """The Ray actor: one proxy on its node's loopback, from `open_gateway` as on one machine."""

    def __init__(self, params: ModelParams, upstream_url: str | None) -> None:
        self._stack = ExitStack()
        upstream_key = os.environ.get(gateway.SIMULATED_KEY_ENV) if upstream_url else None
        self._model, self._credential = self._stack.enter_context(gateway.open_gateway(
            params, params.name, upstream_url=upstream_url, upstream_key=upstream_key, die_with_parent=True))

    def endpoint(self) -> tuple[str, str]:
        return self._model.endpoint, self._credential.secret

    def stop(self) -> None:
        self._stack.close()


@contextmanager
def open_for_nodes(params: ModelParams, *, simulator: Any = None) -> Iterator[tuple[Model, NodePlan]]:
    """The cells' Model (its base URL a placeholder each node replaces) and the plan of the nodes' proxies. Checks
    here what a proxy needs of the key (BrokenEnvironment naming the fix); starts only the simulator, offline."""
    gateway.preflight(params, simulated=params.simulated)
    plain = ModelParams(**{f.name: getattr(params, f.name) for f in dataclasses.fields(ModelParams)})  # picklable
    with ExitStack() as stack:
        upstream_url, environ = None, {}
        if params.simulated:
            simulator.api_key = gateway.minted_provider_key()
            upstream_url = stack.enter_context(simulator).url()
            environ = {gateway.SIMULATED_KEY_ENV: simulator.api_key}
        elif (key_env := gateway.provider_key_env(params)) is not None:
            environ = {key_env: os.environ[key_env]}
        model = Model(params.backend, params.name, NODE_ENDPOINT, params.effort,
                      upstream=gateway.upstream_label(params, params.name, simulated=params.simulated),
                      prices=models.gateway_prices(params))
        yield model, NodePlan(plain, upstream_url, environ)


def start(ray: Any, plan: NodePlan, node_ids: list[str], run_id: str, *, on_cluster: bool) -> dict[str, Any]:
    """One proxy actor on each node, ready to answer: their handles by name. A proxy that fails to start fails
    the run with what it said (its keys redacted by open_gateway)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415 - optional extra

    actor = ray.remote(num_cpus=0, max_restarts=0)(NodeGateway)
    handles = {}
    for node_id in node_ids:
        name = actor_name(run_id, node_id)
        options: dict[str, Any] = {"name": name,
                                   "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}
        if on_cluster and plan.environ:  # a local instance's processes inherit it from this process instead
            options["runtime_env"] = {"env_vars": dict(plan.environ)}
        handles[name] = actor.options(**options).remote(plan.params, plan.upstream_url)
    try:
        ray.get([h.endpoint.remote() for h in handles.values()], timeout=READY_TIMEOUT_S)
    except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as e:
        for handle in handles.values():
            ray.kill(handle)
        said = [line for line in str(e).splitlines() if line.strip()][-1:] or [type(e).__name__]
        raise BrokenEnvironment(f"a node's gateway proxy did not start (rule: a gateway that answers): {said[0]}"
                                ) from None
    return handles


def stop(ray: Any, handles: dict[str, Any]) -> None:
    """Each proxy stopped, then its actor: nothing of the run's gateways stays on any node."""
    waits = []
    for handle in handles.values():
        try:
            waits.append(handle.stop.remote())
        except Exception:  # noqa: BLE001 - an actor already gone is stopped
            continue
    try:
        ray.wait(waits, num_returns=len(waits), timeout=30)
    finally:
        for handle in handles.values():
            ray.kill(handle)


def on_node(spec: CellSpec, run_id: str) -> tuple[CellSpec, Credential]:
    """On a worker: the cell pointed at its own node's proxy, with that proxy's key. LookupError when this node
    has none (it joined after the run started)."""
    import ray  # noqa: PLC0415 - only on a worker

    node_id = ray.get_runtime_context().get_node_id()
    name = actor_name(run_id, node_id)
    if name not in _endpoints:
        try:
            handle = ray.get_actor(name)
        except ValueError:
            raise LookupError(f"Ray node {node_id} has no skillevo gateway for this run (it joined after the "
                              "run started): the run stops; start it again") from None
        answer: list[str] = list(ray.get(handle.endpoint.remote()))
        _endpoints[name] = (answer[0], answer[1])
    url, key = _endpoints[name]
    cell = dataclasses.replace(spec, model=dataclasses.replace(spec.model, endpoint=url))
    return cell, Credential(AUTH_TOKEN_ENV, key)
