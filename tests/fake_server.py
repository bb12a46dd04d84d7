"""A local HTTP server that answers with canned event streams, for server-lane tests.

`FakeServer(routes)` serves on 127.0.0.1 on a free port; a route maps (method, path) to a
handler `handler(body: dict) -> Reply`. A reply streams its `lines` (each sent as it is, with
an optional pause before it) or sends a status and a JSON body; `cut` closes the connection
without the stream's end. `chunked` sends the stream in HTTP chunks, as uvicorn sends vLLM's
and SGLang's: a cut then leaves the body incomplete, as a server that dies midway does.
Requests received are kept in `requests` (path, body, headers).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from engine_waits import HUNG_S


@dataclass
class Reply:
    status: int = 200
    json_body: object = None
    lines: list[str] = field(default_factory=list)  # SSE lines, sent in order
    pause: float = 0.0  # seconds before each line
    cut: bool = False  # end the connection without the blank line after the last event
    # After this many lines, fall silent for `stall` seconds, or until `stall` (an Event) is
    # set: the test's own word, however late a busy machine runs either side.
    stall_after: int | None = None
    stall: float | threading.Event = 0.0
    chunked: bool = False  # Transfer-Encoding: chunked, each line its own chunk


def sse(chunks: list[dict], done: bool = True) -> list[str]:
    lines = [f"data: {json.dumps(c)}\n\n" for c in chunks]
    return lines + (["data: [DONE]\n\n"] if done else [])


class FakeServer:
    def __init__(self, routes: dict[tuple[str, str], Callable[[dict], Reply]]) -> None:
        self.routes = routes
        self.requests: list[tuple[str, dict, dict]] = []
        handler = _handler(self)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler(server: FakeServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            self._answer("GET", {})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            self._answer("POST", body)

        def _answer(self, method: str, body: dict) -> None:
            server.requests.append((self.path, body, dict(self.headers)))
            route = server.routes.get((method, self.path))
            reply = route(body) if route else Reply(404, {"error": "not found"})
            if not reply.lines:
                data = json.dumps(reply.json_body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_response(reply.status)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            if reply.chunked:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.close_connection = True
            try:
                for n, line in enumerate(reply.lines):
                    if n == reply.stall_after and isinstance(reply.stall, threading.Event):
                        reply.stall.wait(HUNG_S)
                    elif n == reply.stall_after:
                        time.sleep(reply.stall)
                    time.sleep(reply.pause)
                    self._send(line.encode(), reply.chunked)
                if reply.chunked and not reply.cut:
                    self.wfile.write(b"0\r\n\r\n")  # the body's end
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return  # the client closed the stream (stop)

        def _send(self, data: bytes, chunked: bool) -> None:
            if chunked:
                data = b"%x\r\n%s\r\n" % (len(data), data)
            self.wfile.write(data)
            self.wfile.flush()

    return Handler
