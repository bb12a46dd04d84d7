"""An engine on another machine (`specviz serve`), spoken to over TCP like a local one.

The same signals as app.run.engine_client: the window cannot tell the two apart except by the
lines they say. The token is sent first; the server answers with the engine's `hello`, or an
`error` and closes. A lost connection is the remote engine's death: one line, everything
received kept, and the next run connects again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from PySide6.QtCore import QObject
from PySide6.QtNetwork import QAbstractSocket, QTcpSocket

from ...engines.errors import SpecvizError
from ...engines.host import protocol
from ...engines.host.relay import TOKEN_ENV, Address
from .engine_client import EngineLink

CONNECT_MS = 5000


@dataclass(frozen=True)
class RemoteEngine:
    """Where the window's engines run instead of this machine, and the token to get in."""

    address: Address
    token: str = field(repr=False)  # never in a log line or a traceback's locals


def remote_engine(address: Address | None, ask: bool) -> RemoteEngine | None:
    """The engine at `address` with its token: from the environment, else asked for (never
    on the command line, where other users of the machine could read it)."""
    if address is None:
        return None
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token and ask:
        from PySide6.QtWidgets import QInputDialog, QLineEdit

        token, ok = QInputDialog.getText(None, "specviz", f"Token of the engine at {address} "
                                         "(shown by `specviz serve`):", QLineEdit.EchoMode.Password)
        token = token.strip() if ok else ""
    if not token:
        raise SpecvizError(f"no token for the engine at {address}: set {TOKEN_ENV} to the token "
                           "`specviz serve` showed")
    return RemoteEngine(address, token)


class RemoteEngineClient(EngineLink):
    def __init__(self, remote: RemoteEngine, device: str, parent: QObject | None = None) -> None:
        super().__init__(device, parent)
        self.address = remote.address
        self._token = remote.token
        self._socket: QTcpSocket | None = None
        self._pid: int | None = None
        self._last_word: str | None = None  # the server's own account of an ending
        self._closing = False

    @property
    def running(self) -> bool:
        return (self._socket is not None
                and self._socket.state() == QAbstractSocket.SocketState.ConnectedState)

    @property
    def pid(self) -> int | None:
        """The engine's process id on the serving machine."""
        return self._pid if self.running else None

    def ensure_started(self) -> None:
        if self.running:
            return
        self._buffer, self._closing, self._pid, self._last_word = b"", False, None, None
        sock = self._socket = QTcpSocket(self)
        sock.readyRead.connect(self._read)
        sock.disconnected.connect(self._disconnected)
        sock.connectToHost(self.address.host, self.address.port)
        if not sock.waitForConnected(CONNECT_MS):
            problem = sock.errorString()
            sock.abort()
            raise SpecvizError(f"cannot reach the engine at {self.address}: {problem}; is "
                               "`specviz serve` running there, and the tunnel open?")
        sock.write(protocol.encode("auth", token=self._token))

    def send(self, kind: str, **fields) -> None:
        if self.running:
            self._socket.write(protocol.encode(kind, **fields))

    def shutdown(self, timeout: float) -> bool:
        """Ask the remote engine to end; the server closes the connection once it has."""
        if not self.running:
            return True
        self._closing = True
        self.send("shutdown")
        self._socket.flush()
        ended = self._socket.waitForDisconnected(int(timeout * 1000))
        self._read()
        self._socket.abort()
        return ended

    def _read(self) -> None:
        if self._socket is not None:
            self._take(bytes(self._socket.readAll().data()))

    def _heard(self, message: protocol.Message) -> None:
        if message.kind == "hello":
            self._pid = message.fields.get("pid")
        elif message.kind == "died":
            self._last_word = message["message"]
        elif message.kind == "error" and message.fields.get("request") == "auth":
            self._last_word = (f"the engine at {self.address} refused this window: "
                               f"{message['message']} (the token `specviz serve` showed goes "
                               "in SPECVIZ_ENGINE_TOKEN)")

    def _disconnected(self) -> None:
        self._read()
        if self._closing:
            return
        self.died.emit(self._last_word or (
            f"the connection to the engine at {self.address} was lost. Everything received "
            "is kept; Run connects again"))
