"""A model picker: the registry's names, the models already on this machine (grouped by the tool
that keeps them), recently picked ones, "Hub name…" and "Browse…" for a file or folder."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QComboBox, QFileDialog, QInputDialog, QWidget

BROWSE = "Browse…"
HUB = "Hub name…"
_BROWSE = "\x00browse"  # item data of the entries that ask rather than name a model
_HUB = "\x00hub"
_ASKING = (_BROWSE, _HUB)
HUB_HELP = ("A Hugging Face Hub name:\n  org/repo (a transformers model)\n"
            "  org/repo:Q4_K_M (its GGUF of that quant)\n  org/repo/file.gguf")

_found: list | None = None


def registry_names() -> list[str]:
    from ...engines.models import load_registry

    return list(load_registry())


def local_models(refresh: bool = False) -> list:
    """The models on this machine, scanned once per window (again after `refresh`)."""
    global _found
    if _found is None or refresh:
        from ...engines.models import local as found
        from ..state.settings import AppSettings

        _found = found.find(found.Places.here(AppSettings().model_folders()))
    return _found


def describe(model) -> str:
    details = ", ".join(x for x in (model.quant, f"{model.size / 1e9:.1f} GB") if x)
    return f"{model.name} ({details})"


class ModelCombo(QComboBox):
    """`model()` is the choice as a string: a registry name, a Hub name or a path."""

    browsed = Signal(str)  # a path or Hub name the person typed or browsed to, for the recent list
    picked = Signal(str)  # the person chose a model (from the list, by name or by browsing)

    def __init__(self, recent: list[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumContentsLength(10)
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self._recent = recent
        self._fill()
        self._last = 0
        self.activated.connect(self._on_activated)

    def _fill(self) -> None:
        self.clear()
        for name in registry_names():
            self.addItem(name, name)
        groups: dict[str, list] = {}
        for model in local_models():
            groups.setdefault(model.where, []).append(model)
        for where, found in groups.items():
            self._header(where)
            for model in found:
                self.addItem(describe(model), str(model.path))
                self.setItemData(self.count() - 1, str(model.path), Qt.ItemDataRole.ToolTipRole)
        self.addItem(HUB, _HUB)
        self.addItem(BROWSE, _BROWSE)
        for path in self._recent:
            self._add_path(path)

    def reload(self) -> None:
        """After the model folders changed: the list again, the choice kept."""
        choice = self.model()
        self._fill()
        self.set_model(choice)

    def _header(self, text: str) -> None:
        self.insertSeparator(self.count())
        self.addItem(text, None)
        item = QStandardItemModel.item(QComboBox.model(self), self.count() - 1)
        item.setEnabled(False)

    def model(self) -> str:
        data = self.currentData()
        return "" if not data or data in _ASKING else str(data)

    def set_model(self, name_or_path: str | None) -> None:
        if not name_or_path:
            return
        index = self.findData(name_or_path)
        if index < 0:
            index = self._add_path(name_or_path)
        self.setCurrentIndex(index)
        self._last = index

    def _add_path(self, path: str) -> int:
        """A recent or typed model, listed before "Hub name…"."""
        index = self.findData(_HUB)
        from ...engines.models.hub_names import parse

        label = path if parse(path) and not Path(path).exists() else Path(path).name
        self.insertItem(index, label, path)
        self.setItemData(index, path, Qt.ItemDataRole.ToolTipRole)
        return index

    def _on_activated(self, index: int) -> None:
        data = self.itemData(index)
        if data not in _ASKING:
            self._last = index
            self.picked.emit(self.model())
            return
        chosen = self._ask_hub_name() if data == _HUB else self._ask_path()
        if chosen:
            self.set_model(chosen)
            self.browsed.emit(chosen)
            self.picked.emit(chosen)
        else:
            self.setCurrentIndex(self._last)

    def _ask_hub_name(self) -> str | None:
        from ...engines.models.hub_names import parse

        text, ok = QInputDialog.getText(self, "Hub name", HUB_HELP)
        name = parse(text) if ok else None
        return str(name) if name else None

    def _ask_path(self) -> str | None:
        # One dialog for both kinds: a .gguf file, or a model folder's config.json.
        path, _ = QFileDialog.getOpenFileName(
            self, "Choose a model", "",
            "Models (*.gguf config.json);;GGUF files (*.gguf);;Model folder (config.json)")
        if not path:
            return None
        return str(Path(path).parent) if Path(path).name == "config.json" else path
