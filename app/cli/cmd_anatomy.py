"""`specviz anatomy TRACE --step N [OUT]`: one step of a recorded run taken apart in stages.

With OUT (.mp4, .webm, .gif or .html) the stages are written for slides
(app/export/anatomy_export.py); without it a window plays them (no model needed).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from ...engines.errors import SpecvizError
from .one_line_parser import OneLineParser


class _Intermixed(OneLineParser):
    """Takes OUT after the options too (`anatomy TRACE --step 3 OUT.mp4`): argparse alone
    fills an optional positional with nothing at the first option and then refuses OUT."""

    _inside = False

    def parse_known_args(self, args=None, namespace=None):
        if self._inside:  # argparse's intermixed parse calls this twice itself
            return super().parse_known_args(args, namespace)
        self._inside = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inside = False


def register(sub) -> None:
    p = sub.add_parser("anatomy", help="one step of a trace taken apart in stages, in a "
                                       "window or as a video or page for slides")
    p.__class__ = _Intermixed  # the subcommands' parser class, plus intermixed positionals
    p.add_argument("trace", type=Path, metavar="TRACE", help="a trace recorded with --trace")
    p.add_argument("out", type=Path, nargs="?", metavar="OUT",
                   help="OUT.mp4, OUT.webm, OUT.gif or OUT.html; without it a window plays "
                        "the stages (Right/Left step, Space plays)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--step", type=int, metavar="N", help="the step (0-based; default: 0)")
    which.add_argument("--steps", metavar="A-B", help="a run of steps, one after another")
    p.add_argument("--stream", type=int, default=1, metavar="I",
                   help="of a trace of several streams, stream I's steps (from 1; default: 1)")
    p.add_argument("--plain", type=Path, metavar="TRACE",
                   help="a plain-decoding trace of the same machine: one plain step's cost is "
                        "its mean step (default: the trace's own steps that guessed nothing)")
    p.add_argument("--profile", type=Path, metavar="FILE",
                   help="a cost profile (JSON, `specviz profile`): one plain step's cost is "
                        "its one-token forward at the step's context")
    p.add_argument("--theme", choices=("light", "dark"), default="light")
    p.add_argument("--size", metavar="720p|1080p|WxH",
                   help="frame size (default: 1080p; a GIF 960x540)")
    p.add_argument("--fps", type=float, help="frames a second of a video (default: 30)")
    p.add_argument("--stage-seconds", type=float, default=2.0, metavar="S",
                   help="each stage's time on screen (default: 2)")
    p.add_argument("--hold", type=float, default=2.0, metavar="SECONDS",
                   help="how long the last stage stays on (default: 2)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..export.anatomy_export import (
        AnatomySettings,
        check_output,
        parse_steps,
        trace_anatomies,
    )
    from ..export.video import VideoSettings, parse_size

    first, last = parse_steps(args.step, args.steps)
    settings = None
    if args.out is not None:
        suffix = args.out.suffix.lower()
        video = VideoSettings.for_format(suffix, size=args.size and parse_size(args.size),
                                         fps=args.fps, hold_s=args.hold, theme=args.theme)
        settings = AnatomySettings(video, args.stage_seconds)
        check_output(args.out, settings)  # a bad setting stops before anything is read
    profile = _profile(args.profile) if args.profile else None
    anatomies = trace_anatomies(args.trace, first, last, profile, args.plain, args.stream - 1)
    if settings is None:
        return _window(anatomies, args.theme)
    return _export(anatomies, args.out, settings)


def _profile(path: Path):
    from ...engines.bounded_json import SMALL_FILE, read_json
    from ...engines.cost.profile import Profile

    data = read_json(path, "the cost profile", SMALL_FILE)
    try:
        return Profile.from_dict(data)
    except (TypeError, KeyError) as exc:  # a shape an older profile_shape does not catch
        raise SpecvizError(f"{path}: not a cost profile ({exc})") from None


def _export(anatomies, out: Path, settings) -> int:
    from tqdm import tqdm

    from ..export.anatomy_export import export_anatomy
    from ..qt_app import make_app

    _app, loop = make_app(offscreen_if_headless=True)
    with loop, tqdm(desc=f"exporting {out.name}", unit="frame", leave=False, file=sys.stderr,
                    disable=None) as bar:
        def progress(done: int, total: int) -> bool:
            bar.total = total
            bar.update(done - bar.n)
            return True

        written = export_anatomy(anatomies, out, settings, progress)
    print(f"saved {written} ({written.stat().st_size / 1024:.0f} KiB)", file=sys.stderr)
    return 0


def _window(anatomies, theme: str) -> int:
    from ...board.palette import THEMES
    from ...widgets.anatomy import AnatomyView
    from ..qt_app import make_app

    _app, loop = make_app()
    # Ctrl-C and SIGTERM end the window at once: raised inside Qt's loop, the exceptions the
    # command line turns them into would be printed and dropped by the paint they land in.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    view = AnatomyView(THEMES[theme])
    view.setWindowTitle(f"specviz anatomy: {anatomies[0].event.oracle}, step "
                        f"{anatomies[0].event.step}")
    view.set_anatomies(anatomies)
    view.resize(1280, 720)
    view.show()
    with loop:
        loop.run_forever()  # until the window is closed
    return 0
