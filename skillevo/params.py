"""params.yaml: the one place a generation's knobs live (DVC tracks each key a stage reads)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ANTHROPIC_URL = "https://api.anthropic.com"
BACKENDS = ("simulator", "anthropic", "endpoint")


class ParamsError(ValueError):
    pass


@dataclass(frozen=True)
class Model:
    """Which model answers the sessions, and where."""

    backend: str  # simulator | anthropic | endpoint
    name: str
    endpoint: str
    effort: str | None = None

    @property
    def simulated(self) -> bool:
        return self.backend == "simulator"


def load(path: str | Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ParamsError(f"{path}: cannot read params: {e}") from None
    if not isinstance(doc, dict):
        raise ParamsError(f"{path}: must be a mapping")
    return doc


def section(params: dict[str, Any], name: str) -> dict[str, Any]:
    value = params.get(name) or {}
    if not isinstance(value, dict):
        raise ParamsError(f"params.yaml: {name}: must be a mapping")
    return value


def model(params: dict[str, Any], simulator_url: str | None = None) -> tuple[Model, str | None]:
    """The benchmark model and the credential for it (read from the environment, never from a file)."""
    m = section(params, "model")
    backend, name = m.get("backend", "simulator"), m.get("name")
    if backend not in BACKENDS:
        raise ParamsError(f"params.yaml: model.backend: {backend!r} is not one of {', '.join(BACKENDS)}")
    if not isinstance(name, str) or not name or name.lower().endswith(("latest", "auto")):
        raise ParamsError("params.yaml: model.name: a pinned model id is required (no `latest`/`auto` aliases)")
    effort = m.get("effort")
    if backend == "simulator":
        if simulator_url is None:
            raise ParamsError("the simulator backend needs a running simulator")
        return Model("simulator", name, simulator_url, effort), None
    key = os.environ.get("ANTHROPIC_API_KEY") or None
    if backend == "anthropic":
        if not key:
            raise ParamsError("model.backend is anthropic but ANTHROPIC_API_KEY is not set in the environment")
        return Model("anthropic", name, ANTHROPIC_URL, effort), key
    base_url = m.get("base_url")
    if not isinstance(base_url, str) or not base_url:
        raise ParamsError("params.yaml: model.base_url: required when model.backend is endpoint")
    return Model("endpoint", name, base_url, effort), key


def model_binding(params: dict[str, Any]) -> dict[str, Any]:
    """What promotion.json binds about the model backend."""
    m = section(params, "model")
    backend = m.get("backend", "simulator")
    return {"backend": backend, "name": m.get("name"),
            "base_url": m.get("base_url") if backend == "endpoint" else None, "simulated": backend == "simulator"}
