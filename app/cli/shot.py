"""`specviz shot`: the window after a run or a full replay, saved as a PNG, no person needed.

The window runs with throw-away settings (a temporary INI file), so a shot neither reads nor
changes what a person's window remembers. The picture is written whole or not at all; Ctrl-C
stops the shot with nothing written.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import tempfile
from pathlib import Path

from PySide6.QtCore import QSettings

from ...board.one_prompt import check_one_prompt
from ...engines.atomic import cannot_write
from ...engines.errors import SpecvizError
from ...engines.host.run_spec import LaneSpec, ServerSpec
from ...engines.oracles import ORACLE_INFO, is_plain
from ...engines.oracles.registry import SERVER
from ...engines.trace import read_trace
from ..export.files import save_png
from ..main_window import MainWindow
from ..qt_app import freeze_heap, make_app
from ..run.interrupt import CtrlC, ctrl_c_stops
from ..run.remote_engine import remote_engine
from ..state.settings import AppSettings
from . import options
from .cmd_run import read_prompt

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")


def take_shot(args: argparse.Namespace) -> int:
    args.out = picture_name(args)
    if not args.replay and not (args.prompt or args.prompt_file):
        raise SpecvizError("give traces with --replay FILE..., or a prompt with --prompt TEXT "
                           "or --prompt-file F")
    problems = _checked_traces(args.replay or [])
    check_writable(args.out)  # before the run, not after minutes of it
    app, loop = make_app(offscreen_if_headless=True)
    with tempfile.TemporaryDirectory() as tmp, loop, ctrl_c_stops(loop) as ctrl_c:
        window = _window(args, Path(tmp))
        try:
            ctrl_c.check()
            status = (_replay(window, args.replay) if args.replay
                      else ctrl_c.run(_live(window, args)))
            _settle(app, window, ctrl_c)
            save_png(window, args.out)
        finally:
            window.close()  # closing stops a run still going (Ctrl-C) and its engine
    if problems:  # the picture shows what was readable; the console says what was not
        print(f"specviz: {problems[0]}; saved {args.out} with the steps before it",
              file=sys.stderr)
        return 2
    print(f"saved {args.out}", file=sys.stderr)
    return status


def _checked_traces(paths: list[Path]) -> list[str]:
    """The problems of traces whose tail is corrupt (drawn as far as they go, and said after).
    A trace with nothing readable (missing, not a trace), or traces of different prompts,
    stop the shot before anything is drawn or saved."""
    traces = [read_trace(path) for path in paths]
    check_one_prompt(traces)
    return [str(trace.problem) for trace in traces if trace.problem]


def check_writable(out: Path) -> None:
    """One line naming `out` where it is a folder, or its folder is missing or cannot take a
    file."""
    if out.is_dir():
        raise cannot_write(out, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR)))
    try:
        with tempfile.NamedTemporaryFile(dir=out.parent, prefix=f".{out.name}.",
                                         suffix=".part"):
            pass
    except OSError as exc:
        raise cannot_write(out, exc) from None


def _window(args: argparse.Namespace, tmp: Path) -> MainWindow:
    """The window with throw-away settings, sized and themed as asked, shown."""
    store = QSettings(str(tmp / "shot.ini"), QSettings.Format.IniFormat)
    store.setValue("view/theme", args.theme)
    window = MainWindow(AppSettings(store), interactive=False,
                        remote=remote_engine(args.engine, ask=False))
    window.resize(*args.size)
    if args.presentation:
        window.set_presentation(True, fullscreen=False)
    window.show()
    freeze_heap()
    return window


def picture_name(args: argparse.Namespace) -> Path:
    """OUT.png, also where it was typed after the traces (`--replay a.jsonl out.png`, which
    argparse reads as one more trace)."""
    if args.out is not None:
        return args.out
    if args.replay and len(args.replay) > 1 and args.replay[-1].suffix.lower() in IMAGE_SUFFIXES:
        return args.replay.pop()
    raise SpecvizError("name the picture to save: specviz shot OUT.png --replay TRACE...")


def _replay(window: MainWindow, paths: list[Path]) -> int:
    player = window.open_replay(paths)
    if player is None:
        return 2
    player.finish()
    window.board.drain()
    unreadable = [s for s in window.board.model.lanes.values() if not s.steps]
    return 2 if unreadable else 0


async def _live(window: MainWindow, args: argparse.Namespace) -> int:
    prompt = read_prompt(args)
    window.board.remove_all()
    for lane in lane_configs(args):
        window.add_lane(lane)
    window.prompt.set_prompt(prompt)
    window.prompt.set_model_choice(options.model_choice(args))
    window.prompt.max_tokens.setValue(args.max_tokens)
    window.prompt.temperature.setValue(args.temperature)
    window.prompt.streams.setValue(args.streams)
    task = window.start_run()
    if task is None:
        raise SpecvizError("nothing to run: give at least one oracle with --oracles")
    await task
    failed = [f"{lane.oracle_name()}: {lane.message.text()}"
              for lane in window.board.lanes.values() if lane.view.token_count == 0]
    for line in failed:
        print(f"specviz: lane {line}", file=sys.stderr)
    if window.runner.crash:
        print(f"specviz: {window.runner.crash}", file=sys.stderr)
        return 2
    return 2 if len(failed) == len(window.board.lanes) else 0


def lane_configs(args: argparse.Namespace) -> list[LaneSpec]:
    """One lane per `--oracles` name, all with `--k` (auto: each lane chooses its own; plain
    decoding has no K to choose), then one per `--server` URL."""
    auto = args.k == options.AUTO
    names = args.oracles if args.oracles is not None else (
        "" if args.server else "none,prompt-lookup")
    # Every lane holds every input given (a lane keeps what its oracle does not read, as in
    # the window, where a person may switch its oracle).
    inputs = given_inputs(args)
    local = [LaneSpec(name, 4 if auto else args.k, auto_k=auto and not is_plain(name),
                      inputs=inputs)
             for name in (n.strip() for n in names.split(",")) if name]
    return local + [LaneSpec(SERVER, 4 if auto else args.k, server=ServerSpec(url))
                    for url in args.server]


def given_inputs(args: argparse.Namespace) -> dict[str, str]:
    """Every oracle input the command line gives, by the registry's names (a name two oracles
    declare: as the first reads it)."""
    given: dict[str, str] = {}
    for name in ORACLE_INFO:
        given = {**options.oracle_inputs(name, args), **given}
    return given


def _settle(app, window: MainWindow, ctrl_c: CtrlC) -> None:
    """Let every queued event, text layout and graph update land before the grab."""
    for _ in range(3):
        window.board.drain()
        window.graphs.refresh()
        app.processEvents()
        ctrl_c.check()
