"""The `openai` and `litellm` backends: the pinned LiteLLM proxy on loopback, speaking the Anthropic Messages API
to the CLI (through the relay) and the provider's API upstream, for one run.

Keys: the provider's key is read from the host environment (OPENAI_API_KEY, or params model.key_env) into the
proxy's environment only: never a file (the proxy's config names the variable, `os.environ/...`), argv, a row or
a transcript. The CLI's side gets a per-run key the proxy accepts (its master key, minted here and gone with the
run), and even that stays on the host: the relay sends it, the sandbox holds a placeholder.

Dialect: the proxy is asked for OpenAI's Chat Completions API (not its Responses API), the one every
OpenAI-compatible server speaks (OpenAI, OpenRouter, Ollama, vLLM), so the offline path through the simulator's
dialect (skillevo.simulator.openai) runs the same translation as the real one.

Prices: the CLI prices a model it does not know by guesswork, so sessions are priced from their usage at the
pinned table (skillevo.core.pins.OPENAI_MODELS) or params model.prices (core.models.session_cost).
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from skillevo.core import models
from skillevo.core.models import AUTH_TOKEN_ENV, Credential, Model
from skillevo.core.pins import LITELLM_VERSION
from skillevo.core.redact import redact_text
from skillevo.files.errors import BrokenEnvironment

READY_TIMEOUT_S = 180.0
MASTER_KEY_ENV = "LITELLM_MASTER_KEY"
SIMULATED_KEY_ENV = "SKILLEVO_SIMULATED_PROVIDER_KEY"  # the simulator's own key, offline
PASSED_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy",
              "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE")


def executable() -> Path:
    """The pinned LiteLLM proxy's command, beside this Python or on PATH (BrokenEnvironment naming the fix)."""
    fix = f"install the gateway extra: pip install 'skillevo[gateway]' (LiteLLM {LITELLM_VERSION})"
    try:
        version = importlib.metadata.version("litellm")
    except importlib.metadata.PackageNotFoundError:
        raise BrokenEnvironment(f"model.backend openai/litellm needs the LiteLLM proxy: {fix}") from None
    if version != LITELLM_VERSION:
        raise BrokenEnvironment(f"LiteLLM {version} is installed, the pinned one is {LITELLM_VERSION}: {fix}")
    found = shutil.which("litellm", path=str(Path(sys.executable).parent)) or shutil.which("litellm")
    if found is None:
        raise BrokenEnvironment(f"the litellm command is not beside {sys.executable} or on PATH: {fix}")
    return Path(found)


def provider_key_env(params: Any) -> str | None:
    """The host variable holding the provider's key: OPENAI_API_KEY for openai, model.key_env for litellm."""
    return models.OPENAI_KEY_ENV if params.backend == "openai" else params.key_env


def preflight(params: Any, simulated: bool = False) -> Path:
    """What must hold before the proxy can start (BrokenEnvironment naming the fix): the pinned LiteLLM, and the
    provider's key in the environment unless the simulator answers upstream. Returns the proxy's command."""
    command = executable()
    key_env = provider_key_env(params)
    if not simulated and key_env is not None and not os.environ.get(key_env):
        raise BrokenEnvironment(f"model.backend is {params.backend} but {key_env} is not set in the environment "
                                "(export it; never put it in a file) (rule: a credential from the environment)")
    return command


def minted_provider_key() -> str:
    """The key the simulator demands of the proxy offline, as a provider would: minted per run."""
    return f"sk-skillevo-provider-{secrets.token_hex(16)}"


def upstream_label(params: Any, name: str, simulated: bool) -> str:
    """Who answers behind the proxy, as rows and promotion.json name it: the simulator, or the provider's model."""
    if simulated:
        return "simulator"
    return (config(params, name, None, None)["model_list"][0]["litellm_params"]["model"]
            + (f" at {params.base_url}" if params.base_url else ""))


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: a killed owner takes it along


def config(params: Any, name: str, upstream_url: str | None, key_env: str | None) -> dict[str, Any]:
    """The proxy's config: one model, the provider's key by variable name only, the master key likewise."""
    if upstream_url is not None:
        target, api_base = f"openai/{name}", upstream_url.rstrip("/") + "/v1"
    else:
        target = f"openai/{name}" if params.backend == "openai" else params.provider_model
        api_base = params.base_url
    litellm_params: dict[str, Any] = {"model": target}
    if api_base:
        litellm_params["api_base"] = api_base
    if key_env:
        litellm_params["api_key"] = f"os.environ/{key_env}"
    general: dict[str, Any] = {"master_key": f"os.environ/{MASTER_KEY_ENV}"}
    if upstream_url is not None:  # the simulator reads each session's route from a header the relay added
        general["forward_client_headers_to_llm_api"] = True
    return {"model_list": [{"model_name": name, "litellm_params": litellm_params}], "general_settings": general,
            "litellm_settings": {"drop_params": True, "request_timeout": 1800, "num_retries": 0}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(url: str, proc: subprocess.Popen, log: Path, hidden: tuple[str, ...]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"{url}/health/liveliness", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    tail = redact_text(log.read_text(errors="replace")[-1500:], hidden)
    state = f"exited {proc.returncode}" if proc.poll() is not None else f"not ready after {READY_TIMEOUT_S:.0f}s"
    raise BrokenEnvironment(f"the LiteLLM proxy {state} (rule: a gateway that answers); its log ends: {tail}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextmanager
def open_gateway(params: Any, name: str, *, upstream_url: str | None = None, upstream_key: str | None = None,
                 die_with_parent: bool = False) -> Iterator[tuple[Model, Credential]]:
    """Start the proxy for `name` and yield the Model the sessions use (its loopback URL) and the per-run key the
    relay sends; stop it after. `upstream_url`/`upstream_key`: the simulator's, offline. `die_with_parent`: the proxy
    is killed when the thread that started it ends (a Ray actor's, which Ray may kill without notice)."""
    command = preflight(params, simulated=upstream_url is not None)
    key_env = provider_key_env(params)
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    if upstream_url is not None:
        key_env = SIMULATED_KEY_ENV
        env[key_env] = upstream_key or ""
    elif key_env is not None:
        env[key_env] = os.environ[key_env]
    run_key = f"sk-skillevo-run-{secrets.token_hex(24)}"
    hidden = tuple(v for v in (run_key, env.get(key_env or "")) if v)
    with tempfile.TemporaryDirectory(prefix="skillevo-gateway-") as tmp:
        home = Path(tmp)
        cfg = home / "litellm.yaml"
        cfg.write_text(yaml.safe_dump(config(params, name, upstream_url, key_env), sort_keys=False))
        env.update({MASTER_KEY_ENV: run_key, "HOME": str(home), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                    "LITELLM_USE_CHAT_COMPLETIONS_URL_FOR_ANTHROPIC_MESSAGES": "True", "LITELLM_LOG": "ERROR",
                    "PYTHONUNBUFFERED": "1"})
        port = _free_port()
        log = home / "proxy.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(command), "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port),
                                     "--num_workers", "1"], env=env, cwd=home, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=_die_with_parent if die_with_parent else None)
        try:
            url = f"http://127.0.0.1:{port}"
            _ready(url, proc, log, hidden)
            model = Model(params.backend, name, url, params.effort,
                          upstream=upstream_label(params, name, simulated=upstream_url is not None),
                          prices=models.gateway_prices(params, name))
            yield model, Credential(AUTH_TOKEN_ENV, run_key)
        finally:
            _stop(proc)
