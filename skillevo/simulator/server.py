"""An offline stand-in for the Anthropic Messages API, good enough for the pinned Claude Code CLI.

It serves POST /v1/messages (SSE streaming and plain JSON) and /v1/messages/count_tokens on 127.0.0.1,
with usage computed from the real sizes of the request and the reply, so a longer skill or a longer
conversation costs more, and split by prompt caching as the API reports it (cache.py). A base URL of the
form http://127.0.0.1:<port>/mode/<mode> selects a behaviour or a fault for one session (see MODES);
/cell/<key>[/moment/<key>[/slot/<n>]] (noise.route) names the cell and session a request belongs to, and the
measuring moment and schedule slot of its bench, which fix its noise (noise.py); a malformed route is refused
(noise.parse_route). A latency profile (latency.py; default none) holds each reply back as a real model would.
Everything it produces is simulated and is labelled so upstream.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from skillevo.simulator import agent, conversation, generic, noise, openai_dialect
from skillevo.simulator.agent import EscapeTargets, Reply
from skillevo.simulator.cache import BYTES_PER_TOKEN, PromptCache, tokens
from skillevo.simulator.latency import Latency
from skillevo.simulator.noise import Noise, Route, RouteError, SessionNoise
from skillevo.simulator.playbook import Playbook

SESSION_LOG_ENV = "SKILLEVO_SIMULATOR_SESSION_LOG"
MODES = ("normal", "no-skill", "escape", "overloaded", "server-error", "truncated", "hang")
NOISY = ("normal", "no-skill")  # the modes the noise profile varies (faults and roles stay exact)
NO_ROUTE = Route()  # a request with no route in its path: the empty key
CHUNK_TOKENS = 4  # under latency, a delta event carries about this many tokens, as the API's carry a few


class Simulator:
    """Start with `with Simulator(playbook) as sim:` and point sessions at `sim.url(mode)`.

    `noise` (default: none) varies sessions seeded by the cell route in their base URL; `max_retries` is what
    the CLI retries (params bench.max_retries), so a simulated overload never fails a request more often.
    `latency` (default: none, every reply at once) paces each Messages reply as a model would; every connection
    has its own thread, so a reply that waits holds back no other session.
    """

    def __init__(self, playbook: Playbook, *, api_key: str | None = None, escape: EscapeTargets | None = None,
                 responders: dict[str, Any] | None = None, noise: Noise | None = None, max_retries: int = 2,
                 latency: Latency | None = None, solved: tuple[generic.SolvedTask, ...] = ()) -> None:
        self.playbook = playbook
        self.solved = solved  # tasks the generic agent plays (skillevo.simulator.generic), where no playbook task does
        self.api_key = api_key
        self.escape = escape
        self.responders = dict(responders or {})  # extra modes (e.g. the proposer role), mode -> fn(conv, body)
        self.noise = noise or Noise()
        self.max_retries = max_retries
        self.latency = latency
        self.cache = PromptCache()
        self._lock = threading.Lock()
        self._sessions: dict[str, str] = {}  # CLI session id -> mode
        self._overloads: dict[tuple[str, str | None, str | None, int], int] = {}  # request -> 529s answered so far
        self.overloads = 0
        self.requests = 0
        self.failures: list[str] = []  # the simulator's own errors, so a stage reports them as what they are
        self.stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    # lifecycle -------------------------------------------------------------------------------
    def start(self) -> Simulator:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.simulator = self  # type: ignore[attr-defined]
        threading.Thread(target=self._server.serve_forever, name="simulator", daemon=True).start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server, "simulator not started"
        return self._server.server_address[1]

    def url(self, mode: str = "normal", cell: str | None = None) -> str:
        """The base URL of a session in `mode`; `cell` is noise.route(...) of the cell and session (with its moment
        and slot, when given), if any."""
        if mode not in MODES and mode not in self.responders:
            raise ValueError(f"unknown simulator mode {mode!r}; known: {', '.join(MODES + tuple(self.responders))}")
        base = f"http://127.0.0.1:{self.port}{cell or ''}"
        return base if mode == "normal" else f"{base}/mode/{mode}"

    def sessions(self) -> dict[str, str]:
        """CLI session ids seen so far, with the mode each ran in (tests count paid sessions with it)."""
        with self._lock:
            return dict(self._sessions)

    # behaviour -------------------------------------------------------------------------------
    def session_noise(self, route: Route) -> SessionNoise:
        """The draws of the session a route names: its cell, and its bench's moment and slot when given."""
        return self.noise.session(route.cell, route.moment, route.slot)

    def reply(self, mode: str, body: dict[str, Any], route: Route = NO_ROUTE) -> Reply:
        """The agent's next message in the session `route` names (default: no route, the empty key)."""
        conv = conversation.parse(body)
        session = self.session_noise(route)
        if mode in self.responders:
            return self.responders[mode](conv, body)
        if mode == "escape":
            return agent.escape(conv, self.escape)
        book = self.playbook
        if book.task_for(conv.prompt) is None:
            task = generic.match(self.solved, conv.prompt)
            book = book if task is None else generic.playbook(conv, task)
        if mode == "no-skill":
            return agent.no_skill(conv, book, session)
        return agent.normal(conv, book, session)

    def overloaded(self, route: Route, session_id: str | None, body: dict[str, Any]) -> bool:
        """Whether to answer this attempt 529. A request is its session and its place in the conversation, so
        the CLI's retry of it is the same request; it is never refused more than max_retries times."""
        request = len(body.get("messages") or [])
        key = (route.cell, route.moment, session_id, request)
        with self._lock:
            attempt = self._overloads.get(key, 0)
            if attempt >= self.max_retries or not self.session_noise(route).overloaded(request, attempt):
                return False
            self._overloads[key] = attempt + 1
            self.overloads += 1
            return True

    def _seen(self, session_id: str | None, mode: str) -> None:
        with self._lock:
            self.requests += 1
            if session_id and session_id not in self._sessions:
                self._sessions[session_id] = mode
                if SESSION_LOG_ENV in os.environ:  # lets a test count sessions across processes (DVC stages)
                    with open(os.environ[SESSION_LOG_ENV], "a") as log:
                        log.write(f"{session_id} {mode}\n")


def _message(body: dict[str, Any], raw_len: int, reply: Reply, usage: dict[str, int]) -> dict[str, Any]:
    """The assistant message for `reply`; `usage` is the request's input split (PromptCache.usage)."""
    if reply.tool:
        name, tool_input = reply.tool
        tool_id = "toolu_sim_" + hashlib.sha256(
            json.dumps([raw_len, name, tool_input], sort_keys=True).encode()).hexdigest()[:20]
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        content.append({"type": "tool_use", "id": tool_id, "name": name, "input": tool_input})
        stop = "tool_use"
    else:
        content = [{"type": "text", "text": reply.text or ""}]
        stop = "end_turn"
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode() + str(raw_len).encode()).hexdigest()
    return {
        "id": "msg_sim_" + digest[:24],
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "simulated"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": tokens(len(json.dumps(content)))},
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "skillevo-simulator"

    def log_message(self, *args: object) -> None:  # quiet: tests and stages print their own progress
        pass

    @property
    def sim(self) -> Simulator:
        return self.server.simulator  # type: ignore[attr-defined]

    def _json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    openai = False  # this request came in OpenAI's dialect (openai_dialect.PATH): answer in it

    def _error(self, status: int, kind: str, message: str) -> None:
        if self.openai:
            return self._json(status, openai_dialect.error(status, message))
        self._json(status, {"type": "error", "error": {"type": kind, "message": message}})

    def do_GET(self) -> None:
        self._error(404, "not_found_error", f"simulator: no route for GET {urlsplit(self.path).path}")

    do_HEAD = do_GET

    def _authorized(self) -> bool:
        key = self.sim.api_key
        if key is None:
            return True
        given = self.headers.get("x-api-key") or self.headers.get("authorization", "").removeprefix("Bearer ")
        return given == key

    def do_POST(self) -> None:
        received = time.monotonic()  # a latency profile's TTFT counts from here, as the API's does
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if not self._authorized():
            return self._error(401, "authentication_error", "invalid x-api-key")
        try:  # behind a gateway, which keeps no path of its own, the host-side relay's header carries the route
            route = noise.parse_route(self.headers.get(noise.ROUTE_HEADER, "") + urlsplit(self.path).path)
        except RouteError as e:
            return self._error(400, "invalid_request_error", f"simulator route refused: {e}")
        mode, cell, path = route.mode, route.cell, route.api
        self.openai = path == openai_dialect.PATH
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            return self._error(400, "invalid_request_error", "body is not JSON")
        if path == "/v1/messages/count_tokens":
            return self._json(200, {"input_tokens": tokens(len(raw))})
        if path not in ("/v1/messages", openai_dialect.PATH):
            return self._error(404, "not_found_error", f"simulator: no route for POST {path}")
        if self.openai:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            body = openai_dialect.to_messages(body)
        if mode not in MODES and mode not in self.sim.responders:
            return self._error(400, "invalid_request_error", f"unknown simulator mode {mode}")
        session_id = self.headers.get("x-claude-code-session-id")
        self.sim._seen(session_id, mode)
        if mode in NOISY and self.sim.overloaded(route, session_id, body):
            return self._error(529, "overloaded_error", "Overloaded (simulated, seeded)")
        if mode == "overloaded":
            return self._error(529, "overloaded_error", "Overloaded (simulated)")
        if mode == "server-error":
            return self._error(500, "api_error", "Internal server error (simulated)")
        if mode == "hang":
            self.sim.stopping.wait()
            return None
        try:
            reply = self.sim.reply(mode, body, route=route)
        except Exception as e:  # noqa: BLE001 - a bug of the simulator or its playbook, never a transient API error
            failure = f"{type(e).__name__}: {e}"
            with self.sim._lock:
                self.sim.failures.append(failure)
            return self._error(400, "invalid_request_error", f"skillevo simulator failure (not an API error): "
                                                             f"{failure}")
        warm = mode in NOISY and self.sim.session_noise(route).warm  # a neighbour left the shared prefix cached
        message = _message(body, len(raw), reply, self.sim.cache.usage((cell, route.moment, session_id), body,
                                                                        len(raw), warm=warm))
        ttft_s, generate_s = 0.0, 0.0
        if self.sim.latency is not None:  # computed from the reply's tokens; it never changes them
            ttft_s, generate_s = self.sim.latency.pace(cell, len(body.get("messages") or []),
                                                       message["usage"]["output_tokens"])
        if not body.get("stream"):
            wait = received + ttft_s + generate_s - time.monotonic()  # the whole delay before a plain reply
            if wait > 0 and self.sim.stopping.wait(wait):
                self.close_connection = True
                return None
            if mode == "truncated":  # promise the whole body, send half, hang up
                data = json.dumps(message).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[: len(data) // 2])
                self.close_connection = True
                return None
            return self._json(200, openai_dialect.completion(message) if self.openai else message)
        if self.openai:
            return self._stream_openai(message, include_usage, truncate=(mode == "truncated"),
                                       wait=received + ttft_s + generate_s - time.monotonic())
        self._stream(message, truncate=(mode == "truncated"), start=received, ttft_s=ttft_s, generate_s=generate_s)

    def _stream_openai(self, message: dict[str, Any], include_usage: bool, truncate: bool, wait: float) -> None:
        """The reply as OpenAI's server-sent chunks, after the whole reply's latency (`wait`); `truncate` hangs up
        after the first chunk, with no finish and no [DONE]."""
        if wait > 0 and self.sim.stopping.wait(wait):
            self.close_connection = True
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        chunks = openai_dialect.chunks(message, include_usage)
        data = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks[:1 if truncate else None])
        self.wfile.write(data if truncate else data + b"data: [DONE]\n\n")
        self.wfile.flush()

    def _stream(self, message: dict[str, Any], truncate: bool, start: float, ttft_s: float = 0.0,
                generate_s: float = 0.0) -> None:
        """The reply as server-sent events. Each event is sent once the share of the output it completes is
        generated: `ttft_s` plus that share of `generate_s` after `start` (without latency, all at once, one
        delta per block). Events already due go out in one write."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

        def event(kind: str, data: dict[str, Any]) -> bytes:
            return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()

        blocks = []  # (content_block_start's block, delta type, delta field, the text it streams)
        for block in message["content"]:
            if block["type"] == "tool_use":
                blocks.append(({**block, "input": {}}, "input_json_delta", "partial_json", json.dumps(block["input"])))
            else:
                blocks.append(({"type": "text", "text": ""}, "text_delta", "text", block["text"]))
        total = sum(len(text) for *_, text in blocks) or 1
        size = CHUNK_TOKENS * BYTES_PER_TOKEN if ttft_s or generate_s else 0
        usage = message["usage"]
        start_msg = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
        events = [(0.0, event("message_start", {"type": "message_start", "message": start_msg}))]  # (share, bytes)
        done = 0
        for i, (head, kind, field, text) in enumerate(blocks):
            events.append((done / total, event("content_block_start", {"type": "content_block_start", "index": i,
                                                                       "content_block": head})))
            if truncate:  # cut the stream mid-event: no block stop, no message stop
                events.append((done / total, b"event: content_block_delta\ndata: {\"type\": \"content_bl"))
                break
            for piece in [text[j:j + size] for j in range(0, len(text), size)] if size and text else [text]:
                done += len(piece)
                events.append((done / total, event("content_block_delta", {
                    "type": "content_block_delta", "index": i, "delta": {"type": kind, field: piece}})))
            events.append((done / total, event("content_block_stop", {"type": "content_block_stop", "index": i})))
        else:
            events.append((1.0, event("message_delta", {
                "type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]}})))
            events.append((1.0, event("message_stop", {"type": "message_stop"})))
        due = bytearray()
        for share, data in events:
            wait = start + ttft_s + share * generate_s - time.monotonic()
            if wait > 0:
                if due:
                    self.wfile.write(due)
                    self.wfile.flush()
                    due.clear()
                if self.sim.stopping.wait(wait):
                    return
            due += data
        self.wfile.write(due)
        self.wfile.flush()
