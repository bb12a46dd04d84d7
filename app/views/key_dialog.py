"""Run > Server API key…: a server's key, stored in the settings (app.state.server_keys)."""

from __future__ import annotations

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QLabel, QLineEdit, QWidget

from ..state.server_keys import origin
from ..state.settings import AppSettings


class ServerKeyDialog(QDialog):
    """Opened with open() (window-modal, no nested event loop); stores on Save."""

    def __init__(self, settings: AppSettings, url: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Server API key")
        self.settings = settings
        self.url = QLineEdit(url, placeholderText="http://host:port")
        self.key = QLineEdit(echoMode=QLineEdit.EchoMode.Password,
                             placeholderText="empty: forget this server's key")
        note = QLabel("Stored in specviz's settings, readable by you only; sent only to this "
                      "server, never written to traces or logs. --api-key-env on the command "
                      "line, or a lane's variable, takes precedence.", wordWrap=True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save
                                   | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form = QFormLayout(self)
        form.addRow("Server", self.url)
        form.addRow("Key", self.key)
        form.addRow(note)
        form.addRow(buttons)
        self.url.textChanged.connect(self._show_stored)
        self._show_stored()

    def _show_stored(self) -> None:
        stored = bool(self.url.text().strip()) and self.settings.server_key(
            origin(self.url.text())) is not None
        self.key.setPlaceholderText("a key is stored: type to replace, leave empty to forget"
                                    if stored else "the server's API key")

    def accept(self) -> None:
        if self.url.text().strip():
            self.settings.set_server_key(origin(self.url.text()), self.key.text().strip() or None)
        super().accept()
