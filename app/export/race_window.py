"""A window that replays traces for a picture or a video, away from the person's window.

It is a real window (the frames are the window's own drawing), with throw-away settings
so that it neither reads nor changes what the person's window remembers, laid out at the
size asked and, for talks, in presentation mode with the graphs picked.

The window's class is passed in (app.main_window.MainWindow, by the command line or by the
window itself), never imported: the window's File menu exports videos drawn here.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QtMsgType, qInstallMessageHandler
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication, QMainWindow

from ...engines.errors import SpecvizError
from ..run.trace_player import ReplayPlayer
from ..state.settings import AppSettings

GRAPHS = ("acceptance", "histogram", "position", "race", "speedup", "cost")

# A MainWindow class: called with the window's settings and interactive=False.
WindowClass = Callable[..., QMainWindow]

# What a platform without a window manager (offscreen, a bare X server) says of every window
# it shows: nothing is wrong with the export, and 19 of them buried its one line of error.
PLATFORM_NOISE = ("This plugin does not support",)


@contextmanager
def race_window(window_class: WindowClass, paths: Sequence[Path], size: tuple[int, int],
                theme: str, presentation: bool = True, graphs: Sequence[str] = ("race",),
                on_screen: bool = True, stream: int = 0
                ) -> Iterator[tuple[QMainWindow, ReplayPlayer]]:
    """The window with these traces opened and paused at their start, and its player; each
    lane of a batch of streams following stream `stream + 1`.

    `on_screen` False lays the window out without showing it (an export from inside the
    running app must not flash a second window at the person)."""
    with quiet_platform_noise(), tempfile.TemporaryDirectory(prefix="specviz-window-") as tmp:
        store = QSettings(str(Path(tmp) / "window.ini"), QSettings.Format.IniFormat)
        store.setValue("view/theme", theme)
        window = window_class(AppSettings(store), interactive=False)
        try:
            if not on_screen:
                window.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen)
            window.resize(*size)
            if presentation:
                window.set_presentation(True, fullscreen=False)
                show_graphs(window, graphs)
            window.show()
            player = window.open_replay(list(paths))
            if player is None:
                raise SpecvizError("the window could not open the traces")
            player.pause()
            if stream:
                for lane_id in list(window.board.streams.lanes):
                    window.board.pick_stream(lane_id, stream)
            settle(window)
            yield window, player
        finally:
            window.close()
            window.deleteLater()


@contextmanager
def quiet_platform_noise() -> Iterator[None]:
    """Within the block, Qt's warnings about what the platform plugin cannot do are dropped;
    every other message goes where it went before."""
    def handler(kind: QtMsgType, context, message: str) -> None:
        if kind != QtMsgType.QtWarningMsg or not message.startswith(PLATFORM_NOISE):
            if previous is not None:
                previous(kind, context, message)
            else:
                print(message, file=sys.stderr)

    previous = qInstallMessageHandler(handler)
    try:
        yield
    finally:
        qInstallMessageHandler(previous)


def show_graphs(window: QMainWindow, names: Sequence[str]) -> None:
    """Only these graphs below the lanes (presentation mode shows the race alone)."""
    for name, plot in window.graphs.plots.items():
        plot.setVisible(name in names)
    window.graphs.cost_curve.setVisible("cost" in names)
    window.graphs.setVisible(bool(names))


def settle(window: QMainWindow) -> None:
    """Let every queued event, text layout and graph update land before a picture."""
    app = QApplication.instance()
    for _ in range(3):
        window.board.drain()
        window.graphs.refresh()
        app.processEvents()


def picture(window: QMainWindow, size: tuple[int, int]) -> QImage:
    """The window drawn into an image of `size` pixels: at the window's own size one pixel a
    pixel, at another size scaled as a high-density screen scales it (text stays sharp)."""
    scale = size[0] / window.width()
    image = QImage(size[0], size[1], QImage.Format.Format_RGB32)
    image.setDevicePixelRatio(scale)
    image.fill(window.palette().window().color())
    window.render(image)
    image.setDevicePixelRatio(1.0)
    return image
