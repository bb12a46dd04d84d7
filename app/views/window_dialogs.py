"""The window's questions about this machine's models and servers: a server's API key, a
folder of models to search, and the models picked with Browse… (remembered for the pickers)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QMainWindow

from .key_dialog import ServerKeyDialog
from .model_combo import local_models


class WindowDialogs:
    """For one window (an app.main_window.MainWindow: passed in, not imported, as it builds
    this), after its layout."""

    def __init__(self, window: QMainWindow) -> None:
        self.window = window

    def ask_server_key(self) -> ServerKeyDialog:
        """The API key of a server (the first server lane's, to begin with)."""
        w = self.window
        url = next((c.server.url for c in w.board.configs() if c.server and c.server.url), "")
        dialog = ServerKeyDialog(w.settings, url, w)
        dialog.accepted.connect(lambda: w.show_status(
            f"key for {dialog.url.text().strip()} stored" if dialog.key.text().strip()
            else f"no key kept for {dialog.url.text().strip()}"))
        dialog.open()
        return dialog

    def ask_model_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self.window, "Add a folder of models")
        if folder:
            self.add_model_folder(folder)

    def add_model_folder(self, folder: str) -> None:
        """Search `folder` for models from now on; the pickers list what it holds."""
        w = self.window
        w.settings.set_model_folders([*w.settings.model_folders(), folder])
        found = [m for m in local_models(refresh=True) if Path(m.path).is_relative_to(folder)]
        for combo in [w.prompt.model, *(lane.draft for lane in w.board.lanes.values())]:
            combo.reload()
        w.show_status(f"{folder}: {len(found)} model(s) found there")

    def remember_model(self, path: str) -> None:
        self.window.settings.add_recent_model(path)
