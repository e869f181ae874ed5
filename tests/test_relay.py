"""The relay's record of what the endpoint did: the harness's evidence that the API, not the agent, failed a session.

A stand-in endpoint answers each request as told by its path; a client speaks HTTP to the relay's Unix socket as the
CLI does through socat. No CLI, no sandbox: the real-CLI cases are in tests/test_measured_failures.py.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from skillevo.sandbox import Relay

USAGE = {"input_tokens": 7, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def _sse(*events: dict) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


START = {"type": "message_start", "message": {"model": "claude-test", "usage": USAGE}}
DELTA = {"type": "message_delta", "usage": {"output_tokens": 5}}
STOP = {"type": "message_stop"}


class _Endpoint(BaseHTTPRequestHandler):
    """POST /<how>/v1/messages: `ok` a whole SSE answer, `<status>` an error with that status, `cut` an SSE answer
    that ends before message_stop, `sse-error` an SSE overloaded_error event, `short` a JSON body shorter than its
    content-length, `slow` 12 MB sent slowly and then cut (the client hangs up before)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("content-length") or 0))
        how = self.path.split("/")[1]
        self.close_connection = True
        if how.isdigit():
            body = json.dumps({"type": "error", "error": {"type": "some_error", "message": how}}).encode()
            self.send_response(int(how))
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if how == "short":
            body = json.dumps({"type": "message", "usage": USAGE}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        if how == "cut":
            self.wfile.write(_sse(START) + b"event: content_block_delta\ndata: {\"ty")
        elif how == "sse-error":
            self.wfile.write(_sse(START, {"type": "error", "error": {"type": "overloaded_error", "message": "x"}}))
        elif how == "late":  # a whole answer, a second late
            time.sleep(1)
            self.wfile.write(_sse(START, DELTA, STOP))
        elif how == "slow":  # more than any socket buffer holds, then cut: counted only if the client stayed
            self.wfile.write(_sse(START))
            try:
                for _ in range(50):
                    self.wfile.write(_sse({"type": "ping", "pad": "x" * (256 << 10)}))
                    self.wfile.flush()
                    time.sleep(0.02)
            except OSError:
                pass
        else:
            self.wfile.write(_sse(START, DELTA, STOP))


@pytest.fixture(scope="module")
def endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=10)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(str(self.socket_path))


BODY = b'{"model": "claude-test", "messages": [], "stream": true}'  # the shape of every request the CLI sends


def _post(relay: Relay, how: str, *, read: bool = True) -> int:
    conn = _UnixConnection(relay.socket_path)
    conn.request("POST", "/v1/messages", body=BODY, headers={"content-type": "application/json"})
    response = conn.getresponse()
    if read:
        try:
            response.read()
        except http.client.IncompleteRead:
            pass
    conn.close()
    return response.status


def _relay(endpoint: str, how: str, tmp_path: Path) -> Relay:
    return Relay(f"{endpoint}/{how}", None, tmp_path / how)


def _settle(relay: Relay) -> None:
    """The relay records an answer after it sent the last byte; wait until no request is pending."""
    deadline = time.monotonic() + 5
    while relay.stalled_s() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)


@pytest.mark.parametrize("how, failed", [
    ("ok", None),
    ("529", "HTTP 529"), ("500", "HTTP 500"), ("503", "HTTP 503"), ("429", "HTTP 429"),
    ("401", "HTTP 401"), ("403", "HTTP 403"),  # the credential is the harness's, never the agent's
    ("400", None), ("413", None), ("404", None),  # a request an agent can make too large or too long
    ("cut", "the stream ended before message_stop"),
    ("sse-error", "an error event overloaded_error in the stream"),
    ("short", "bytes short"),
])
def test_the_relay_records_which_answers_show_the_api_failed(endpoint, tmp_path, how, failed):
    with _relay(endpoint, how, tmp_path) as relay:
        _post(relay, how)
        _settle(relay)
    if failed is None:
        assert relay.failed_answers == 0 and relay.api_failed() is None and relay.last_failed_status is None
    else:
        assert relay.failed_answers == 1 and failed in relay.last_failure, relay.last_failure
        assert relay.last_failed_status == (int(how) if how.isdigit() else 200)
        assert failed in relay.api_failed()
    if how == "ok":
        assert relay.usage["input_tokens"] == 7 and relay.usage["output_tokens"] == 5


def test_an_unreachable_endpoint_is_the_relays_own_502(tmp_path):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    with Relay(f"http://127.0.0.1:{port}", None, tmp_path) as relay:
        assert _post(relay, "ok") == 502
        _settle(relay)
    assert relay.failed_answers == 1 and relay.last_failed_status == 502 and "could not reach" in relay.last_failure


def test_a_failure_the_cli_retried_past_does_not_blame_the_api(endpoint, tmp_path):
    """What counts is how the session ended: a 529 followed by a good answer says nothing about a later failure."""
    relay = Relay(endpoint, None, tmp_path)
    relay.prefix = ""
    with relay:
        for how in ("529", "ok"):
            relay.prefix = f"/{how}"
            _post(relay, how)
            _settle(relay)
    assert relay.failed_answers == 1 and relay.last_failed_status == 529
    assert relay.last_answer_failed is False and relay.api_failed() is None


def test_a_client_that_hangs_up_is_not_an_api_failure(endpoint, tmp_path):
    """The sandbox side (the CLI, which an agent can kill) going away mid-answer says nothing about the endpoint."""
    with _relay(endpoint, "slow", tmp_path) as relay:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(relay.socket_path))
        client.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n%s" % (len(BODY), BODY))
        assert client.recv(100).startswith(b"HTTP/1.1 200")
        client.close()
        time.sleep(1.5)  # the endpoint's slow answer ends meanwhile; the relay's writes fail
        _settle(relay)
    assert relay.failed_answers == 0 and relay.api_failed() is None


def test_the_latest_request_decides_whatever_order_the_answers_end_in(endpoint, tmp_path):
    """A good answer that ends after a later request's failure must not hide that failure (and the reverse holds
    for a failure recorded before the CLI retried): answers are ordered by request, not by when they end."""
    relay = Relay(endpoint, None, tmp_path)
    with relay:
        relay.prefix = "/late"
        first = threading.Thread(target=_post, args=(relay, "late"))
        first.start()
        while relay.requests < 1:
            time.sleep(0.01)
        time.sleep(0.2)
        relay.prefix = "/529"
        _post(relay, "529")
        first.join()
        _settle(relay)
    assert relay.failed_answers == 1 and relay.last_answer_failed is True and "HTTP 529" in relay.api_failed()


@pytest.mark.parametrize("head, body", [
    ("content-length: 8", b"not json"),
    ("content-length: 16", b'{"stream": true}'),  # JSON, but no model or messages
    ("content-length: 2", b"[]"),
    ("content-length: nine", b"{}"),
    (f"content-length: {1 << 40}", b"{}"),  # a length to make the relay read forever
    ("transfer-encoding: chunked", b"2\r\n{}\r\n0\r\n\r\n"),
])
def test_a_request_the_cli_would_never_send_is_refused_here_and_never_booked_as_the_apis(endpoint, tmp_path, head,
                                                                                         body):
    """Issue 30, item 3: a malformed request (an MCP server's or a tool's, provoked to make the endpoint fail) is
    answered by the relay itself and never forwarded: the endpoint behind it, which answers 500 to everything, is
    never asked, so nothing books the failure as the API's."""
    with _relay(endpoint, "500", tmp_path) as relay:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.settimeout(10)
        client.connect(str(relay.socket_path))
        client.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\n" + head.encode() + b"\r\n\r\n" + body)
        answer = b""
        while chunk := client.recv(4096):  # the relay closes after its answer: read it whole
            answer += chunk
        client.close()
        _settle(relay)
        assert answer.startswith(b"HTTP/1.1 400") and b"invalid_request_error" in answer, answer[:200]
        assert relay.refused == 1 and relay.requests == 0 and relay.failed_answers == 0 and relay.api_failed() is None
        assert _post(relay, "500") == 500  # a well-formed request is forwarded, and its failure is the API's
        _settle(relay)
    assert relay.failed_answers == 1 and "HTTP 500" in relay.api_failed()


@pytest.mark.parametrize("state, api_failed, stalled_s, blamed", [
    ("exited", "HTTP 529", 0.0, "HTTP 529"),  # the CLI gave up on the endpoint's failures: the API's
    ("timeout", "HTTP 500", 0.0, None),  # a failed answer, then the session ran out of time: its own doing
    ("timeout", None, 0.0, None),
    ("timeout", "HTTP 500", 200.0, "the API stalled"),  # a request of the CLI's still unanswered
    ("timeout", None, 50.0, "the API stalled"),  # half the session's time unanswered (timeout_s 100)
])
def test_a_timeout_is_the_apis_only_while_the_endpoint_had_not_answered(state, api_failed, stalled_s, blamed):
    from skillevo.agent.session import blame

    found = blame(state, api_failed, stalled_s, 100.0)
    assert found is None if blamed is None else blamed in found
