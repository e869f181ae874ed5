"""A bearer-token gateway for tests: a real HTTP server in front of an upstream (the simulator) that answers
only requests carrying `Authorization: Bearer <token>`, as an LLM gateway such as LiteLLM does. A 401 for
anything else (an `x-api-key`, another token, none), so a session that succeeds through it proves the token
arrived in that header; what every request carried is kept in `seen` (header names and whether it passed)."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}


class BearerGateway:
    """`with BearerGateway(upstream_url, token) as gw:` then point the endpoint backend at `gw.url`."""

    def __init__(self, upstream: str, token: str) -> None:
        parts = urlsplit(upstream)
        self.host, self.port, self.prefix = parts.hostname, parts.port, parts.path.rstrip("/")
        self.token = token
        self.down = False  # True: every request gets 503, as a gateway in an outage
        self.seen: list[dict] = []  # per request: {"authorized": bool, "headers": lower-case header names}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server, "gateway not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> BearerGateway:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.gateway = self  # type: ignore[attr-defined]
        threading.Thread(target=self._server.serve_forever, args=(0.05,), name="bearer-gateway", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        for key, value in headers:
            if key.lower() not in _HOP:
                self.send_header(key, value)
        self.send_header("content-length", str(len(body)))
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def do_POST(self) -> None:
        gw: BearerGateway = self.server.gateway  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if gw.down:
            return self._send(503, [("content-type", "application/json")],
                              b'{"type":"error","error":{"type":"api_error","message":"upstream unavailable"}}')
        authorized = self.headers.get("authorization") == f"Bearer {gw.token}"
        with gw._lock:
            gw.seen.append({"authorized": authorized, "headers": sorted(k.lower() for k in self.headers)})
        if not authorized:
            return self._send(401, [("content-type", "application/json")],
                              b'{"type":"error","error":{"type":"authentication_error",'
                              b'"message":"bearer token required"}}')
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        conn = http.client.HTTPConnection(gw.host, gw.port, timeout=300)
        try:
            conn.request("POST", gw.prefix + self.path, body=body, headers=headers)
            upstream = conn.getresponse()
            self._send(upstream.status, upstream.getheaders(), upstream.read())
        finally:
            conn.close()
