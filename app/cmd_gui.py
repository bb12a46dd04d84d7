"""`specviz gui` (the default command) opens the window; `specviz shot` screenshots it."""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import sys
from pathlib import Path

from ..engines.errors import SpecvizError
from . import options


def register(sub) -> None:
    p = sub.add_parser("gui", help="open the window (what `specviz` alone does)")
    p.add_argument("--replay", nargs="+", type=Path, metavar="FILE", help="open traces")
    p.add_argument("--speed", type=float, default=1.0, help="replay speed, 0.1 to 1")
    p.set_defaults(func=lambda args: open_window(args.replay, args.speed))
    _register_shot(sub)


def _register_shot(sub) -> None:
    p = sub.add_parser("shot", help="render the window after a run or replay and save a PNG",
                       description="Render the window without a person at the screen "
                                   "(works with QT_QPA_PLATFORM=offscreen).")
    p.add_argument("out", type=Path, metavar="OUT.png")
    p.add_argument("--replay", nargs="+", type=Path, metavar="FILE", help="traces to replay")
    options.add_prompt_args(p)  # a live run of this prompt
    p.add_argument("--oracles", default="none,prompt-lookup",
                   help="lanes for a live run, comma-separated (default: %(default)s)")
    p.add_argument("--k", type=options.k_or_auto, default=4,
                   help="draft length of every lane, or auto (each lane's cost-aware K; "
                        "measures a missing cost profile first)")
    p.add_argument("--draft", default=None, help="draft model for a draft lane")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    options.add_model_args(p)
    p.add_argument("--size", type=_size, default=(1600, 1000), metavar="WxH")
    p.add_argument("--theme", choices=("dark", "light"), default="dark")
    p.add_argument("--presentation", action="store_true")

    def run(args: argparse.Namespace) -> int:
        from .shot import take_shot

        return take_shot(args)

    p.set_defaults(func=run)


def _size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(n) for n in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError("size is WIDTHxHEIGHT, e.g. 1600x1000") from None
    if width < 200 or height < 200:
        raise argparse.ArgumentTypeError("the window needs at least 200x200")
    return width, height


def has_display() -> bool:
    """Whether Qt can open a window here (Qt itself would abort the process otherwise)."""
    if os.environ.get("QT_QPA_PLATFORM") or sys.platform in ("win32", "darwin"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def make_app(offscreen_if_headless: bool = False):
    """The QApplication, and a qasync loop on it as the asyncio loop (close it when done).

    Without a display, `specviz shot` renders offscreen; the window itself says what to do.
    """
    if not has_display():
        if not offscreen_if_headless:
            raise SpecvizError("no display to open the window on; run it in a desktop session "
                               "or under xvfb-run, or use `specviz shot` / `specviz run`")
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    # Qt's raster engine hands large fills (axes, curves) to a pool of threads and waits for
    # them; with the cores busy generating, the GUI thread then sat waiting for a core for
    # hundreds of milliseconds (py-spy: QLatch::waitInternal under AxisItem.paint). Serial
    # fills cost less than the hand-off here. Must be set before the QApplication exists.
    os.environ.setdefault("QT_NO_GUI_THREADPOOL", "1")
    import qasync
    from pyqtgraph.util.garbage_collector import GarbageCollector
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(["specviz"])
    # Python's collector runs in whichever thread allocates; on an engine thread it may free
    # a cycle that holds a widget or timer, and Qt objects deleted off the GUI thread leave
    # dangling timers that crash the event loop later. pyqtgraph's collector turns automatic
    # collection off and collects on a GUI-thread timer instead: every 0.1 s, so that each
    # collection has little to scan (once a second, the young objects of a second of
    # generating took the GUI thread over 50 ms at a time).
    if not hasattr(app, "_specviz_gc"):
        app._specviz_gc = GarbageCollector(interval=0.1)
    app.setOrganizationName("specviz")
    app.setApplicationName("specviz")
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    return app, loop


def freeze_heap() -> None:
    """Move everything alive now (imports, the window) out of reach of the collector.

    A full collection scans every tracked object: about 200 ms on the GUI thread with torch
    and the window loaded, a visible stall. What exists once the window is up lives as long
    as the app, so it is frozen and later collections only scan what came after."""
    gc.collect()
    gc.freeze()


def open_window(replay: list[Path] | None = None, speed: float = 1.0) -> int:
    from .main_window import MainWindow

    _app, loop = make_app()
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl+C in the terminal ends the app
    window = MainWindow()
    window.show()
    freeze_heap()
    if replay:
        window.open_replay(replay, speed)
    with loop:
        loop.run_forever()  # until the last window closes
    return 0
