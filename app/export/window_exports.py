"""The File menu's ways out of the window: the traces copied, a picture of the window or of
one graph, the figures as CSV, and the race as a video or a page (as the command exports them,
with the window's theme; a progress dialog can cancel the video). Every outcome is one line in
the status bar, or a warning that names the file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMainWindow, QMessageBox, QProgressDialog, QWidget

from ...engines.errors import SpecvizError
from .files import copy_traces, save_png, write_figures_csv
from .page import write_page
from .video import ExportCancelled, VideoSettings, export_video

PNG_KINDS = "PNG images (*.png)"
VIDEO_KINDS = "MP4 video (*.mp4);;WebM video (*.webm);;GIF animation (*.gif)"


def ask_save(parent: QWidget, title: str, name: str, kinds: str) -> str:
    path, _ = QFileDialog.getSaveFileName(parent, title, name, kinds)
    return path


class WindowExports:
    """One window's exports (an app.main_window.MainWindow: passed in, never imported; a
    video is drawn by a fresh window of the same class). `ask` picks the file to write."""

    def __init__(self, window: QMainWindow,
                 ask: Callable[[QWidget, str, str, str], str] = ask_save) -> None:
        self.window = window
        self.ask = ask

    def save_traces(self) -> None:
        paths = self._lane_traces()
        if not paths:
            self.window.show_status("no traces yet: run first")
            return
        folder = QFileDialog.getExistingDirectory(self.window, "Save traces into")
        if folder:
            self._reported(lambda: copy_traces(paths, folder), "saved {} traces")

    def window_png(self) -> None:
        path = self.ask(self.window, "Export window", "specviz.png", PNG_KINDS)
        if path:
            self._reported(lambda: save_png(self.window, path))

    def graph_png(self, name: str) -> None:
        path = self.ask(self.window, f"Export {name} graph", f"specviz-{name}.png", PNG_KINDS)
        if path:  # the plot with the lanes' key above it
            self._reported(lambda: save_png(self.window.graphs.picture(name), path))

    def figures_csv(self) -> None:
        path = self.ask(self.window, "Export figures", "specviz-figures.csv", "CSV files (*.csv)")
        if path:
            self._reported(lambda: write_figures_csv(path, self.figure_rows()))

    def figure_rows(self) -> list[dict]:
        board = self.window.board
        return [{"lane": lane_id, "oracle": lane.oracle_name(), "k": lane.config().k,
                 "streams": 1, "trace": str(lane.trace_path or ""), **self._figures(lane_id)}
                for lane_id, lane in board.lanes.items()]

    def _figures(self, lane_id: str) -> dict:
        """A lane's row. A lane of N streams is its batch's (every stream's tokens and
        acceptance, its speedup over the plain batch, as its header gives it): oracles compared
        under concurrency are compared by what their batches write, not by one stream's pace."""
        board = self.window.board
        return board.streams.figures(lane_id) or board.model.figures(lane_id)

    def page(self) -> Path | None:
        paths = self._race_traces()
        stream = None if paths is None else self._followed()
        if stream is None:
            return None
        out = self.ask(self.window, "Export page", "specviz-race.html", "HTML page (*.html)")
        if not out:
            return None
        theme = self.window.theme.name
        return self._reported(lambda: write_page(paths, Path(out), theme=theme, stream=stream),
                              _saved(stream))

    def video(self) -> Path | None:
        paths = self._race_traces()
        stream = None if paths is None else self._followed()
        if stream is None:
            return None
        out = self.ask(self.window, "Export video", "specviz-race.mp4", VIDEO_KINDS)
        if not out:
            return None
        out = Path(out)
        settings = VideoSettings.for_format(out.suffix.lower(), theme=self.window.theme.name,
                                            stream=stream)
        dialog = QProgressDialog(f"Drawing {out.name}…", "Cancel", 0, 0, self.window)
        dialog.setWindowModality(Qt.WindowModality.WindowModal)
        dialog.setMinimumDuration(300)

        def progress(done: int, total: int) -> bool:
            dialog.setMaximum(total)
            dialog.setValue(done)  # a modal dialog's setValue lets events (Cancel) through
            return not dialog.wasCanceled()

        try:
            return self._reported(lambda: export_video(
                paths, out, settings, type(self.window), progress, on_screen=False),
                _saved(stream))
        finally:
            dialog.close()
            self.window.set_theme(self.window.theme.name)  # the drawing window restyled the app

    def _followed(self) -> int | None:
        """The stream the lanes of batches follow, exported as shown; None (said in the
        status bar) where they follow different ones: each stream has its own prompt, and
        a race is of one."""
        picked = {lane.picked for lane in self.window.board.streams.lanes.values()}
        if len(picked) > 1:
            self.window.show_status(
                f"the lanes follow streams {', '.join(str(s + 1) for s in sorted(picked))}, "
                "each with its own prompt: pick one stream in every lane to export the race")
            return None
        return next(iter(picked), 0)

    def _lane_traces(self) -> list[Path]:
        return [lane.trace_path for lane in self.window.board.lanes.values() if lane.trace_path]

    def _race_traces(self) -> list[Path] | None:
        """The traces the lanes show, or None (said in the status bar) when there is no race
        to export yet: nothing run, or a run still going."""
        if self.window.runner.running:
            self.window.show_status("let the run end (or stop it) before exporting it")
            return None
        paths = self._lane_traces()
        if not paths:
            self.window.show_status("nothing to export yet: run the lanes or open traces")
        return paths or None

    def _reported(self, action, done: str = "saved {}"):
        """The action's result, said in the status bar; None when it failed (a warning) or
        was cancelled."""
        try:
            result = action()
        except ExportCancelled:
            self.window.show_status("export cancelled: nothing written")
            return None
        except (OSError, SpecvizError) as exc:
            QMessageBox.warning(self.window, "specviz", str(exc))
            return None
        self.window.show_status(done.format(len(result) if isinstance(result, list) else result))
        return result


def _saved(stream: int) -> str:
    return "saved {}" if not stream else f"saved {{}} (stream {stream + 1} of each batch)"
