"""`specviz export TRACE... OUT`: a race as one offline HTML page, or as a video.

The output's suffix picks the format: `.html` is written here (app/export/page.py); the
video suffixes go to app/export/video.py, imported only when asked for.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ...engines.errors import SpecvizError

PAGE_SUFFIXES = (".html",)
VIDEO_SUFFIXES = (".mp4", ".webm", ".gif")


def register(sub) -> None:
    p = sub.add_parser("export", help="a race as one offline HTML page or a video "
                                      "(no model needed)")
    p.add_argument("traces", nargs="+", type=Path, metavar="TRACE",
                   help="trace files recorded with --trace, one lane each, of one prompt")
    p.add_argument("out", type=Path, metavar="OUT",
                   help="OUT.html (a page that replays the race), OUT.mp4, OUT.webm or OUT.gif")
    p.add_argument("--stream", type=int, default=1, metavar="I",
                   help="of traces of several streams, stream I of each (from 1; default: 1)")
    p.add_argument("--theme", choices=("light", "dark"), default="light",
                   help="the colours (the page can switch; default: light)")
    video = p.add_argument_group("video (OUT.mp4, OUT.webm, OUT.gif)")
    video.add_argument("--size", metavar="720p|1080p|WxH",
                       help="frame size (default: 1080p; a GIF 960x540)")
    video.add_argument("--fps", type=float, help="frames a second (default: 30; a GIF 10)")
    video.add_argument("--speed", type=float, default=1.0,
                       help="compute seconds shown a second: 0.5 is half speed (default: 1)")
    video.add_argument("--hold", type=float, default=2.0, metavar="SECONDS",
                       help="how long the final frame stays (default: 2)")
    video.add_argument("--graphs", default="race", metavar="NAMES",
                       help="graphs under the lanes, comma-separated, of acceptance, "
                            "histogram, position, race, speedup, cost; '' for none "
                            "(default: race)")
    p.set_defaults(func=export)


def export(args: argparse.Namespace) -> int:
    suffix = args.out.suffix.lower()
    if suffix in PAGE_SUFFIXES:
        written = _page(args)
    elif suffix in VIDEO_SUFFIXES:
        written = _video(args)
    else:
        raise SpecvizError(f"unknown export format '{args.out.suffix or args.out.name}': give "
                           "OUT.html, OUT.mp4, OUT.webm or OUT.gif")
    print(f"saved {written} ({written.stat().st_size / 1024:.0f} KiB)", file=sys.stderr)
    return 0


def _page(args: argparse.Namespace) -> Path:
    from ..export.page import write_page

    return write_page(args.traces, args.out, theme=args.theme, stream=args.stream - 1)


def _video(args: argparse.Namespace) -> Path:
    from tqdm import tqdm

    from ..export.video import VideoSettings, checked_race, export_video, parse_size
    from ..main_window import MainWindow  # draws the frames
    from ..qt_app import make_app

    settings = VideoSettings.for_format(
        args.out.suffix.lower(), size=args.size and parse_size(args.size), fps=args.fps,
        speed=args.speed, hold_s=args.hold, theme=args.theme, stream=args.stream - 1,
        graphs=tuple(n.strip() for n in args.graphs.split(",") if n.strip()))
    checked_race(args.traces, args.out, settings)  # a bad setting stops before any window
    _app, loop = make_app(offscreen_if_headless=True)
    with loop, tqdm(desc=f"exporting {args.out.name}", unit="frame", leave=False,
                    file=sys.stderr, disable=None) as bar:
        def progress(done: int, total: int) -> bool:
            bar.total = total
            bar.update(done - bar.n)
            return True

        return export_video(args.traces, args.out, settings, MainWindow, progress)
