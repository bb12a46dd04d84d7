"""File > Export video… and File > Export page…: the lanes' traces, as the command exports
them, with the window's theme; a progress dialog that can cancel the video."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox, QProgressDialog, QWidget

from ...engines.errors import SpecvizError
from .page import write_page
from .video import ExportCancelled, VideoSettings, export_video

VIDEO_KINDS = "MP4 video (*.mp4);;WebM video (*.webm);;GIF animation (*.gif)"


def race_traces(window) -> list[Path] | None:
    """The traces the lanes show, or None (said in the status bar) when there is no race to
    export yet: nothing run, or a run still going."""
    if window.runner.running:
        window.show_status("let the run end (or stop it) before exporting it")
        return None
    paths = [lane.trace_path for lane in window.board.lanes.values() if lane.trace_path]
    if not paths:
        window.show_status("nothing to export yet: run the lanes or open traces")
    return paths or None


def export_page_from(window, ask=None) -> Path | None:
    paths = race_traces(window)
    if paths is None:
        return None
    out = (ask or _ask)(window, "Export page", "specviz-race.html", "HTML page (*.html)")
    if not out:
        return None
    return _reported(window, lambda: write_page(paths, Path(out), theme=window.theme.name))


def export_video_from(window, ask=None) -> Path | None:
    paths = race_traces(window)
    if paths is None:
        return None
    out = (ask or _ask)(window, "Export video", "specviz-race.mp4", VIDEO_KINDS)
    if not out:
        return None
    out = Path(out)
    settings = VideoSettings.for_format(out.suffix.lower(), theme=window.theme.name)
    dialog = QProgressDialog(f"Drawing {out.name}…", "Cancel", 0, 0, window)
    dialog.setWindowModality(Qt.WindowModality.WindowModal)
    dialog.setMinimumDuration(300)

    def progress(done: int, total: int) -> bool:
        dialog.setMaximum(total)
        dialog.setValue(done)  # a modal dialog's setValue lets events (Cancel) through
        return not dialog.wasCanceled()

    try:
        return _reported(window, lambda: export_video(paths, out, settings, progress,
                                                      on_screen=False))
    finally:
        dialog.close()
        window.set_theme(window.theme.name)  # the drawing window restyled the app


def _reported(window, action) -> Path | None:
    try:
        path = action()
    except ExportCancelled:
        window.show_status("export cancelled: nothing written")
        return None
    except SpecvizError as exc:
        QMessageBox.warning(window, "specviz", str(exc))
        return None
    window.show_status(f"saved {path}")
    return path


def _ask(parent: QWidget, title: str, name: str, kinds: str) -> str:
    path, _ = QFileDialog.getSaveFileName(parent, title, name, kinds)
    return path
