"""A lane's row for a race of N streams: the batch's total throughput, and which stream the
lane's text follows (its pace beside). Hidden while the race has one stream."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QWidget

from ...board.streams_race import LaneStreams


def streams_text(lane: LaneStreams) -> str:
    """"4 streams · 212.5 tok/s in all · this one 53.1 tok/s"."""
    return (f"{lane.n} streams · {lane.tok_per_s:.1f} tok/s in all · "
            f"this one {lane.pace(lane.picked):.1f} tok/s")


class StreamPicker(QWidget):
    picked = Signal(int)  # the stream (0-based) the lane's text should follow

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.total = QLabel()
        self.total.setToolTip("every stream's tokens over the batch's compute time, and the "
                              "pace of the stream shown (its tokens over the batch steps it "
                              "was in)")
        self.combo = QComboBox(toolTip="the stream whose tokens this lane shows")
        box = QHBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.combo)
        box.addWidget(self.total, 1)
        self.combo.activated.connect(self.picked)
        self.hide()

    def show_streams(self, lane: LaneStreams | None) -> None:
        """A new race: one entry per stream, its prompt's start as the tip (None: hidden)."""
        self.setVisible(lane is not None)
        if lane is None:
            return
        self.combo.clear()
        for i, prompt in enumerate(lane.prompts):
            self.combo.addItem(f"stream {i + 1}")
            self.combo.setItemData(i, prompt[:200], Qt.ItemDataRole.ToolTipRole)
        self.combo.setCurrentIndex(lane.picked)
        self.update_figures(lane)

    def update_figures(self, lane: LaneStreams) -> None:
        self.total.setText(streams_text(lane))
