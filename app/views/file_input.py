"""A lane's file input of the registry (a heads folder, a corpus, a memory file): its name, the
path typed or browsed to, and empty for the input's default. Every input the registry declares
with a file kind gets one (lane_widget.py), shown for the oracles that read it."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QLineEdit, QToolButton, QWidget

from ...engines.oracles.registry import Input


class FileInput(QWidget):
    """`value()` is the path as typed or browsed to ("" where none is given)."""

    changed = Signal()

    def __init__(self, described: Input, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.described = described
        if described.default:
            empty = f"default: {described.default}"
        else:
            empty = "required" if described.required else "none"
        self.path = QLineEdit(placeholderText=empty,
                              toolTip=described.help.replace("{default}", described.default))
        self.browse = QToolButton(text="…", toolTip=f"Choose the {described.said}")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel(described.said))
        row.addWidget(self.path, 1)
        row.addWidget(self.browse)
        self.path.editingFinished.connect(self.changed.emit)
        self.browse.clicked.connect(self._browse)

    def value(self) -> str:
        return self.path.text().strip()

    def set_value(self, value: str | None) -> None:
        self.path.setText(value or "")

    def _browse(self) -> None:
        kind, title, start = self.described.kind, f"Choose the {self.described.said}", self.value()
        if kind.folder:
            chosen = QFileDialog.getExistingDirectory(self, title, start)
        elif kind.off:  # a file the oracle writes too: it may not exist yet
            chosen, _ = QFileDialog.getSaveFileName(
                self, title, start, options=QFileDialog.Option.DontConfirmOverwrite)
        else:
            chosen, _ = QFileDialog.getOpenFileName(self, title, start)
        if chosen:
            self.set_value(chosen)
            self.changed.emit()
