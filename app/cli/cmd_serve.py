"""`specviz serve`: this machine's engine for a window on another (engines.host.relay)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from pathlib import Path

from ...engines.host import relay as srv


def register(sub) -> None:
    p = sub.add_parser(
        "serve", help="run engines here for a window elsewhere (`specviz --engine HOST:PORT`)",
        description="Listen for specviz windows and give each an engine process of its own. "
                    "A client must give the token shown at start. Plain TCP: keep the default "
                    "127.0.0.1 and reach it through an SSH tunnel.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: %(default)s, this machine only)")
    p.add_argument("--port", type=int, default=srv.DEFAULT_PORT,
                   help="TCP port (default: %(default)s; 0 picks a free one)")
    p.add_argument("--token-file", type=Path, metavar="FILE",
                   help="write the token to FILE (readable by you only) instead of showing it")
    p.add_argument("--max-clients", type=int, default=srv.MAX_CLIENTS,
                   help="windows served at once, each with its own engine (default: %(default)s)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    token = srv.new_token()
    if args.token_file is not None:
        _write_private(args.token_file, token)
    if not _is_loopback(args.host):
        print(f"specviz serve: listening on {args.host} without encryption: the token and the "
              "runs cross the network in the clear; prefer 127.0.0.1 and `ssh -L`",
              file=sys.stderr)

    def announce(address: srv.Address) -> None:
        print(f"specviz serve: listening on {address}; each window gets its own engine process")
        if args.token_file is None:
            print(f"token (shown once): {token}")
        else:
            print(f"token: in {args.token_file}")
        print(f"connect a window: {srv.TOKEN_ENV}=<token> specviz --engine {address}")
        print(f"from another machine: ssh -N -L {address.port}:127.0.0.1:{address.port} "
              "THIS-HOST, then the same command there")
        sys.stdout.flush()

    srv.serve(args.host, args.port, token, announce, max(1, args.max_clients))
    return 0


def _write_private(path: Path, token: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    os.chmod(path, 0o600)  # an existing file keeps its mode through O_CREAT


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
