"""The `specviz` command line: `specviz` opens the window; subcommands run headless."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ... import __version__
from ...engines.errors import SpecvizError
from .one_line_parser import OneLineParser


def build_parser() -> argparse.ArgumentParser:
    from . import (
        cmd_doctor,
        cmd_export,
        cmd_llama_server,
        cmd_models,
        cmd_replay,
        cmd_run,
        cmd_serve,
        options,
    )

    parser = OneLineParser(
        prog="specviz",
        description="See speculative decoding happen. Without a command, opens the window.",
    )
    parser.add_argument("--version", action="version", version=f"specviz {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for module in (cmd_run, cmd_replay, cmd_models, cmd_doctor, cmd_serve, cmd_export,
                   cmd_llama_server):
        module.register(sub)
    _register_optional(sub)
    options.no_abbreviations(parser)
    return parser


def _register_optional(sub) -> None:
    """Commands whose modules may pull in heavier dependencies register only if present."""
    import importlib

    for name in ("cmd_bench", "cmd_pair", "cmd_advise", "cmd_profile", "cmd_train_heads",
                 "cmd_heads", "cmd_gui", "cmd_anatomy"):
        try:
            module = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.{name}":
                raise
            continue
        module.register(sub)


def sub_choices(parser: argparse.ArgumentParser) -> set[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


# Commands that draw with Qt: an exception raised in a Qt callback (a paint event) is printed
# and dropped there, so SIGTERM keeps its default (the process ends at once).
QT_COMMANDS = ("gui", "shot", "export", "anatomy")


# The signals that end a headless command as SIGTERM does, and the word each is said with:
# a closed terminal (SIGHUP) and Ctrl-\\ (SIGQUIT) too, so none ends a run without a line.
ENDING = {signal.SIGTERM: "terminated", signal.SIGHUP: "hung up", signal.SIGQUIT: "quit"}


class Terminated(KeyboardInterrupt):
    """An ending signal, unwound as Ctrl-C is (a run stops, its trace is closed whole)."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum


def _terminate(signum: int, _frame: object) -> None:
    signal.signal(signum, signal.SIG_DFL)  # a second one ends it at once
    raise Terminated(signum)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        if "gui" not in sub_choices(parser):
            parser.print_help()
            return 0
        args = parser.parse_args(["gui"])
    with _sigterm_unwinds(args.command not in QT_COMMANDS):
        return _run(args)


@contextmanager
def _sigterm_unwinds(wanted: bool) -> Iterator[None]:
    """Within the block each ending signal raises Terminated (the caller's handlers back
    after it: tests call `main` in their own process)."""
    if not wanted or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _terminate) for signum in ENDING}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _run(args: argparse.Namespace) -> int:
    try:
        from .cmd_models import fetch_named
        from .options import settle_backend

        _cap_threads(args)
        fetch_named(args)
        settle_backend(args)
        return int(args.func(args) or 0)
    except SpecvizError as exc:
        print(f"specviz: {exc}", file=sys.stderr)
        return 2
    except Terminated as exc:
        print(f"specviz: {ENDING[exc.signum]}", file=sys.stderr)
        return 128 + exc.signum  # as a shell reports a process ended by the signal
    except KeyboardInterrupt:
        print("specviz: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `specviz run ... | head`: the reader has what it wanted
        _quiet_stdout()
        return 141  # as a shell reports a process ended by SIGPIPE


def _cap_threads(args: argparse.Namespace) -> None:
    from ...engines.machine.hardware import capped_threads

    if getattr(args, "threads", None) is not None:
        args.threads, said = capped_threads(args.threads)
        if said:
            print(f"specviz: {said}", file=sys.stderr)


def _quiet_stdout() -> None:
    """Send what is still buffered for the closed pipe nowhere, so the interpreter's own
    flush at exit prints no traceback (Python's documented recipe for SIGPIPE)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
