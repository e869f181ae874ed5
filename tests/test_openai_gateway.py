"""The openai and litellm backends: the simulator's OpenAI dialect, the pricing rule, the params rules, the relay's
own headers, and a bench side end to end through the real CLI in bwrap, the relay, the real LiteLLM proxy and the
simulator upstream, with the provider's key and the per-run key found nowhere they must not be."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import pickle
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from skillevo import backends, sandbox
from skillevo.backends import gateway
from skillevo.core import config, models, pins
from skillevo.files.errors import BadInput, BrokenEnvironment
from skillevo.sandbox import process
from skillevo.simulator import Simulator, openai_dialect
from skillevo.simulator.noise import ROUTE_HEADER
from tests.bench_fixtures import ROOT, capped, make_mini, params, params_doc
from tests.conftest import cmdline, process_tree

# --- the simulator's dialect ------------------------------------------------------------------------------


def test_a_chat_completions_request_reads_as_the_messages_request_it_stands_for():
    body = {"model": "gpt-5-mini", "stream": True, "messages": [
        {"role": "system", "content": [{"type": "text", "text": "you are the CLI", "cache_control": {"type": "x"}}]},
        {"role": "user", "content": [{"type": "text", "text": "<system-reminder>r</system-reminder>"}]},
        {"role": "user", "content": "fix the bug"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "Bash", "arguments": '{"command": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py"},
        {"role": "user", "content": [{"type": "text", "text": "Base directory for this skill: /s/work\n\nsteps"}]},
    ], "tools": [{"type": "function", "function": {"name": "Bash", "parameters": {"type": "object"}}}]}
    m = openai_dialect.to_messages(body)
    assert m["system"] == [{"type": "text", "text": "you are the CLI", "cache_control": {"type": "x"}}]
    assert [x["role"] for x in m["messages"]] == ["user", "assistant", "user"]  # consecutive user turns are one
    assert m["messages"][0]["content"][1] == {"type": "text", "text": "fix the bug"}
    assert m["messages"][1]["content"] == [{"type": "tool_use", "id": "call_1", "name": "Bash",
                                            "input": {"command": "ls"}}]
    assert m["messages"][2]["content"][0] == {"type": "tool_result", "tool_use_id": "call_1", "content": "a.py"}
    assert m["tools"] == [{"name": "Bash", "input_schema": {"type": "object"}}] and m["stream"] is True


def test_a_reply_is_written_as_openai_writes_one_with_cached_tokens_in_its_usage():
    message = {"id": "msg_sim_1", "model": "gpt-5-mini", "content": [
        {"type": "text", "text": "Next: ls"}, {"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                               "input": {"command": "ls"}}],
               "usage": {"input_tokens": 10, "cache_creation_input_tokens": 5, "cache_read_input_tokens": 100,
                         "output_tokens": 7}}
    plain = openai_dialect.completion(message)
    [choice] = plain["choices"]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Next: ls"
    assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == {"command": "ls"}
    # OpenAI bills no cache writes: they are plain input; reads are the cached part of the prompt
    assert plain["usage"] == {"prompt_tokens": 115, "completion_tokens": 7, "total_tokens": 122,
                              "prompt_tokens_details": {"cached_tokens": 100}}
    chunks = openai_dialect.chunks(message, include_usage=True)
    assert chunks[-1]["usage"] == plain["usage"] and chunks[-1]["choices"] == []
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert "usage" not in openai_dialect.chunks(message, include_usage=False)[-1]


# --- what a gateway session costs ---------------------------------------------------------------------------


def test_a_gateway_session_is_priced_from_its_usage_never_from_the_clis_guess():
    usage = {"input_tokens": 1_000_000, "output_tokens": 1_000_000, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 1_000_000}
    account = {"usage": usage, "total_cost_usd": 99.0}  # what the CLI made up for a model it does not know
    prices = models.openai_prices("gpt-5-mini")
    assert prices == pins.OPENAI_MODELS["gpt-5-mini"][1:] == models.openai_prices("gpt-5-mini-2025-08-07")
    assert models.session_cost(account, prices) == round(0.25 + 0.025 + 2.0, 6)
    assert models.session_cost(account, None) == 99.0  # an Anthropic backend: the CLI's own figure
    assert models.session_cost({"usage": {**usage, "output_tokens": -1}}, prices) is None  # unreadable: unmeasured
    assert models.openai_prices("some-new-model") is None


def _model_doc(**model):
    return params_doc(model=model)


@pytest.mark.parametrize("model, rule", [
    ({"backend": "openai", "name": "claude-sonnet-4-6"}, "priced model"),  # no price for it on this backend
    ({"backend": "openai", "name": "gpt-4o"}, "pinned model id"),  # floating
    ({"backend": "openai", "name": "chatgpt-4o-latest"}, "pinned model id"),
    ({"backend": "litellm", "name": "qwen3", "prices": {"input": 0, "cached_input": 0, "output": 0}},
     "model keys match the backend"),  # no provider_model
    ({"backend": "litellm", "name": "qwen3", "provider_model": "ollama/qwen3"}, "priced model"),
    ({"backend": "anthropic", "upstream": "simulator"}, "model keys match the backend"),
    ({"backend": "simulator", "prices": {"input": 1, "cached_input": 1, "output": 1}}, "model keys match the backend"),
])
def test_model_keys_that_cannot_work_are_refused_naming_the_rule(model, rule):
    with pytest.raises(BadInput) as e:
        config.parse(_model_doc(**model))
    assert f"(rule: {rule})" in str(e.value)


def test_a_priced_model_on_litellm_and_an_unpinned_one_with_prices_on_openai_load():
    free = {"input": 0, "cached_input": 0, "output": 0}
    local = config.parse(_model_doc(backend="litellm", name="qwen3-8b", provider_model="ollama/qwen3:8b",
                                    base_url="http://127.0.0.1:11434", prices=free)).model
    assert models.gateway_prices(local) == (0, 0, 0)  # said free, so free: never assumed
    new = config.parse(_model_doc(backend="openai", name="gpt-9-2027-01-01",
                                  prices={"input": 1, "cached_input": 0.1, "output": 8})).model
    assert models.gateway_prices(new) == (1, 0.1, 8)
    assert models.binding(new)["prices"] == [1, 0.1, 8] and models.binding(new)["upstream"] is None


def test_the_offline_switch_rewrites_the_model_section_and_loads(tmp_path):
    from skillevo.ops import backend

    p = tmp_path / "params.yaml"
    p.write_text((ROOT / "params.yaml").read_text())
    assert "simulator -> openai" in backend.switch("openai", p)
    m = config.load(p).model
    assert (m.backend, m.name, m.upstream, m.simulated) == ("openai", "gpt-5-mini", "simulator", True)
    assert "# openai:" in p.read_text()  # comments kept
    assert "already" in backend.switch("openai", p)
    backend.switch("simulator", p)
    assert config.load(p).model == config.load(ROOT / "params.yaml").model


# --- the relay's own headers --------------------------------------------------------------------------------


class _Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.server.seen.append([(k.lower(), v) for k, v in self.headers.items()])  # type: ignore[attr-defined]
        body = b'{"type":"message","content":[]}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_the_route_header_is_the_relays_and_one_the_agent_sends_is_dropped(tmp_path):
    """Behind a gateway the simulator's route is a header: an agent that sends its own (to pick another cell's
    luck) must never reach upstream with it."""
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    upstream.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    try:
        with sandbox.Relay(f"http://127.0.0.1:{upstream.server_address[1]}", "run-key", tmp_path,
                           auth_header="authorization", headers=((ROUTE_HEADER, "/cell/" + "a" * 32),)) as relay:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(relay.socket_path))
                conn = http.client.HTTPConnection("sandbox")
                conn.sock = s
                conn.putrequest("POST", "/v1/messages")
                for name in (ROUTE_HEADER, "X-Skillevo-Route", "x-skillevo-other"):
                    conn.putheader(name, "/cell/" + "b" * 32)
                body = b'{"model": "gpt-5-mini", "messages": []}'
                conn.putheader("content-length", str(len(body)))
                conn.endheaders(body)
                assert conn.getresponse().status == 200
    finally:
        upstream.shutdown()
        upstream.server_close()
    [headers] = upstream.seen  # type: ignore[attr-defined]
    assert [v for k, v in headers if k.startswith("x-skillevo-")] == ["/cell/" + "a" * 32]
    with pytest.raises(ValueError):
        sandbox.Relay("http://127.0.0.1:9", None, tmp_path, headers=(("x-api-key", "k"),))


# --- the gateway's own refusals ------------------------------------------------------------------------------


def test_a_missing_provider_key_is_refused_before_the_proxy_starts(monkeypatch):
    monkeypatch.delenv(models.OPENAI_KEY_ENV, raising=False)
    monkeypatch.setattr(gateway, "executable", lambda: Path("/nonexistent/litellm"))
    real = config.parse(_model_doc(backend="openai", name="gpt-5-mini")).model
    with pytest.raises(BrokenEnvironment) as e, backends.open_model(real):
        pass
    assert "OPENAI_API_KEY is not set" in str(e.value) and "(rule: a credential from the environment)" in str(e.value)


def test_the_proxy_config_names_keys_by_variable_only():
    real = config.parse(_model_doc(backend="litellm", name="qwen3-8b", provider_model="openrouter/qwen/qwen3-8b",
                                   key_env="OPENROUTER_API_KEY",
                                   prices={"input": 0.1, "cached_input": 0.1, "output": 0.3})).model
    cfg = gateway.config(real, real.name, None, gateway.provider_key_env(real))
    [entry] = cfg["model_list"]
    assert entry == {"model_name": "qwen3-8b", "litellm_params": {"model": "openrouter/qwen/qwen3-8b",
                                                                   "api_key": "os.environ/OPENROUTER_API_KEY"}}
    assert cfg["general_settings"] == {"master_key": f"os.environ/{gateway.MASTER_KEY_ENV}"}  # no header forwarding


# --- end to end -------------------------------------------------------------------------------------------------


@pytest.mark.cli
@pytest.mark.bwrap
@pytest.mark.gateway
def test_a_bench_side_runs_through_the_real_litellm_proxy_with_its_keys_nowhere_else(monkeypatch, tmp_path):
    spawned: list[tuple[list[str], dict[str, str]]] = []
    real_popen = process.subprocess.Popen

    def recording_popen(argv, *args, **kwargs):
        spawned.append((list(argv), dict(kwargs.get("env") or {})))
        return real_popen(argv, *args, **kwargs)

    monkeypatch.setattr(process.subprocess, "Popen", recording_popen)
    tasks_file = make_mini(tmp_path)
    p = params(model={"backend": "openai", "name": "gpt-5-mini", "upstream": "simulator"})
    opened: list[tuple[Simulator, models.Model, models.Credential]] = []
    real_open = backends.open_model

    @contextlib.contextmanager
    def watching_open(*args, **kwargs):  # the simulator and the run key, to look for them afterwards
        with real_open(*args, **kwargs) as (model, credential):
            opened.append((kwargs["simulator"], model, credential))
            yield model, credential

    from skillevo.bench import plan, run_side
    from skillevo.bench import side as side_module

    monkeypatch.setattr(side_module.backends, "open_model", watching_open)
    side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
    side.tasks = side.tasks[:1]
    side.arms = [a for a in side.arms if a.name == "auto"]
    before = process_tree({os.getpid()})
    rows = run_side(side, p, tmp_path / "out", quiet=True, scratch_root=tmp_path)
    [row] = rows
    assert row["resolved"] is True and row["backend"] == "openai", row["error_detail"]
    assert row["skill_invoked"] is True and row["served_models"] == ["gpt-5-mini"]
    prices = list(pins.OPENAI_MODELS["gpt-5-mini"][1:])
    assert row["prices"] == prices and row["simulated"] is True
    assert row["cost_usd"] == models.price(row, "", tuple(prices)) > 0  # its usage at the pinned prices
    [(sim, model, credential)] = opened
    assert sim.requests > 0 and sim.sessions()  # the simulator answered, behind the proxy
    assert model.endpoint.startswith("http://127.0.0.1:") and model.upstream == "simulator"
    # the proxy is gone with the run: no process of ours is left
    assert process_tree({os.getpid()}) <= before | {os.getpid()}
    provider_key, run_key = sim.api_key, credential.secret
    assert provider_key and run_key and provider_key != run_key
    [(proxy_argv, proxy_env)] = [(a, e) for a, e in spawned if Path(a[0]).name == "litellm"]
    assert not any(provider_key in a or run_key in a for a in proxy_argv)  # the proxy holds them in its environment
    assert provider_key in proxy_env.values() and run_key in proxy_env.values()
    sandboxed = [(a, e) for a, e in spawned if Path(a[0]).name != "litellm"]
    assert any("bwrap" in a[0] for a, _ in sandboxed)
    for argv, env in sandboxed:  # every other process: neither key in its argv or environment
        assert not any(provider_key in a or run_key in a for a in argv), argv[:3]
        assert not any(provider_key in v or run_key in v for v in env.values()), sorted(env)
    written = [f for f in (tmp_path / "out").rglob("*") if f.is_file()]
    assert any("transcripts" in f.parts for f in written)
    assert not [f for f in written if provider_key.encode() in f.read_bytes() or run_key.encode() in f.read_bytes()]
    assert not [line for pid in process_tree({os.getpid()}) if (line := cmdline(pid)) and provider_key in line]



@pytest.mark.cli
@pytest.mark.bwrap
@pytest.mark.gateway
def test_behind_a_gateway_the_cap_is_in_priced_dollars_not_the_clis_guess(tmp_path):
    """The CLI prices a model it does not know by guesswork (far above gpt-5-mini's table), so it must not enforce
    the cap there: a run under a cap above its priced cost resolves, and one over its cap is a cost-cap row from
    its priced cost, the session not stopped by the CLI."""
    from skillevo.bench import plan, run_side
    tasks_file = make_mini(tmp_path)
    p = params(model={"backend": "openai", "name": "gpt-5-mini", "upstream": "simulator"})

    def one(cap: float | None, out: str) -> dict:
        side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
        side.tasks = side.tasks[:1]
        side.arms = [a for a in side.arms if a.name == "auto"]
        [row] = run_side(side if cap is None else capped(side, cap), p, tmp_path / out, quiet=True,
                         scratch_root=tmp_path)
        return row

    free = one(None, "free")
    assert free["resolved"] is True and free["cost_usd"] > 0, free["error_detail"]
    roomy = one(round(free["cost_usd"] * 1.5, 6), "roomy")
    assert roomy["resolved"] is True and roomy["error_kind"] is None, roomy["error_detail"]
    over = one(round(free["cost_usd"] / 3, 6), "over")
    assert over["error_kind"] == "cost-cap" and "at or over its cap" in over["error_detail"], over
    assert over["cost_usd"] == free["cost_usd"]  # the session ran to its end: the CLI did not stop it

def test_check_names_the_missing_provider_key_before_any_money_is_spent(monkeypatch):
    monkeypatch.delenv(models.OPENAI_KEY_ENV, raising=False)
    monkeypatch.setattr(gateway, "executable", lambda: Path("/nonexistent/litellm"))
    real = config.parse(_model_doc(backend="openai", name="gpt-5-mini")).model
    with pytest.raises(BrokenEnvironment, match="OPENAI_API_KEY is not set"):
        backends.preflight(real)
    backends.preflight(config.parse(_model_doc(backend="openai", name="gpt-5-mini", upstream="simulator")).model)


def test_openai_caches_a_prefix_unasked_so_a_sessions_later_request_reads_what_the_earlier_wrote():
    from skillevo.simulator.cache import PromptCache

    first = {"model": "gpt-5-mini", "messages": [{"role": "system", "content": "S" * 20000},
                                                 {"role": "user", "content": "U" * 8000}]}
    later = {**first, "messages": [*first["messages"], {"role": "assistant", "content": "ok"},
                                   {"role": "user", "content": "more"}]}
    cache = PromptCache()
    raw = [len(json.dumps(b)) for b in (first, later)]
    one = cache.usage(("s",), openai_dialect.to_messages(first), raw[0])
    two = cache.usage(("s",), openai_dialect.to_messages(later), raw[1])
    assert one["cache_read_input_tokens"] == 0 and one["cache_creation_input_tokens"] > 0
    assert two["cache_read_input_tokens"] >= one["cache_creation_input_tokens"] > 0


@pytest.mark.gateway  # the pinned LiteLLM is checked for before anything starts
def test_with_the_ray_executor_the_nodes_get_a_plan_and_only_their_runtime_env_gets_the_key(monkeypatch):
    """A gateway on Ray: no proxy here; each node starts its own from a plan that holds no key (skillevo.bench.
    ray_gateway, end to end in tests/test_ray_executor.py). The key is checked before anything starts."""
    from skillevo.bench import ray_gateway
    from skillevo.bench import side as side_module
    from skillevo.bench.ray_executor import RayExecutor

    provider_key = "sk-proj-planted-provider-key-77a1c0"
    doc = _model_doc(backend="openai", name="gpt-5-mini")
    doc["bench"]["executor"] = "ray"
    p = config.parse(doc)
    monkeypatch.delenv(models.OPENAI_KEY_ENV, raising=False)
    with pytest.raises(BrokenEnvironment, match="OPENAI_API_KEY is not set"), side_module._open_model(p, None):
        pass
    monkeypatch.setenv(models.OPENAI_KEY_ENV, provider_key)
    before = process_tree({os.getpid()})
    with side_module._open_model(p, None) as (model, executor):
        assert process_tree({os.getpid()}) == before  # no proxy on the driver
        assert isinstance(executor, RayExecutor) and model.endpoint == ray_gateway.NODE_ENDPOINT
        assert model.upstream == "openai/gpt-5-mini" and model.prices == models.gateway_prices(p.model)
        plan = executor._gateway
        assert plan is not None and plan.environ == {models.OPENAI_KEY_ENV: provider_key}
        assert provider_key not in repr(plan) and provider_key not in repr(executor.init_kwargs())
        assert provider_key.encode() not in pickle.dumps((plan.params, plan.upstream_url))  # what actors get
    doc["bench"]["executor"] = "local"
    assert not side_module._on_nodes(config.parse(doc))


def test_a_proxy_that_fails_to_start_shows_its_log_without_either_key(monkeypatch, tmp_path):
    """The error names what the proxy said; a proxy that prints its whole environment (as a crash dump might) must
    not carry the provider's key or the run key into the message, a log or a terminal."""
    fake = tmp_path / "litellm"
    fake.write_text("#!/bin/sh\nenv\necho 'startup failed'\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(gateway, "executable", lambda: fake)
    provider_key = "sk-proj-planted-provider-key-5c0d2e7a91"
    monkeypatch.setenv(models.OPENAI_KEY_ENV, provider_key)
    real = config.parse(_model_doc(backend="openai", name="gpt-5-mini")).model
    with pytest.raises(BrokenEnvironment) as e, backends.open_model(real):
        pass
    message = str(e.value)
    assert "exited 3" in message and "startup failed" in message and "(rule: a gateway that answers)" in message
    assert provider_key not in message and "sk-skillevo-run-" not in message
    assert gateway.MASTER_KEY_ENV in message  # the dump was there, its values were not
