"""The Qt application specviz runs in: one QApplication, asyncio on its loop (qasync), and
Python's garbage collector kept on the GUI thread."""

from __future__ import annotations

import asyncio
import os
import sys

from ..engines import heap
from ..engines.errors import SpecvizError


def has_display() -> bool:
    """Whether Qt can open a window here (Qt itself would abort the process otherwise)."""
    if os.environ.get("QT_QPA_PLATFORM") or sys.platform in ("win32", "darwin"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def check_system_libs() -> None:
    """Fail with one line naming the missing libraries (and the command that installs them)
    before Qt loads; Qt itself would abort the process with a message that names none."""
    from ..engines.machine import display_libs

    if not display_libs.needed() or os.environ.get("SPECVIZ_SKIP_LIB_CHECK"):
        return
    found = display_libs.check()
    if not found.ok:
        raise SpecvizError(found.advice())


def make_app(offscreen_if_headless: bool = False):
    """The QApplication, and a qasync loop on it as the asyncio loop (close it when done).

    Without a display, `specviz shot` renders offscreen; the window itself says what to do.
    """
    if not has_display():
        if not offscreen_if_headless:
            raise SpecvizError("no display to open the window on; run it in a desktop session "
                               "or under xvfb-run, or use `specviz shot` / `specviz run`")
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    check_system_libs()
    # Qt's raster engine hands large fills (axes, curves) to a pool of threads and waits for
    # them; with the cores busy generating, the GUI thread then sat waiting for a core for
    # hundreds of milliseconds (py-spy: QLatch::waitInternal under AxisItem.paint). Serial
    # fills cost less than the hand-off here. Must be set before the QApplication exists.
    os.environ.setdefault("QT_NO_GUI_THREADPOOL", "1")
    import qasync
    from pyqtgraph.util.garbage_collector import GarbageCollector
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(["specviz"])
    # Python's collector runs in whichever thread allocates; on another thread (fetching,
    # checking models) it may free a cycle that holds a widget or timer, and Qt objects
    # deleted off the GUI thread leave dangling timers that crash the event loop later.
    # pyqtgraph's collector turns automatic collection off and collects on a GUI-thread
    # timer instead: every 0.1 s, so that each collection has little to scan.
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
    heap.collect_and_freeze()
