"""Which model answers a session, and whether its id can be trusted to mean the same model tomorrow.

The pinned CLI's own catalog (skillevo.core.pins.MODEL_IDS) is the only table of ids: a floating alias (`sonnet`,
`default`, `...-latest`) or an id the CLI remaps can change under the evidence between bench and apply, and a
retired id no longer answers; both are refused. A short id that points at a dated snapshot works, but the
snapshot is what the API serves, so it earns a warning; every row records the id the API says it served.

It also owns the model credential: which environment variables hold it, which wins when both are set, and how
the relay must send it. Every other module asks `credential()` or `resolve()`, so the rule lives here alone.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any
from urllib.parse import urlsplit

from skillevo.core.events import USAGE_FIELDS
from skillevo.core.pins import (
    CLAUDE_CODE_VERSION,
    FLOATING_ALIASES,
    MODEL_IDS,
    MODEL_PRICES,
    OPENAI_FLOATING,
    OPENAI_MODELS,
    PRICE_TIERS,
)
from skillevo.files.errors import BadInput, BrokenEnvironment

log = logging.getLogger(__name__)

ANTHROPIC_URL = "https://api.anthropic.com"
API_KEY_ENV = "ANTHROPIC_API_KEY"  # sent as `x-api-key`
AUTH_TOKEN_ENV = "ANTHROPIC_AUTH_TOKEN"  # a gateway's bearer token, sent as `Authorization: Bearer <token>`
# First set wins, as in the Claude Code CLI itself: its "Authentication precedence" puts ANTHROPIC_AUTH_TOKEN
# (Authorization: Bearer) before ANTHROPIC_API_KEY (X-Api-Key), and its LLM-gateway page says which header each
# is sent as (code.claude.com/docs/en/authentication; docs.anthropic.com/en/docs/claude-code/llm-gateway).
# Following the CLI means a setup that works with `claude` outside skillevo authenticates the same way here.
CREDENTIAL_ENVS = (AUTH_TOKEN_ENV, API_KEY_ENV)
_SNAPSHOT_OF = {snapshot: short for short, (snapshot, _, _) in MODEL_IDS.items()}
_OPENAI_SNAPSHOT_OF = {snapshot: short for short, (snapshot, *_) in OPENAI_MODELS.items()}
# Backends whose sessions reach the model through a LiteLLM proxy skillevo starts (skillevo.backends.gateway): the
# CLI does not know their models' prices, so a session is priced from its usage by a pinned or declared table.
GATEWAY_BACKENDS = ("openai", "litellm")
OPENAI_KEY_ENV = "OPENAI_API_KEY"


def is_floating(name: str) -> bool:
    """An alias (`sonnet`, `default`, `...-latest`) the CLI resolves to whatever is newest: not a pinned id."""
    base = name.strip().lower().removesuffix("[1m]")
    return not base or base in FLOATING_ALIASES or base.endswith(("latest", "auto"))


Prices = tuple[float, float, float]  # USD per million tokens: input, cached input, output


def price(usage: dict[str, int], model: str, prices: Prices | None = None) -> float | None:
    """What `usage` costs on `model`: at `prices` (a gateway backend's table: cache writes cost as input, as OpenAI
    bills them), else at the pinned CLI's prices (None for a model outside its catalog): the cost of a session
    stopped before the CLI could report one, from the tokens the relay counted."""
    if prices is not None:
        inp, cached, out = prices
        total = ((usage.get("input_tokens", 0) + usage.get("cache_creation_input_tokens", 0)) * inp
                 + usage.get("cache_read_input_tokens", 0) * cached + usage.get("output_tokens", 0) * out)
        return round(total / 1e6, 6)
    base = model.strip().lower().removesuffix("[1m]")
    short = base if base in MODEL_PRICES else _SNAPSHOT_OF.get(base)
    if short not in MODEL_PRICES:
        return None
    inp, out, write, read = PRICE_TIERS[MODEL_PRICES[short]]
    total = (usage.get("input_tokens", 0) * inp + usage.get("output_tokens", 0) * out
             + usage.get("cache_creation_input_tokens", 0) * write + usage.get("cache_read_input_tokens", 0) * read)
    return round(total / 1e6, 6)


def session_cost(account: dict[str, Any], prices: Prices | None) -> float | None:
    """The one rule for what a session cost, from its account (the CLI's `result` event, or the harness's
    `skillevo_stopped`): the CLI's own figure, or with `prices` (a gateway backend's) its usage at those prices,
    since the CLI prices a model it does not know by guesswork. None: unmeasured."""
    if prices is not None:
        usage = account.get("usage")
        if not isinstance(usage, dict) or any(not isinstance(usage.get(f, 0), int) or isinstance(usage.get(f, 0), bool)
                                              or usage.get(f, 0) < 0 for f in USAGE_FIELDS):
            return None
        return price(usage, "", prices)
    cost = account.get("total_cost_usd")
    return cost if isinstance(cost, int | float) and not isinstance(cost, bool) and cost >= 0 else None


def openai_prices(name: str) -> Prices | None:
    """The pinned table's prices for an OpenAI id (short or dated snapshot); None outside it."""
    base = name.strip().lower()
    short = base if base in OPENAI_MODELS else _OPENAI_SNAPSHOT_OF.get(base)
    return None if short is None else OPENAI_MODELS[short][1:]


def _check_openai_id(name: str, where: str, priced: bool) -> list[str]:
    base = name.strip().lower()
    if base in OPENAI_FLOATING or base.endswith(("latest", "auto")) or not base:
        raise BadInput(f"{where}: {name!r} is a floating OpenAI alias that moves to whatever is newest; name a dated "
                       "snapshot such as gpt-5-mini-2025-08-07 (rule: pinned model id)")
    if base in OPENAI_MODELS:
        return [f"{where}: {name!r} is a short id for the snapshot {OPENAI_MODELS[base][0]!r}; rows record the "
                "served id"]
    if base not in _OPENAI_SNAPSHOT_OF and not priced:
        raise BadInput(f"{where}: {name!r} is not in skillevo's pinned OpenAI price table; give its prices as "
                       "model.prices (USD per million tokens: input, cached_input, output) (rule: priced model)")
    return []


def check_id(name: str, where: str, today: date, backend: str = "anthropic", priced: bool = False) -> list[str]:
    """Refuse a floating, remapped or retired id (BadInput naming `where`); return warnings for the rest. On a
    gateway backend the id is the provider's: OpenAI's rules for `openai`, and for `litellm` only what is the same
    everywhere (no floating names; `priced`: model.prices is given, as a litellm model needs)."""
    if backend == "openai":
        return _check_openai_id(name, where, priced)
    base = name.strip().lower().removesuffix("[1m]")
    if backend == "litellm":
        if base.endswith(("latest", "auto")) or base.rsplit("/", 1)[-1] in FLOATING_ALIASES | OPENAI_FLOATING:
            raise BadInput(f"{where}: {name!r} is a floating alias that moves to whatever is newest; name a pinned "
                           "model id (rule: pinned model id)")
        if not priced and openai_prices(name) is None:
            raise BadInput(f"{where}: {name!r} has no pinned price; give model.prices (USD per million tokens: input, "
                           "cached_input, output; zeros for a free local model, said so) (rule: priced model)")
        return []
    if is_floating(name):
        raise BadInput(f"{where}: {name!r} is a floating alias that the CLI resolves to whatever is newest; name a "
                       "pinned model id such as claude-sonnet-4-6 (rule: pinned model id)")
    short = base if base in MODEL_IDS else _SNAPSHOT_OF.get(base)
    if short is None:
        return [f"{where}: {name!r} is not in the pinned Claude Code {CLAUDE_CODE_VERSION}'s model catalog; "
                "results are only comparable while the endpoint keeps serving the same model"]
    snapshot, retires, remapped = MODEL_IDS[short]
    if remapped:
        raise BadInput(f"{where}: {name!r} is remapped by the pinned Claude Code {CLAUDE_CODE_VERSION} to another "
                       "model, so it would not be the model measured (rule: pinned model id)")
    notes = []
    if retires is not None:
        if date.fromisoformat(retires) <= today:
            raise BadInput(f"{where}: {name!r} was retired on {retires} (the pinned Claude Code "
                           f"{CLAUDE_CODE_VERSION}'s deprecation table) (rule: current model)")
        notes.append(f"{where}: {name!r} is deprecated and retires on {retires}")
    if base != snapshot:
        notes.append(f"{where}: {name!r} is a short id for the snapshot {snapshot!r}; rows record the served id")
    return notes


@dataclass(frozen=True)
class Credential:
    """The real model credential and the variable it was read from. It stays on the host: the relay sends it,
    the sandbox holds a placeholder. `secret` is left out of repr, so a spec that is logged or raised with its
    fields never prints it."""

    env: str  # one of CREDENTIAL_ENVS
    secret: str = field(repr=False)

    @property
    def header(self) -> str:
        """The header the relay sends it in: the one the CLI itself would use for this variable."""
        return "authorization" if self.env == AUTH_TOKEN_ENV else "x-api-key"

    def environ(self) -> dict[str, str]:
        """This credential as another process's environment (a Ray worker's): its own variable set and the others
        emptied, so `credential()` there picks this one whatever that machine's environment already holds."""
        return {name: self.secret if name == self.env else "" for name in CREDENTIAL_ENVS}


def credential(environ: Mapping[str, str] | None = None) -> Credential | None:
    """The credential in `environ` (default: this process's), by the CLI's precedence; None when none is set.
    An empty variable counts as unset."""
    environ = os.environ if environ is None else environ
    found = [name for name in CREDENTIAL_ENVS if environ.get(name)]
    if len(found) > 1:
        log.warning("%s and %s are both set: the token is sent (Authorization: Bearer) and the key is ignored, as "
                    "the Claude Code CLI does; unset one to silence this", AUTH_TOKEN_ENV, API_KEY_ENV)
    return Credential(found[0], environ[found[0]]) if found else None


@dataclass(frozen=True)
class Model:
    """Which model answers the sessions, and at which base URL (the simulator's, the API's, an endpoint's, the
    loopback gateway's)."""

    backend: str  # simulator | anthropic | endpoint | openai | litellm
    name: str
    endpoint: str
    effort: str | None = None
    upstream: str | None = None  # a gateway backend's provider: "simulator" (offline) or its provider/model
    prices: Prices | None = None  # a gateway backend's prices (session_cost); None: the CLI's own figure

    @property
    def simulated(self) -> bool:
        """Answered by skillevo's simulator: directly, or behind the gateway (upstream simulator)."""
        return self.backend == "simulator" or self.upstream == "simulator"

    @property
    def gateway(self) -> bool:
        return self.backend in GATEWAY_BACKENDS

    def identity(self) -> dict[str, Any]:
        """What a cell key binds about where sessions go: never a per-run loopback port."""
        endpoint = None if self.simulated or self.gateway else self.endpoint
        return {"backend": self.backend, "name": self.name, "effort": self.effort, "endpoint": endpoint,
                "upstream": self.upstream, "prices": list(self.prices) if self.prices is not None else None}


def resolve(model: Any, simulator_url: str | None, name: str | None = None) -> tuple[Model, Credential | None]:
    """The model for `config.ModelParams` and its credential (from the environment, never from a file).

    `name` overrides the model id (the proposer's own model); `simulator_url` is required for the simulator.
    A real backend (anthropic, endpoint) without a credential is refused before any work: every session would
    otherwise fail on a 401, one cell at a time.
    """
    name = name or model.name
    if model.backend == "simulator":
        if simulator_url is None:
            raise BrokenEnvironment("the simulator backend needs a running simulator")
        return Model("simulator", name, simulator_url, model.effort), None
    found = credential()
    if found is None:
        raise BrokenEnvironment(f"model.backend is {model.backend} but neither {AUTH_TOKEN_ENV} (a gateway's bearer "
                                f"token) nor {API_KEY_ENV} is set in the environment (export one; never put it in a "
                                "file) (rule: a credential from the environment)")
    if model.backend == "anthropic":
        return Model("anthropic", name, ANTHROPIC_URL, model.effort), found
    return Model("endpoint", name, model.base_url, model.effort), found


def check_reachable(model: Model, timeout_s: float = 10.0) -> None:
    """Refuse to start paid work against an endpoint that does not accept a connection (BrokenEnvironment)."""
    parts = urlsplit(model.endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout_s).close()
    except OSError as e:
        raise BrokenEnvironment(f"model endpoint {parts.scheme}://{parts.hostname}:{port} does not answer "
                                f"({e.strerror or e}); check params model.base_url and the network "
                                "(rule: reachable endpoint)") from None


def binding(model: Any) -> dict[str, Any]:
    """What bench.json and promotion.json bind about the backend (bench-run.schema.json#/$defs/backend)."""
    found = {"backend": model.backend, "name": model.name,
             "base_url": model.base_url if model.backend in ("endpoint", *GATEWAY_BACKENDS) else None,
             "simulated": model.simulated}
    if model.backend in GATEWAY_BACKENDS:
        prices = gateway_prices(model)
        found.update(upstream=model.upstream, prices=list(prices) if prices is not None else None)
    return found


def gateway_prices(model: Any, name: str | None = None) -> Prices | None:
    """What a gateway backend's sessions are priced at: params model.prices, else the pinned OpenAI table's; None on
    another backend (the CLI's own figure) or for a model nobody priced (its sessions are unmeasured)."""
    if model.backend not in GATEWAY_BACKENDS:
        return None
    return tuple(model.prices) if model.prices is not None else openai_prices(name or model.name)
