"""One streamed completion from an OpenAI-compatible server: its server-sent events as dicts.

httpx does the HTTP (timeouts for connecting and for each read, streaming, proxies from the
environment); this module reads the `data:` lines of the event stream and turns every way a
server can fail into one line a lane can show: down, slow, an HTTP error with the server's
own message, a line that is not JSON, a stream cut before its end. The API key travels in the
request header only: it is never part of a message, a trace or a log line.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from ..bounded_json import loads
from ..errors import SpecvizError
from ..line_splitter import TOO_LONG, LineSplitter

DONE = "[DONE]"
MAX_LINE = 1 << 20  # a data line longer than this is not a completion chunk
MAX_BODY = 4 << 20  # a whole answer (properties, metrics, an error): read no further


class ServerError(SpecvizError):
    """The server could not be used; the message is one line for the lane."""


@dataclass(frozen=True)
class Endpoint:
    url: str  # the server's base URL, e.g. http://127.0.0.1:8080
    api_key: str | None = None
    connect_timeout: float = 5.0
    read_timeout: float = 60.0  # the longest wait for the next chunk

    def join(self, path: str) -> str:
        base = self.url.rstrip("/")
        if base.endswith("/v1") and path.startswith("/v1/"):
            path = path[3:]
        return base + path

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.read_timeout, connect=self.connect_timeout)


def get_json(endpoint: Endpoint, path: str) -> dict | list | None:
    """A small GET (the server's properties); None where the server has no such path, or
    answers with no JSON (too large, nested too deep, not JSON at all)."""
    status, body = get_body(endpoint, path)
    if status in (404, 405):
        return None
    if status >= 400:
        raise ServerError(_status_line(endpoint, status, _text(body)))
    try:
        data = loads(body)
    except ValueError:
        return None
    return data if isinstance(data, dict | list) else None


def get_body(endpoint: Endpoint, path: str, limit: int = MAX_BODY) -> tuple[int, bytes]:
    """A GET's status and body, the body cut at `limit` bytes (a server that sends more is
    not answering what was asked: the cut body reads as no JSON)."""
    try:
        with httpx.stream("GET", endpoint.join(path), headers=endpoint.headers(),
                          timeout=endpoint.timeout()) as response:
            return response.status_code, _read_some(response, limit)
    except httpx.HTTPError as exc:
        raise ServerError(_transport_line(endpoint, exc)) from None


def _read_some(response: httpx.Response, limit: int) -> bytes:
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > limit:
            break
    return bytes(body[:limit + 1])


def _text(body: bytes) -> str:
    return body[:MAX_LINE].decode("utf-8", "replace")


class EventStream:
    """The JSON objects of one streamed POST, in order; `close()` ends it early (the server
    then cancels the request)."""

    def __init__(self, endpoint: Endpoint, path: str, body: dict) -> None:
        self.endpoint = endpoint
        self._client = httpx.Client(timeout=endpoint.timeout(), headers=endpoint.headers())
        self._request = self._client.build_request("POST", endpoint.join(path), json=body)
        self._response: httpx.Response | None = None
        self.finished = False  # the stream reached its end ([DONE]) rather than being cut

    def __iter__(self) -> Iterator[dict]:
        try:
            yield from self._events()
        except httpx.HTTPError as exc:
            raise ServerError(_transport_line(self.endpoint, exc)) from None
        finally:
            self.close()

    def _events(self) -> Iterator[dict]:
        self._response = self._client.send(self._request, stream=True)
        if self._response.status_code >= 400:
            body = _text(_read_some(self._response, MAX_LINE))
            raise ServerError(_status_line(self.endpoint, self._response.status_code, body))
        for line in self._lines():
            data = _data(line)
            if data is None:
                continue
            if data == DONE:
                self.finished = True
                return
            yield _parse(data, self.endpoint)
        raise ServerError(f"{self.endpoint.url} ended the stream midway (no [DONE]); the "
                          "tokens so far are kept")

    def _lines(self) -> Iterator[str]:
        """The stream's lines, each of at most MAX_LINE bytes: a longer one is refused as
        it arrives, never held whole."""
        splitter = LineSplitter(MAX_LINE)
        for chunk in self._response.iter_bytes():
            for line in splitter.feed(chunk):
                if line is TOO_LONG:
                    raise ServerError(f"{self.endpoint.url} sent a line of more than "
                                      f"{MAX_LINE} bytes, not a completion chunk")
                yield line.rstrip(b"\r").decode("utf-8", "replace")
        if splitter.rest():
            yield splitter.rest().rstrip(b"\r").decode("utf-8", "replace")

    def close(self) -> None:
        if self._response is not None:
            self._response.close()
        self._client.close()


def _data(line: str) -> str | None:
    """The payload of a `data:` line; None for comments, event names, ids and blank lines."""
    if not line.startswith("data:"):
        return None
    return line[5:].strip()


def _parse(data: str, endpoint: Endpoint) -> dict:
    if len(data) > MAX_LINE:
        raise ServerError(f"{endpoint.url} sent a line of {len(data)} characters, not a "
                          "completion chunk")
    try:
        chunk = loads(data)
    except ValueError as exc:
        raise ServerError(f"{endpoint.url} sent something that is not JSON: "
                          f"{data[:80]!r} ({exc})") from None
    if not isinstance(chunk, dict):
        raise ServerError(f"{endpoint.url} sent JSON that is not an object: {data[:80]!r}")
    if "error" in chunk:  # some servers report a failure inside the stream
        raise ServerError(f"{endpoint.url} failed midway: {_error_text(chunk['error'])}")
    return chunk


def _transport_line(endpoint: Endpoint, exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.ConnectError):
        return f"cannot reach {endpoint.url}: is the server running? ({_short(exc)})"
    if isinstance(exc, httpx.ConnectTimeout):
        return f"{endpoint.url} did not answer within {endpoint.connect_timeout:g} s"
    if isinstance(exc, httpx.ReadTimeout):
        return (f"{endpoint.url} sent nothing for {endpoint.read_timeout:g} s; the tokens so "
                "far are kept")
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"{endpoint.url} broke the connection midway; the tokens so far are kept"
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
        return f"not a server URL: {endpoint.url!r} (give http://HOST:PORT)"
    return f"{endpoint.url}: {type(exc).__name__}: {_short(exc)}"


def _status_line(endpoint: Endpoint, status: int, body: str) -> str:
    message = body.strip()
    try:
        data = loads(message)
        if isinstance(data, dict) and "error" in data:
            message = _error_text(data["error"])
    except ValueError:
        pass
    hint = " (check the API key: --api-key-env)" if status in (401, 403) else ""
    return f"{endpoint.url} answered HTTP {status}: {_short(message) or 'no message'}{hint}"


def _error_text(error) -> str:
    if isinstance(error, dict):
        return _short(str(error.get("message") or error))
    return _short(str(error))


def _short(text: str, limit: int = 160) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
