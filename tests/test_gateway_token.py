"""A gateway that takes a bearer token (ANTHROPIC_AUTH_TOKEN), end to end: which credential wins, how the relay
sends it, that a bench reaches a gateway answering only `Authorization: Bearer <token>`, and that the token is
in no argv, no sandbox environment and no file the run wrote."""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from skillevo import sandbox
from skillevo.agent import SessionSpec, cli
from skillevo.bench import RayExecutor, plan, ray_executor, run_side
from skillevo.core import models
from skillevo.core.models import API_KEY_ENV, AUTH_TOKEN_ENV, Credential
from skillevo.core.redact import REDACTED, env_secrets, redact_obj, redact_text
from skillevo.files.errors import BrokenEnvironment
from skillevo.sandbox import process
from skillevo.simulator import Simulator, load_all
from tests.bench_fixtures import ROOT, make_mini, params
from tests.conftest import cmdline, process_tree
from tests.gateway import BearerGateway

# no known key pattern, so redaction could not hide a leak; distinct so a mix-up shows which one went where
TOKEN = "skillevo-planted-gateway-token-7d41c9e2b8"
OTHER_KEY = "skillevo-planted-other-key-3a9f0e61c5"


def _endpoint_params(url: str = "http://127.0.0.1:9"):
    return params(model={"backend": "endpoint", "base_url": url}).model


# --- which credential, and how it is sent ----------------------------------------------------------------

def test_the_token_is_sent_as_bearer_and_the_key_as_x_api_key():
    token = models.credential({AUTH_TOKEN_ENV: TOKEN})
    key = models.credential({API_KEY_ENV: OTHER_KEY})
    assert (token.env, token.secret, token.header) == (AUTH_TOKEN_ENV, TOKEN, "authorization")
    assert (key.env, key.secret, key.header) == (API_KEY_ENV, OTHER_KEY, "x-api-key")
    assert models.credential({AUTH_TOKEN_ENV: "", API_KEY_ENV: ""}) is None  # empty is unset
    assert models.credential({}) is None


def test_when_both_are_set_the_token_wins_as_in_the_cli_and_says_so(caplog):
    with caplog.at_level(logging.WARNING, logger="skillevo.core.models"):
        both = models.credential({AUTH_TOKEN_ENV: TOKEN, API_KEY_ENV: OTHER_KEY})
    assert (both.env, both.secret) == (AUTH_TOKEN_ENV, TOKEN)
    [warning] = caplog.messages
    assert AUTH_TOKEN_ENV in warning and API_KEY_ENV in warning and "ignored" in warning
    assert TOKEN not in warning and OTHER_KEY not in warning


def test_resolve_reads_the_token_for_a_real_backend(monkeypatch):
    monkeypatch.setenv(AUTH_TOKEN_ENV, TOKEN)
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    model, cred = models.resolve(_endpoint_params(), None)
    assert model.backend == "endpoint" and cred == Credential(AUTH_TOKEN_ENV, TOKEN)
    model, cred = models.resolve(params(model={"backend": "anthropic"}).model, None)
    assert model.endpoint == models.ANTHROPIC_URL and cred.header == "authorization"
    _, cred = models.resolve(params().model, "http://127.0.0.1:9")  # the simulator takes no real credential
    assert cred is None


@pytest.mark.parametrize("backend", ["anthropic", "endpoint"])
def test_a_real_backend_without_a_credential_is_refused(monkeypatch, backend):
    for name in models.CREDENTIAL_ENVS:
        monkeypatch.setenv(name, "")  # set but empty counts as unset
    model = params(model={"backend": backend,
                          "base_url": "http://127.0.0.1:9" if backend == "endpoint" else None}).model
    with pytest.raises(BrokenEnvironment) as e:
        models.resolve(model, None)
    assert e.value.exit_code == 69
    message = str(e.value)
    assert "\n" not in message and AUTH_TOKEN_ENV in message and API_KEY_ENV in message and "(rule: " in message


def test_the_secret_is_in_no_repr():
    cred = Credential(AUTH_TOKEN_ENV, TOKEN)
    spec = SessionSpec(prompt="p", workspace=Path("/w"), model="m", endpoint="http://x", transcript_dir=Path("/t"),
                       transcript_name="n", credential=cred)
    assert TOKEN not in repr(cred) and TOKEN not in repr(spec) and AUTH_TOKEN_ENV in repr(cred)


def test_the_token_value_is_redacted_like_the_key():
    assert env_secrets({AUTH_TOKEN_ENV: TOKEN, API_KEY_ENV: ""}) == (TOKEN,)
    assert (redact_text(f"token {TOKEN} in a line", env_secrets({AUTH_TOKEN_ENV: TOKEN}))
            == f"token {REDACTED} in a line")
    assert redact_text(f"authorization: Bearer {TOKEN}") == f"authorization: {REDACTED}"  # by pattern, unknown
    assert redact_obj({"ANTHROPIC_AUTH_TOKEN": TOKEN, "note": TOKEN}, (TOKEN,)) == {
        "ANTHROPIC_AUTH_TOKEN": REDACTED, "note": REDACTED}


class _Recorder(BaseHTTPRequestHandler):
    """An upstream that records the headers it was sent and answers an empty message."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.server.seen.append({k.lower(): v for k, v in self.headers.items()})  # type: ignore[attr-defined]
        body = b'{"type":"message","content":[]}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_the_relay_replaces_the_placeholder_with_the_bearer_token(tmp_path):
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    upstream.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    cred = Credential(AUTH_TOKEN_ENV, TOKEN)
    try:
        with sandbox.Relay(f"http://127.0.0.1:{upstream.server_address[1]}", cred.secret, tmp_path,
                           auth_header=cred.header) as relay:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(relay.socket_path))
                conn = http.client.HTTPConnection("sandbox")
                conn.sock = s
                # what the CLI in the sandbox sends: the placeholder, in both places it could put one
                conn.request("POST", "/v1/messages", body=b'{"model": "m", "messages": []}', headers={
                    "x-api-key": sandbox.PLACEHOLDER_KEY, "authorization": f"Bearer {sandbox.PLACEHOLDER_KEY}"})
                assert conn.getresponse().status == 200
    finally:
        upstream.shutdown()
        upstream.server_close()
    [headers] = upstream.seen  # type: ignore[attr-defined]
    assert headers["authorization"] == f"Bearer {TOKEN}"
    assert "x-api-key" not in headers and sandbox.PLACEHOLDER_KEY not in json.dumps(headers)


def test_ray_sends_the_credential_under_the_name_it_was_read_from(monkeypatch):
    """The job's runtime_env carries the driver's variable and empties the other, so a worker whose own
    environment holds another credential still uses the driver's, by the same rule (models.credential)."""
    cred = Credential(AUTH_TOKEN_ENV, TOKEN)
    kwargs = RayExecutor("127.0.0.1:6380", max_retries=0, cell_resources={"num_cpus": 1}, local_workers=1,
                         credential=cred).init_kwargs()
    assert kwargs["runtime_env"] == {"env_vars": {AUTH_TOKEN_ENV: TOKEN, API_KEY_ENV: ""}}
    monkeypatch.setenv(API_KEY_ENV, OTHER_KEY)  # the worker machine's own
    for name, value in kwargs["runtime_env"]["env_vars"].items():  # what Ray sets on the worker
        monkeypatch.setenv(name, value)
    endpoint = types.SimpleNamespace(model=models.Model("endpoint", "m", "http://x"))
    assert ray_executor._credential(endpoint) == cred
    assert ray_executor._credential(types.SimpleNamespace(model=models.Model("simulator", "m", "http://x"))) is None
    assert ray_executor._ENV_RAY_SETS[-2:] == models.CREDENTIAL_ENVS  # restored after a local instance


# --- end to end: a bench side through a bearer-only gateway ------------------------------------------------

class _ProcessWatch:
    """Every process descending from this one, sampled while the run goes: command lines, and the environment
    of the CLI processes inside the sandbox (readable: same host uid)."""

    def __init__(self) -> None:
        self.lines: set[str] = set()  # every command line seen: a pid's changes when it execs (launch.sh -> CLI)
        self.cli_environ: dict[int, bytes] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            for pid in process_tree({os.getpid()}) - {os.getpid()}:
                line = cmdline(pid)
                if line:
                    self.lines.add(line)
                if line.startswith(f"{cli.CLI_DST} ") and pid not in self.cli_environ:  # the CLI itself
                    try:
                        self.cli_environ[pid] = Path(f"/proc/{pid}/environ").read_bytes()
                    except OSError:
                        pass

    def __enter__(self) -> _ProcessWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.cli
@pytest.mark.bwrap
def test_a_bench_reaches_a_bearer_gateway_with_the_token_nowhere_else(monkeypatch, tmp_path):
    monkeypatch.setenv(AUTH_TOKEN_ENV, TOKEN)
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    spawned: list[tuple[list[str], dict[str, str]]] = []
    real_popen = process.subprocess.Popen

    def recording_popen(argv, *args, **kwargs):
        spawned.append((list(argv), dict(kwargs.get("env") or {})))
        return real_popen(argv, *args, **kwargs)

    monkeypatch.setattr(process.subprocess, "Popen", recording_popen)
    tasks_file = make_mini(tmp_path)
    out = tmp_path / "out"
    # the simulator itself accepts only the token too: an x-api-key that slipped past the gateway would fail
    with Simulator(load_all([tasks_file.parent / "playbooks/mini.yaml"]), api_key=TOKEN) as sim, \
            BearerGateway(sim.url(), TOKEN) as gw:
        p = params(model={"backend": "endpoint", "base_url": gw.url})
        side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
        side.tasks = side.tasks[:1]
        side.arms = [a for a in side.arms if a.name == "auto"]
        with _ProcessWatch() as watch:
            rows = run_side(side, p, out, quiet=True, scratch_root=tmp_path)
    [row] = rows
    assert row["resolved"] is True and row["backend"] == "endpoint", row["error_detail"]
    # every request reached the gateway with the bearer token, none with the sandbox's placeholder key
    assert gw.seen and all(r["authorized"] for r in gw.seen), gw.seen
    assert not any("x-api-key" in r["headers"] for r in gw.seen), gw.seen
    # no argv of any process the run started, nor the sandbox's environment, holds the token
    assert spawned and any("bwrap" in argv[0] for argv, _ in spawned)
    for argv, env in spawned:
        assert not any(TOKEN in a for a in argv), argv[:3]
        assert not any(TOKEN in v for v in env.values()), sorted(env)
    assert any(line.startswith(cli.CLI_DST) for line in watch.lines), watch.lines
    assert not [line for line in watch.lines if TOKEN in line]
    assert watch.cli_environ, "no CLI environment was read: the check below would prove nothing"
    for environ in watch.cli_environ.values():
        assert TOKEN.encode() not in environ and AUTH_TOKEN_ENV.encode() not in environ
        assert f"ANTHROPIC_API_KEY={sandbox.PLACEHOLDER_KEY}".encode() in environ.split(b"\0")
    # nor any file it wrote: rows, transcripts, patches, bench.json, the report
    written = [f for f in out.rglob("*") if f.is_file()]
    assert any("transcripts" in f.parts for f in written) and (out / "results.jsonl").is_file()
    assert not [f for f in written if TOKEN.encode() in f.read_bytes()]
