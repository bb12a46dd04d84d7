"""`specviz serve`: engine processes for windows on other machines, over TCP.

Each client that gives the token gets an engine process of its own (engines.host.engine_process)
and the two are relayed line by line. What the engine says goes to the client as it is. What
the client sends is checked first: a line of at most `MAX_LINE` bytes, a message of this
protocol, a request with the fields it needs and, for a run, a spec that parses. It is then
forwarded re-encoded; anything else is answered with an `error` line and the connection
stays. Nothing a client sends runs except as one of those requests. An engine that dies ends
its client's connection after a `died` line, never the server.

The client holds the token, not the host: a run's files other than its models must lie under
the folders the host allows (engines.host.confine), checked here before the engine sees the
spec. Before it has given the token a connection is one of at most `MAX_PENDING`, of which at
most `MAX_PENDING_PER_HOST` come from one client address, its first line at most `AUTH_LINE`
bytes, given within `AUTH_S` seconds. The token decides who is served, not the address: a new
connection past either cap takes the place of the longest waiting one (of its own address, or
of all), so connections that never sign in cannot keep a client out, even where every client
comes through one SSH tunnel's address. Refusals and faults are logged a few a window of time,
the rest counted (log_limit.py), so a flood of connections cannot flood the log.

The protocol is plain TCP: the server listens on 127.0.0.1 unless told otherwise, and a window
on another machine reaches it through an SSH tunnel (`ssh -L`), as Jupyter and TensorBoard do.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import sys
import traceback
from collections import Counter, deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field

from ..errors import SpecvizError
from ..line_splitter import TOO_LONG, LineSplitter
from ..oracles.registry import SERVER
from . import protocol
from . import run_spec as rs
from .confine import Confinement, OutsideAllowed
from .exit_line import death_line
from .log_limit import LimitedLog

DEFAULT_PORT = 7341
TOKEN_ENV = "SPECVIZ_ENGINE_TOKEN"  # where a window looks for the token
MAX_LINE = 4 << 20  # a run spec with a long prompt fits several times over
MAX_CLIENTS = 4
MAX_PENDING = 8  # connections not signed in yet; one more is refused at once
MAX_PENDING_PER_HOST = 2  # of them from one address: one client cannot hold every slot
AUTH_LINE = 4 << 10  # the auth line: a token is 32 characters
AUTH_S = 10.0  # a connection that sends no token within this is closed
WRONG_TOKEN_S = 1.0  # each wrong guess costs this long
CLOSE_S = 5.0  # an engine whose client left is given this long to end, then killed
ENGINE_LINE = 1 << 30  # the engine's own lines are trusted; a long run's summary is large
STDERR_LINES = 20
ENGINE_COMMAND = (sys.executable, "-m", "specviz.engines.host.engine_process")


@dataclass(eq=False)
class Waiting:
    """A connection that has not signed in yet, and its sign-in, cancelled where a newer
    connection takes its place."""

    host: str
    sign_in: asyncio.Future = field(repr=False)
    replaced: bool = False


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_address(text: str) -> Address:
    """HOST:PORT ([::1]:PORT for IPv6; :PORT for this machine)."""
    host, sep, port = text.strip().rpartition(":")
    try:
        number = int(port) if sep else 0
    except ValueError:
        number = 0
    if not 0 < number < 65536:
        raise SpecvizError(f"{text!r} is not an engine address: HOST:PORT, e.g. "
                           f"127.0.0.1:{DEFAULT_PORT}")
    return Address(host.strip("[]") or "127.0.0.1", number)


def new_token() -> str:
    return secrets.token_urlsafe(24)


class ClientLines:
    """The lines a client sends, one at a time; EOFError once it has gone."""

    def __init__(self, reader: asyncio.StreamReader, limit: int) -> None:
        self._reader = reader
        self._splitter = LineSplitter(limit)
        self._lines: deque[bytes | None] = deque()

    async def next(self) -> bytes | None:
        while not self._lines:
            data = await self._reader.read(1 << 16)
            if not data:
                raise EOFError
            self._take(data)
        return self._lines.popleft()

    async def first(self, limit: int) -> bytes | None:
        """The first line, or TOO_LONG once it has passed `limit` bytes (nothing more is read
        then); what follows it is kept for `next`, under the full limit."""
        buffer = bytearray()
        while (end := buffer.find(b"\n")) < 0 or not buffer[:end].strip():
            if end >= 0:  # a blank line before it
                del buffer[:end + 1]
            elif len(buffer) > limit:
                return TOO_LONG
            else:
                data = await self._reader.read(limit + 1 - len(buffer))
                if not data:
                    raise EOFError
                buffer += data
        self._take(bytes(buffer[end + 1:]))
        return bytes(buffer[:end])

    def _take(self, data: bytes) -> None:
        self._lines.extend(line for line in self._splitter.feed(data)
                           if line is TOO_LONG or line.strip())


def check_request(line: bytes, confine: Confinement | None = None) -> protocol.Message:
    """The request a client's line holds, checked, a run's files confined to what `confine`
    allows (default: specviz's own folders) and resolved; ProtocolError says what is wrong."""
    message = protocol.decode(line)
    protocol.check_request(message)
    if message.kind == "auth":
        raise protocol.ProtocolError("already signed in")
    if message.kind == "secret":
        raise protocol.ProtocolError("secret: API keys stay on the window's machine")
    try:
        if message.kind == "run":
            spec = rs.from_dict(message["spec"])
            if any(lane.oracle == SERVER for lane in spec.lanes.values()):
                raise protocol.ProtocolError(
                    "run: server lanes run in the window's own engine; `specviz serve` makes "
                    "no requests to other hosts")
            spec = (confine or Confinement.for_host()).run(spec)
            message = protocol.Message("run", {**message.fields, "spec": rs.to_dict(spec)})
        elif message.kind in ("profile", "pair"):
            rs.model_from_dict(message["model"])
    except OutsideAllowed as exc:
        raise protocol.ProtocolError(f"run: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise protocol.ProtocolError(f"{message.kind}: bad spec: {exc}") from None
    return message


def error_line(message: str, request: str | None) -> bytes:
    return protocol.encode("error", message=message, request=request)


class Relay:
    """One signed-in client and its engine process."""

    def __init__(self, lines: ClientLines, writer: asyncio.StreamWriter, command, max_line: int,
                 confine: Confinement):
        self.lines, self.writer = lines, writer
        self.command, self.max_line, self.confine = command, max_line, confine
        self.proc: asyncio.subprocess.Process | None = None
        self.asked_to_end = False  # the client sent shutdown, or left
        self.client_gone = False
        self.build = ""
        self.stderr: deque[str] = deque(maxlen=STDERR_LINES)

    async def run(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, limit=ENGINE_LINE)
        upstream = asyncio.ensure_future(self._from_client())
        downstream = asyncio.ensure_future(self._from_engine())
        stderr = asyncio.ensure_future(self._engine_stderr())
        try:
            done, _ = await asyncio.wait({upstream, downstream},
                                         return_when=asyncio.FIRST_COMPLETED)
            if upstream in done and upstream.result():  # the client asked to end, or left
                self.asked_to_end = True
                await self._end_engine()
            await asyncio.gather(downstream, stderr)
        finally:
            upstream.cancel()
            code = await self._ended()
        if not self.asked_to_end:
            crashed = code < 0
            self._send(protocol.encode("died", message=death_line(
                -code if crashed else code, crashed, self.build, list(self.stderr))))
            await self._drain()

    async def _from_client(self) -> bool:
        """Until the client ends it (True: it left or asked) or the engine has gone."""
        while True:
            try:
                line = await self.lines.next()
            except (EOFError, ConnectionError):
                self.client_gone = True
                return True
            if line is TOO_LONG:
                self._send(error_line(f"a message longer than {self.max_line} bytes was "
                                      "refused", None))
                continue
            try:
                message = check_request(line, self.confine)
            except protocol.ProtocolError as exc:
                self._send(error_line(str(exc), _kind_of(line)))
                continue
            if not await self._forward(message):
                return False
            if message.kind == "shutdown":
                return True

    async def _forward(self, message: protocol.Message) -> bool:
        """To the engine, re-encoded: only what was checked reaches it."""
        try:
            self.proc.stdin.write(protocol.encode(message.kind, **message.fields))
            await self.proc.stdin.drain()
        except (ConnectionError, RuntimeError):  # the engine has gone; _from_engine says so
            return False
        return True

    async def _from_engine(self) -> None:
        async for line in self.proc.stdout:
            if b'"msg":"started"' in line:
                with suppress(protocol.ProtocolError):
                    self.build = protocol.decode(line).fields.get("build", self.build)
            self._send(line)
            await self._drain()

    async def _engine_stderr(self) -> None:
        async for raw in self.proc.stderr:
            text = raw.decode("utf-8", "replace")
            sys.stderr.write(text)  # the engine's warnings stay in the server's log
            if text.strip():
                self.stderr.append(text.rstrip())

    async def _end_engine(self) -> None:
        with suppress(ConnectionError, RuntimeError):
            self.proc.stdin.close()  # the engine reads the end of its input as shutdown
        await self._ended()

    async def _ended(self) -> int:
        """The engine's exit status, killed if it has not ended within CLOSE_S. Never a
        kill before that: killing a process that has just ended reaps it before asyncio
        does, which then reports 255 instead of the signal that ended it."""
        try:
            return await asyncio.wait_for(asyncio.shield(self.proc.wait()), CLOSE_S)
        except asyncio.TimeoutError:
            self.proc.kill()
            return await self.proc.wait()

    def _send(self, data: bytes) -> None:
        if not self.client_gone and not self.writer.is_closing():
            self.writer.write(data)

    async def _drain(self) -> None:
        try:
            await self.writer.drain()
        except ConnectionError:
            self.client_gone = True


def _kind_of(line: bytes) -> str | None:
    with suppress(protocol.ProtocolError):
        return protocol.decode(line).kind
    return None


class EngineServer:
    """Listens, signs clients in, and relays each to an engine process of its own."""

    def __init__(self, token: str, command=ENGINE_COMMAND, max_clients: int = MAX_CLIENTS,
                 max_line: int = MAX_LINE, log: Callable[[str], None] | None = None,
                 confine: Confinement | None = None, auth_s: float = AUTH_S) -> None:
        self._token = token.encode()
        self.auth_s = auth_s  # the tests give a short one: they wait for no real 10 s
        self.command, self.max_clients, self.max_line = tuple(command), max_clients, max_line
        self.log = log or (lambda text: print(f"specviz serve: {text}", file=sys.stderr))
        self.confine = confine or Confinement.for_host()
        self.relays: set[Relay] = set()
        self.waiting: list[Waiting] = []  # connections not signed in yet, oldest first
        self._server: asyncio.AbstractServer | None = None
        self._refusals = LimitedLog(self.log, "refused", schedule=_later)
        self._faults = LimitedLog(self.log, "faults", schedule=_later)
        self._traced = False  # a fault's traceback is logged once, the rest in a line each

    @property
    def pending(self) -> Counter[str]:
        """The connections not signed in yet, by client address."""
        return Counter(w.host for w in self.waiting)

    async def start(self, host: str, port: int) -> Address:
        self._server = await asyncio.start_server(self._client, host, port)
        return Address(host, self._server.sockets[0].getsockname()[1])

    async def serve_forever(self) -> None:
        await self._server.serve_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer, host, relay = _peer(writer), _host(writer), None
        try:
            if len(self.relays) >= self.max_clients:
                await self._refuse(writer, peer, f"busy: {self.max_clients} clients are "
                                   "connected, the most this server takes", "auth")
                return
            lines = ClientLines(reader, self.max_line)
            problem = await self._signed_in(lines, host)
            if problem:
                await self._refuse(writer, peer, problem, "auth")
                return
            relay = Relay(lines, writer, self.command, self.max_line, self.confine)
            self.relays.add(relay)
            self.log(f"{peer} connected; an engine process of its own starts")
            try:
                await relay.run()
            finally:
                self.relays.discard(relay)
        except Exception as exc:  # a fault of the server's own: this client's connection ends
            self._fault(peer, exc)
        finally:
            writer.close()
            with suppress(ConnectionError):
                await writer.wait_closed()
            if relay is not None:  # one that never signed in was said in its refusal
                self.log(f"{peer} disconnected")

    async def _signed_in(self, lines: ClientLines, host: str) -> str | None:
        """None once the connection has signed in; else why it is refused. It waits as one
        of the connections signing in, its place given to a newer one where the caps are
        reached (`_make_room`)."""
        self._make_room(host)
        me = Waiting(host, asyncio.ensure_future(self._sign_in(lines)))
        self.waiting.append(me)
        try:
            return await me.sign_in
        except asyncio.CancelledError:
            if not me.replaced:  # the server is ending
                raise
            return ("a newer connection took this one's place before it gave the token "
                    f"(at most {MAX_PENDING} wait, {MAX_PENDING_PER_HOST} from one address)")
        finally:
            me.sign_in.cancel()
            if me in self.waiting:
                self.waiting.remove(me)

    def _make_room(self, host: str) -> None:
        """Where `host` has its most connections waiting, or the server its most, the one
        waiting longest of them is closed: a client that signs in at once is never kept out
        by connections that do not."""
        mine = [w for w in self.waiting if w.host == host]
        if len(mine) >= MAX_PENDING_PER_HOST:
            self._replace(mine[0])
        elif len(self.waiting) >= MAX_PENDING:
            self._replace(self.waiting[0])

    def _replace(self, waiting: Waiting) -> None:
        waiting.replaced = True
        self.waiting.remove(waiting)
        waiting.sign_in.cancel()

    def _fault(self, peer: str, exc: Exception) -> None:
        """A fault of the server's own, logged in a line (the first with its traceback)."""
        if not self._traced:
            self._traced = True
            traceback.print_exception(exc, file=sys.stderr)
        self._faults(f"a fault serving {peer} ended its connection: "
                     f"{type(exc).__name__}: {str(exc)[:200]}")

    async def _sign_in(self, lines: ClientLines) -> str | None:
        """None when the first line holds the token; else why the client is refused."""
        try:
            line = await asyncio.wait_for(lines.first(AUTH_LINE), self.auth_s)
        except asyncio.TimeoutError:
            return f"no token within {self.auth_s:g} s"
        except (EOFError, ConnectionError):
            return "left before giving the token"
        if line is TOO_LONG:
            return f"the first message must be auth {{token}}, under {AUTH_LINE} bytes"
        try:
            message = protocol.decode(line)
        except protocol.ProtocolError as exc:
            return str(exc)
        token = message.fields.get("token") if message.kind == "auth" else None
        if not isinstance(token, str):
            return "the first message must be auth {token}"
        if not hmac.compare_digest(token.encode(), self._token):
            await asyncio.sleep(WRONG_TOKEN_S)
            return "wrong token"
        return None

    async def _refuse(self, writer: asyncio.StreamWriter, peer: str, problem: str,
                      request: str | None) -> None:
        self._refusals(f"refused {peer}: {problem}")
        writer.write(error_line(problem, request))
        with suppress(ConnectionError):
            await writer.drain()


def _later(delay: float, then: Callable[[], None]) -> None:
    asyncio.get_running_loop().call_later(max(delay, 0.0), then)


def _host(writer: asyncio.StreamWriter) -> str:
    """The client's address without its port: what one client holds slots by."""
    name = writer.get_extra_info("peername")
    return str(name[0]) if name else "?"


def _peer(writer: asyncio.StreamWriter) -> str:
    name = writer.get_extra_info("peername")
    return str(Address(*name[:2])) if name else "a client"


def serve(host: str, port: int, token: str, announce: Callable[[Address], None],
          max_clients: int = MAX_CLIENTS, confine: Confinement | None = None) -> None:
    """Listen until interrupted; `announce` is told the address once it listens."""
    async def main() -> None:
        server = EngineServer(token, max_clients=max_clients, confine=confine)
        try:
            address = await server.start(host, port)
        except OSError as exc:
            raise SpecvizError(f"cannot listen on {Address(host, port)}: {exc.strerror or exc}"
                               ) from None
        announce(address)
        await server.serve_forever()

    asyncio.run(main())
