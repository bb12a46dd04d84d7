"""A model picker: registry names, recently browsed paths, and "Browse…" for a file or folder."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QFileDialog, QWidget

BROWSE = "Browse…"


def registry_names() -> list[str]:
    from ..engines.models import load_registry

    return list(load_registry())


class ModelCombo(QComboBox):
    """`model()` is the choice as a string: a registry name or a path."""

    browsed = Signal(str)  # a path picked with Browse…, for the recent list
    picked = Signal(str)  # the person chose a model (from the list or by browsing)

    def __init__(self, recent: list[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumContentsLength(10)
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        for name in registry_names():
            self.addItem(name, name)
        for path in recent:
            self._add_path(path)
        self.addItem(BROWSE, None)
        self._last = 0
        self.activated.connect(self._on_activated)

    def model(self) -> str:
        return str(self.currentData() or "")

    def set_model(self, name_or_path: str | None) -> None:
        if not name_or_path:
            return
        index = self.findData(name_or_path)
        if index < 0:
            index = self._add_path(name_or_path)
        self.setCurrentIndex(index)
        self._last = index

    def _add_path(self, path: str) -> int:
        index = self.count() - (1 if self.findData(None) >= 0 else 0)
        self.insertItem(index, Path(path).name, path)
        self.setItemData(index, path, Qt.ItemDataRole.ToolTipRole)
        return index

    def _on_activated(self, index: int) -> None:
        if self.itemData(index) is not None:
            self._last = index
            self.picked.emit(self.model())
            return
        path = self._ask_path()
        if path:
            self.set_model(path)
            self.browsed.emit(path)
            self.picked.emit(path)
        else:
            self.setCurrentIndex(self._last)

    def _ask_path(self) -> str | None:
        # One dialog for both kinds: a .gguf file, or a model folder's config.json.
        path, _ = QFileDialog.getOpenFileName(
            self, "Choose a model", "",
            "Models (*.gguf config.json);;GGUF files (*.gguf);;Model folder (config.json)")
        if not path:
            return None
        return str(Path(path).parent) if Path(path).name == "config.json" else path
