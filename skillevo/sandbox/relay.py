"""The model relay: the only road from a sandbox to the model endpoint.

Inside the sandbox the CLI talks plain HTTP to a loopback port that socat forwards to a Unix socket
bound in from the host. On the host this relay accepts only the Messages API paths, replaces whatever
credential the CLI sent (a placeholder) with the real one, and forwards to the endpoint. The real key
therefore never exists inside the sandbox: not in an environment, a file, or /proc.

It also keeps the harness's own account of the session, which nothing in the sandbox can write: the tokens the
endpoint billed, and which answers failed on the endpoint's side (Relay.api_failed), so that a session is excluded
as the API's fault only when the relay saw it (docs/formats.md, the missing-data rule).

Only the CLI reaches the relay: its Bash tool runs in the CLI's own sandbox (no loopback of ours, no Unix socket)
and an arm's MCP servers in one of ours (skillevo.sandbox.bwrap.nested). A request that is not a Messages API
request (not JSON, no model or messages, a bad or huge length) is answered here with a 400 and never forwarded:
an error that something in the sandbox provoked is never booked as the endpoint's.
"""

from __future__ import annotations

import http.client
import json
import os
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import urlsplit

from skillevo.core.events import USAGE_FIELDS
from skillevo.files.errors import BadInput

ALLOWED_PATHS = ("/v1/messages", "/v1/messages/count_tokens")
HARNESS_HEADER_PREFIX = "x-skillevo-"  # the relay's own headers (the route behind a gateway), never the CLI's
PLACEHOLDER_KEY = "sk-skillevo-placeholder-not-a-key"
_HOP_HEADERS = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade", "host",
                "content-length", "x-api-key", "authorization", "proxy-authorization"}


MAX_LINE = 1 << 20
MAX_BODY = 64 << 20  # a request body: far above any context window's worth of JSON
# Upstream answers that show the API failed, never the agent: the credential is the harness's (401, 403), and rate
# limits, server errors and overload (429, 5xx, 529) are the endpoint's; SSE `error` events carry the same types.
# Other 4xx (a request too large, a prompt too long) are left out: an agent can cause those.
FAILED_STATUSES = frozenset({401, 403, 429})
FAILED_ERROR_TYPES = frozenset({"authentication_error", "permission_error", "rate_limit_error", "api_error",
                                "overloaded_error"})


def failed_status(status: int) -> bool:
    return status in FAILED_STATUSES or status >= 500


def malformed(body: bytes) -> str | None:
    """Why `body` is not a Messages API request the CLI would send, or None."""
    try:
        doc = json.loads(body)
    except ValueError:
        return "the body is not JSON"
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), str) or not isinstance(doc.get("messages"), list):
        return "the body is not a Messages API request (an object with a model and messages)"
    return None


class _Meter:
    """Counts the tokens of one Messages API response as it streams past (SSE or plain JSON): what a session
    spent, even when it is stopped before the CLI can report it."""

    def __init__(self, relay: Relay, streaming: bool) -> None:
        self.relay, self.streaming = relay, streaming
        self.buffer = bytearray()
        self.usage = dict.fromkeys(USAGE_FIELDS, 0)
        self.stopped = False  # the stream's message_stop arrived: the answer is whole
        self.error: str | None = None  # an SSE error event of a type in FAILED_ERROR_TYPES

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        if not self.streaming:
            del self.buffer[MAX_LINE * 4:]
            return
        *lines, rest = self.buffer.split(b"\n")
        self.buffer = bytearray(rest[:MAX_LINE])
        for line in lines:
            if line.startswith(b"data:") and len(line) <= MAX_LINE:
                self._event(line[5:])

    def _event(self, data: bytes | bytearray) -> None:
        try:
            event = json.loads(data)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        if event.get("type") == "message_start" and isinstance(event.get("message"), dict):
            self._message(event["message"])
        elif event.get("type") == "message_stop":
            self.stopped = True
        elif event.get("type") == "error" and isinstance(event.get("error"), dict):
            kind = event["error"].get("type")
            if kind in FAILED_ERROR_TYPES:
                self.error = kind
        elif event.get("type") == "message_delta" and isinstance(event.get("usage"), dict):
            self._count(event["usage"], only=("output_tokens",))  # cumulative for the message: the last one wins

    def _message(self, message: dict) -> None:
        if isinstance(message.get("model"), str):
            self.relay.models.add(message["model"])
        if isinstance(message.get("usage"), dict):
            self._count(message["usage"])

    def _count(self, usage: dict, only: tuple[str, ...] = USAGE_FIELDS) -> None:
        for field in only:
            value = usage.get(field)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                self.usage[field] = value

    def close(self) -> None:
        if not self.streaming:
            self._json()
        elif self.buffer.startswith(b"data:"):  # a last event without its newline
            self._event(bytes(self.buffer[5:]))
        with self.relay._lock:
            for field, value in self.usage.items():
                self.relay.usage[field] += value

    def _json(self) -> None:
        try:
            message = json.loads(bytes(self.buffer))
        except ValueError:
            return
        if isinstance(message, dict):
            self._message(message)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address) -> None:
        pass  # a sandbox that hung up mid-request is the session's failure, reported from its stream


class Relay:
    """`with Relay(endpoint, api_key, socket_dir) as r:` serves `socket_dir/relay.sock` on the host."""

    def __init__(self, endpoint: str, api_key: str | None, socket_dir: Path, *, timeout_s: float = 600.0,
                 auth_header: str = "x-api-key", headers: tuple[tuple[str, str], ...] = ()) -> None:
        parts = urlsplit(endpoint)
        if (parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.query
                or parts.fragment):
            raise BadInput("model endpoint must be an http(s) URL with a host and no credentials, query or fragment "
                           "(rule: model.base_url)")
        self.scheme, self.host, self.port = parts.scheme, parts.hostname, parts.port
        self.prefix = parts.path.rstrip("/")
        self.api_key = api_key
        self.auth_header = auth_header
        if any(not k.lower().startswith(HARNESS_HEADER_PREFIX) for k, _ in headers):
            raise ValueError(f"the relay adds only its own {HARNESS_HEADER_PREFIX}* headers")
        self.headers = headers  # added to every request upstream, on the host: nothing in the sandbox can set them
        self.timeout_s = timeout_s
        self.socket_path = Path(socket_dir) / "relay.sock"
        self.requests = 0
        self._server: _Server | None = None
        self._lock = threading.Lock()
        self._pending: dict[int, float] = {}  # request number -> when it was sent upstream
        self.usage = dict.fromkeys(USAGE_FIELDS, 0)  # what the endpoint billed this session, summed
        self.models: set[str] = set()  # the model ids it said it served
        # What the endpoint did wrong this session: the harness's evidence that the API, not the agent, failed.
        self.refused = 0  # requests refused here as malformed: provoked inside the sandbox, never the endpoint's
        self.failed_answers = 0
        self.last_failed_status: int | None = None  # HTTP status of the last failed answer (502: unreachable)
        self.last_failure: str | None = None  # what that answer was, for the error detail
        self.last_answer_failed = False  # the answer to the latest request failed: nothing good came after it
        self._last_answered = self._last_failed = 0  # request numbers

    def __enter__(self) -> Relay:
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        if self.socket_path.exists():
            self.socket_path.unlink()
        self._server = _Server(str(self.socket_path), _Handler)
        self._server.relay = self  # type: ignore[attr-defined]
        os.chmod(self.socket_path, 0o777)  # the sandbox user is a different uid
        # a short poll interval: shutdown() waits up to one interval, on every session
        threading.Thread(target=self._server.serve_forever, args=(0.02,), name="model-relay", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
        self.socket_path.unlink(missing_ok=True)

    def stalled_s(self) -> float:
        """How long the oldest request still waiting for the model endpoint has waited (0 when none is):
        a session that ran out of time while the endpoint did not answer was stopped by the API, not itself."""
        with self._lock:
            oldest = min(self._pending.values(), default=None)
        return 0.0 if oldest is None else time.monotonic() - oldest

    def api_failed(self) -> str | None:
        """Why the API, not the session, is to blame for how the session ended, or None: the last answer the endpoint
        gave was a failure (an earlier failure the CLI retried past shows nothing about how the session ended)."""
        with self._lock:
            if not self.last_answer_failed:
                return None
            return f"the model endpoint failed {self.failed_answers} answer(s), the last one: {self.last_failure}"

    def _answered(self, number: int, status: int, failure: str | None) -> None:
        """Record the answer to request `number`. The latest request decides `last_answer_failed`, in whatever order
        answers end; the handler records a failure before the CLI can see it, a success once it is whole, so the
        record is complete by the time the session ends."""
        with self._lock:
            if failure is not None:
                self.failed_answers += 1
                if number >= self._last_failed:
                    self._last_failed = number
                    self.last_failed_status, self.last_failure = status, failure
            if number >= self._last_answered:
                self._last_answered = number
                self.last_answer_failed = failure is not None

    def _begin(self) -> int:
        with self._lock:
            self.requests += 1
            self._pending[self.requests] = time.monotonic()
            return self.requests

    def _end(self, number: int) -> None:
        with self._lock:
            self._pending.pop(number, None)

    def connection(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout_s)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def address_string(self) -> str:
        return "sandbox"

    def _refuse(self, status: int, message: str, kind: str = "permission_error") -> None:
        # %-formatting, not an f-string: every brace of the template is JSON's
        data = ('{"type":"error","error":{"type":"%s","message":"%s"}}' % (kind, message)).encode()  # noqa: UP031
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def do_GET(self) -> None:
        self._refuse(403, "the model relay forwards only POST /v1/messages")

    do_HEAD = do_PUT = do_DELETE = do_GET

    def do_POST(self) -> None:
        relay: Relay = self.server.relay  # type: ignore[attr-defined]
        parts = urlsplit(self.path)
        if parts.path not in ALLOWED_PATHS:
            return self._refuse(403, "the model relay forwards only POST /v1/messages")
        try:
            length = int(self.headers.get("content-length") or "")
        except ValueError:
            length = -1
        problem = (f"the request's length must be 0 to {MAX_BODY} bytes" if not 0 <= length <= MAX_BODY else
                   malformed(body := self.rfile.read(length)))
        if problem is not None:
            with relay._lock:
                relay.refused += 1
            return self._refuse(400, f"the model relay refused the request: {problem}", "invalid_request_error")
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in _HOP_HEADERS and not k.lower().startswith(HARNESS_HEADER_PREFIX)}
        headers.update(relay.headers)
        if relay.api_key:
            if relay.auth_header == "authorization":
                headers["authorization"] = f"Bearer {relay.api_key}"
            else:
                headers["x-api-key"] = relay.api_key
        number = relay._begin()
        path = relay.prefix + parts.path + (f"?{parts.query}" if parts.query else "")
        conn = relay.connection()
        try:
            conn.request("POST", path, body=body, headers=headers)
            upstream = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            relay._end(number)
            relay._answered(number, 502, f"HTTP 502: the relay could not reach the endpoint ({type(e).__name__})")
            return self._refuse(502, f"model endpoint unreachable: {type(e).__name__}")
        streaming = "event-stream" in (upstream.getheader("content-type") or "")
        meter = _Meter(relay, streaming)
        counting = parts.path == "/v1/messages" and upstream.status == 200
        failure = f"HTTP {upstream.status}" if failed_status(upstream.status) else None
        recorded = failure is not None
        if recorded:  # before the CLI sees it: it may give up and end the session at once
            relay._answered(number, upstream.status, failure)
        delivered = True  # False when the sandbox side hung up: then the answer says nothing about the endpoint
        try:
            self.send_response(upstream.status)
            for key, value in upstream.getheaders():
                if key.lower() not in _HOP_HEADERS:
                    self.send_header(key, value)
            self.send_header("connection", "close")
            self.end_headers()
            while True:
                try:
                    chunk = upstream.read1(65536)
                except (OSError, http.client.HTTPException) as e:
                    failure = failure or f"HTTP {upstream.status}, the endpoint broke off ({type(e).__name__})"
                    break
                if not chunk:
                    break
                if counting:
                    meter.feed(chunk)
                    if meter.error and not recorded:
                        failure, recorded = f"HTTP {upstream.status}, an error event {meter.error} in the stream", True
                        relay._answered(number, upstream.status, failure)
                self.wfile.write(chunk)
                self.wfile.flush()
        except OSError:
            delivered = False  # the CLI went away; it sees a broken stream and reports it
        finally:
            if counting:
                meter.close()
            if failure is None and delivered:  # the CLI sees a cut answer only once this handler closes
                if upstream.length:  # a body shorter than its content-length
                    failure = f"HTTP {upstream.status}, the endpoint's answer ended {upstream.length} bytes short"
                elif counting and streaming and meter.error:
                    failure = f"HTTP {upstream.status}, an error event {meter.error} in the stream"
                elif counting and streaming and not meter.stopped:
                    failure = f"HTTP {upstream.status}, the stream ended before message_stop"
            if not recorded and (delivered or failure is not None):
                relay._answered(number, upstream.status, failure)
            relay._end(number)
            conn.close()
            self.close_connection = True
