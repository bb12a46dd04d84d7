"""A client of `specviz serve` for the tests: the real command in a subprocess and protocol
lines over a plain socket."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from specviz.engines.host import protocol
from specviz.engines.host import relay as srv


class Conn:
    """A client of `specviz serve`: protocol lines over a socket."""

    def __init__(self, address: srv.Address, source: str | None = None) -> None:
        """`source`: the client's own address (any of 127.0.0.0/8 on Linux), as clients on
        other machines have addresses of their own."""
        self.sock = socket.create_connection((address.host, address.port), timeout=60,
                                             source_address=(source, 0) if source else None)
        self.file = self.sock.makefile("rb")

    def send(self, kind: str, **fields) -> None:
        self.sock.sendall(protocol.encode(kind, **fields))

    def raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def next(self) -> protocol.Message | None:
        line = self.file.readline()
        return protocol.decode(line) if line else None  # None: the server closed

    def until(self, kind: str) -> list[protocol.Message]:
        seen = []
        while (message := self.next()) is not None:
            seen.append(message)
            if message.kind == kind:
                return seen
        raise AssertionError(f"closed before {kind}: {[m.kind for m in seen]}")

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def start_serve(home: Path, token_file: Path, *extra: str) -> tuple[subprocess.Popen,
                                                                    srv.Address]:
    """`specviz serve` on a free port of 127.0.0.1 with `home` as SPECVIZ_HOME, once it
    listens. Its log goes to `serve.log` beside the token file (a pipe nobody reads would
    stop the server once full)."""
    log = token_file.with_name("serve.log")
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specviz", "serve", "--port", "0", "--token-file",
             str(token_file), *extra], stdout=subprocess.PIPE, stderr=err,
            env={**os.environ, "SPECVIZ_HOME": str(home)})
    first = proc.stdout.readline().decode()
    if "listening on 127.0.0.1:" not in first:
        proc.kill()
        proc.wait()
        raise AssertionError(first + log.read_text())
    return proc, srv.parse_address(first.split("listening on ")[1].split(";")[0])


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
