"""`specviz advise`'s answer as a heatmap: candidates by prompt kind, coloured by predicted
speedup, plain decoding's 1.00x the neutral middle; a click on a cell picks that candidate.

It draws the advice's dict form (engines/advise/report.py `Advice.to_dict`), which is what the
engine process sends, so nothing here knows how the prediction was made.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem

SLOWER = QColor("#D55E00")  # Okabe-Ito vermillion: slower than plain decoding
FASTER = QColor("#009E73")  # Okabe-Ito bluish green: faster
EVEN = QColor("#8C8C8C")  # break-even: what plain decoding gives
FULL_AT = 0.5  # a speedup this far from 1.0 (1.5x, 0.5x) takes the full colour
SKIPPED = QColor("#5A5A5A")
NAME_ROLE = Qt.ItemDataRole.UserRole


def cell_colour(speedup: float) -> QColor:
    """The colour of a predicted speedup: grey at 1.0, towards green above, vermillion below."""
    far = FASTER if speedup >= 1.0 else SLOWER
    t = min(abs(speedup - 1.0) / FULL_AT, 1.0)
    return QColor(*(round(a + (b - a) * t) for a, b in zip(EVEN.getRgb()[:3], far.getRgb()[:3])))


def text_colour(background: QColor) -> QColor:
    """Black or white, whichever reads on the background (relative luminance)."""
    return QColor("#000000") if background.lightnessF() > 0.55 else QColor("#FFFFFF")


def cell_tip(name: str, kind: str, cell: dict) -> str:
    acceptance = cell.get("acceptance")
    accepted = "nothing drafted" if acceptance is None else f"{acceptance:.0%} of drafts kept"
    even = cell.get("break_even")
    pays = (f"never pays at K={cell['best_k']}" if even is None
            else f"K={cell['best_k']} pays from {even:.0%} acceptance")
    return (f"{name}, {kind}: {cell['speedup']:.2f}x with {cell['policy']} ({accepted}; "
            f"{pays}). Click to add this lane.")


class AdviceMap(QTableWidget):
    """Rows: candidates, best first, then the skipped ones with their reason; columns: the
    prompt kinds. `chosen(candidate name, kind)` on a click of a predicted cell."""

    chosen = Signal(str, str)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.cellClicked.connect(self._clicked)
        self._kinds: list[str] = []

    def show_advice(self, advice: dict) -> None:
        self._kinds = list(advice["kinds"])
        candidates = advice["candidates"]
        self.clear()
        self.setColumnCount(len(self._kinds))
        self.setRowCount(len(candidates))
        self.setHorizontalHeaderLabels(self._kinds)
        self.setVerticalHeaderLabels([c["name"] for c in candidates])
        for row, candidate in enumerate(candidates):
            for column, kind in enumerate(self._kinds):
                self.setItem(row, column, self._item(candidate, kind))

    def _item(self, candidate: dict, kind: str) -> QTableWidgetItem:
        cell = candidate["cells"].get(kind)
        if cell is None:
            item = QTableWidgetItem("-")
            item.setBackground(QBrush(SKIPPED))
            item.setToolTip(candidate.get("skipped") or f"{candidate['name']}: not predicted "
                            f"on {kind}")
            item.setForeground(QBrush(QColor("#DDDDDD")))
            item.setFlags(Qt.ItemFlag.ItemIsEnabled)
        else:
            item = QTableWidgetItem(f"{cell['speedup']:.2f}x")
            background = cell_colour(cell["speedup"])
            item.setBackground(QBrush(background))
            item.setForeground(QBrush(text_colour(background)))
            item.setToolTip(cell_tip(candidate["name"], kind, cell))
            item.setData(NAME_ROLE, candidate["name"])
        item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
        return item

    def _clicked(self, row: int, column: int) -> None:
        item = self.item(row, column)
        name = item.data(NAME_ROLE) if item else None
        if name:
            self.chosen.emit(name, self._kinds[column])
