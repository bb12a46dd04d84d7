"""`specviz serve`: this machine's engine for a window on another (engines.host.relay)."""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys
from pathlib import Path

from ...engines import atomic
from ...engines.errors import SpecvizError
from ...engines.host import relay as srv
from ...engines.host.confine import Confinement


def register(sub) -> None:
    p = sub.add_parser(
        "serve", help="run engines here for a window elsewhere (`specviz --engine HOST:PORT`)",
        description="Listen for specviz windows and give each an engine process of its own. "
                    "A client must give the token shown at start. Plain TCP: keep the default "
                    "127.0.0.1 and reach it through an SSH tunnel.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: %(default)s, this machine only; every "
                        "interface, '' or 0.0.0.0 or ::, only with --all-interfaces)")
    p.add_argument("--all-interfaces", action="store_true",
                   help="allow a --host that listens on every interface of this machine")
    p.add_argument("--allow", type=Path, action="append", default=[], metavar="DIR",
                   help="a folder whose files (corpora, suffix memories, heads) a client's run "
                        "may name, besides specviz's own cache; repeatable. Models may be "
                        "named anywhere")
    p.add_argument("--port", type=int, default=srv.DEFAULT_PORT,
                   help="TCP port (default: %(default)s; 0 picks a free one)")
    p.add_argument("--token-file", type=Path, metavar="FILE",
                   help="write the token to FILE (readable by you only) instead of showing it")
    p.add_argument("--max-clients", type=int, default=srv.MAX_CLIENTS,
                   help="windows served at once, each with its own engine (default: %(default)s)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if _listens_everywhere(args.host) and not args.all_interfaces:
        raise SpecvizError(f"--host {args.host!r} listens on every interface of this machine; "
                           "add --all-interfaces to mean it, or keep 127.0.0.1 and use `ssh -L`")
    confine = Confinement.for_host(_folders(args.allow))
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
        print("files a run may name besides models: under "
              + ", ".join(map(str, confine.roots)))
        sys.stdout.flush()

    srv.serve(args.host, args.port, token, announce, max(1, args.max_clients), confine)
    return 0


def _folders(given: list[Path]) -> list[Path]:
    for folder in given:
        if not folder.is_dir():
            raise SpecvizError(f"--allow {folder}: no such folder")
    return given


def _write_private(path: Path, token: str) -> None:
    """A new file (0600 from its creation) renamed over `path`: a link there is replaced,
    never followed, and no one reads the token while it is written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise atomic.cannot_write(path, exc) from None
    atomic.write_text(path, token + "\n", mode=0o600)


def _listens_everywhere(host: str) -> bool:
    """Whether listening on `host` listens on every interface ('', 0.0.0.0, ::, 0, ...)."""
    if not host.strip() or host.strip() == "*":
        return True
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError):
        return False  # listening fails then, with its own line
    return any(ipaddress.ip_address(info[4][0].split("%")[0]).is_unspecified for info in found)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
