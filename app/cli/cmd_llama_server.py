"""`specviz llama-server build|path`: specviz's own llama-server, built from the llama.cpp
sources inside the installed llama-cpp-python (engines/llama_build.py)."""

from __future__ import annotations

import argparse
import sys
import time

from ...engines import llama_build
from ...engines.servers.llama_speculation import known_types


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "llama-server", help="build and locate the llama-server that llama.cpp speculation "
                             "lanes start")
    commands = parser.add_subparsers(dest="llama_server_command", metavar="COMMAND",
                                     required=True)
    build = commands.add_parser(
        "build", help="build it from the installed llama-cpp-python's own llama.cpp sources "
                      "into specviz's cache (about six minutes on two cores, once)")
    build.add_argument("--force", action="store_true", help="build again even if it is built")
    build.set_defaults(func=cmd_build)
    path = commands.add_parser(
        "path", help=f"print the llama-server lanes run (${llama_build.ENV} overrides it) and "
                     "the speculation types it knows")
    path.set_defaults(func=cmd_path)


def cmd_build(args: argparse.Namespace) -> int:
    started = time.monotonic()
    was_built = llama_build.built_path().is_file()
    built = llama_build.build(say=_progress, force=args.force)
    if args.force or not was_built:
        _progress(f"built in {time.monotonic() - started:.0f} s")
    print(built)
    return 0


def cmd_path(args: argparse.Namespace) -> int:
    found = llama_build.require()
    print(found)
    _progress(f"speculation types: {', '.join(known_types(found))}")
    return 0


def _progress(text: str) -> None:
    """Progress on stderr, so that stdout is the path alone (for scripts)."""
    print(f"specviz: {text}", file=sys.stderr, flush=True)
