"""Who answers the sessions, behind one small interface, as Inspect AI keeps its sandbox providers behind one.

    with backends.open_model(params.model, simulator=Simulator(...)) as (model, credential):
        ep = backends.session_endpoint(model, route)     # per session: where to send it, which headers to add

Providers: `simulator` (skillevo's offline stand-in, started here), `anthropic` and `endpoint` (an Anthropic API,
nothing to start), `openai` and `litellm` (skillevo.backends.gateway: a LiteLLM proxy on loopback, started here,
holding the provider's key; its upstream is the provider or, offline, the simulator speaking OpenAI's dialect).
The harness never asks which provider it has: a cell names its session's route (skillevo.simulator.noise.route,
meaningful only to the simulator) and gets an Endpoint; pricing travels in the Model (core.models.session_cost).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from skillevo.backends import gateway
from skillevo.core import models
from skillevo.core.models import Credential, Model
from skillevo.files.errors import BrokenEnvironment


@dataclass(frozen=True)
class SessionRef:
    """What names one session of a cell to a backend that draws its behaviour per session (the simulator): the
    task, the arm as measured (an overlay's or a control's name included), the run and session, and the side's
    measuring moment and the cell's slot in its order. A real model ignores it."""

    task: str
    arm: str
    run: int
    session: int
    moment: str | None = None
    slot: int | None = None

    def route(self) -> str:
        from skillevo.simulator import noise  # the simulator's: imported only for a simulated model

        return noise.route(self.task, self.arm, self.run, self.session, moment=self.moment,
                           slot=self.slot if self.moment is not None else None)


@dataclass(frozen=True)
class Endpoint:
    """Where one session goes: a base URL, and the headers the relay adds on the host."""

    url: str
    headers: tuple[tuple[str, str], ...] = ()


def session_endpoint(model: Model, session: SessionRef | str | None = None) -> Endpoint:
    """A session's endpoint. `session` (a SessionRef, or a simulator path such as /mode/proposer) names it to the
    simulator: in the base URL when the CLI talks to it directly, in a header behind a gateway (the proxy forwards
    `x-` headers to its upstream when that is the simulator); a real model ignores it."""
    if not model.simulated:  # before the route: a real model's session runs no simulator code
        return Endpoint(model.endpoint)
    route = session.route() if isinstance(session, SessionRef) else session or ""
    if not route:
        return Endpoint(model.endpoint)
    if model.gateway:
        from skillevo.simulator.noise import ROUTE_HEADER

        return Endpoint(model.endpoint, ((ROUTE_HEADER, route),))
    return Endpoint(model.endpoint.rstrip("/") + route)


def preflight(params: Any) -> None:
    """What `skillevo check` asks of a backend before any money is spent: a real backend's credential, the
    gateway's LiteLLM and provider key (BrokenEnvironment naming the fix). Starts nothing."""
    if params.backend in models.GATEWAY_BACKENDS:
        gateway.preflight(params, simulated=params.simulated)
    elif not params.simulated:
        models.resolve(params, None)


@contextmanager
def open_model(params: Any, *, simulator: Any = None,
               name: str | None = None) -> Iterator[tuple[Model, Credential | None]]:
    """Start what `params` (config.ModelParams) needs for the run and stop it after: the simulator (`simulator`,
    not yet started; required when params say simulated), the gateway proxy. `name` overrides the model id (the
    proposer's). Refuses, before any work, a real backend without its credential or an endpoint that does not
    answer (BrokenEnvironment)."""
    name = name or params.name
    with ExitStack() as stack:
        sim_url = None
        if params.simulated:
            if simulator is None:
                raise BrokenEnvironment("the simulated backend needs a simulator")
            if params.backend in models.GATEWAY_BACKENDS:  # the proxy must show the provider key to get an answer
                simulator.api_key = gateway.minted_provider_key()
            sim_url = stack.enter_context(simulator).url()
        credential: Credential | None
        if params.backend in models.GATEWAY_BACKENDS:  # LiteLLM, an optional extra, runs as a process of its own
            model, credential = stack.enter_context(gateway.open_gateway(
                params, name, upstream_url=sim_url, upstream_key=simulator.api_key if sim_url else None))
        else:
            model, credential = models.resolve(params, sim_url, name)
            models.check_reachable(model)
        yield model, credential
