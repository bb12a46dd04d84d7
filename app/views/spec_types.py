"""A llama-server lane's speculation types: llama.cpp's types in a menu of checks, chained in
the order they were checked (as `--spec-type ngram-mod,draft-simple` names them); none
checked is a plain server, the baseline."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QSizePolicy, QToolButton, QWidget

from ...engines.servers.llama_speculation import TYPE_WORDS, TYPES, takes_draft

PLAIN_WORDS = "no speculation (a plain llama-server)"


class SpecTypes(QToolButton):
    """`spec()` is the types as `--spec-type` takes them, "" for none."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        # The lane's width, not the text's: the menu's arrow is drawn over a text-sized button.
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setToolTip("llama.cpp's speculation types for this lane's llama-server; several "
                        "chain (each step the first that drafts is verified); a draft type "
                        "reads the draft model picked beside")
        self.menu_ = QMenu(self)
        self.setMenu(self.menu_)
        self._chosen: list[str] = []
        self.actions_: dict[str, QAction] = {}
        for name in TYPES:
            self._add(name)
        self._show()

    def _add(self, name: str) -> QAction:
        words = TYPE_WORDS.get(name, "a type of a newer llama.cpp")
        action = self.menu_.addAction(name)
        action.setCheckable(True)
        action.setToolTip(words)
        action.setStatusTip(f"{name}: {words}")
        action.toggled.connect(lambda on, n=name: self._toggled(n, on))
        self.actions_[name] = action
        return action

    def types(self) -> list[str]:
        return list(self._chosen)

    def spec(self) -> str:
        return ",".join(self._chosen)

    def set_types(self, spec: str | None) -> None:
        """As a lane stored them: 'ngram-mod,draft-simple'; a type not listed is added."""
        named = [t.strip() for t in (spec or "").split(",") if t.strip() and t.strip() != "none"]
        self._chosen = []
        for name in self.actions_:
            self.actions_[name].blockSignals(True)
            self.actions_[name].setChecked(False)
            self.actions_[name].blockSignals(False)
        for name in dict.fromkeys(named):
            action = self.actions_.get(name) or self._add(name)
            action.blockSignals(True)
            action.setChecked(True)
            action.blockSignals(False)
            self._chosen.append(name)
        self._show()

    def takes_draft(self) -> bool:
        """Whether a chosen type reads a draft file (draft-mtp may: it is offered)."""
        return any(takes_draft(t) for t in self._chosen)

    def _toggled(self, name: str, on: bool) -> None:
        if on and name not in self._chosen:
            self._chosen.append(name)
        elif not on and name in self._chosen:
            self._chosen.remove(name)
        self._show()
        self.changed.emit()

    def _show(self) -> None:
        self.setText(f"speculation: {self.spec()}" if self._chosen else PLAIN_WORDS)
