"""One key for all the lane graphs: each lane's line in its colour and its name.

It sits above the plots instead of a legend inside each of them: six legends covered the
curves they named (the race's rising lines, the rates near 1.0) and repainted with every
frame. The baseline lane (plain decoding) is drawn dashed in the race, so its key is dashed.
One label of rich text: entries wrap onto more lines when the key is narrow (a single
graph's width, for an exported picture), never within an entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from PySide6.QtWidgets import QLabel, QWidget

from ..board.palette import DARK, Theme

SOLID, DASHED = "\u2501\u2501", "\u254d\u254d"  # heavy line, heavy dashed line
GAP = "&nbsp;" * 5  # between entries; a plain space after it lets a line break there


class LaneKey(QLabel):
    def __init__(self, theme: Theme = DARK, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._theme = theme
        self._points = 9
        self._lanes: list[tuple[str, str, str, bool]] = []
        self.setWordWrap(True)
        self.setContentsMargins(8, 2, 8, 2)

    def set_lanes(self, lanes: Sequence[tuple[str, str, str, bool]]) -> None:
        """(lane id, name, colour, dashed) per lane, in the order they are shown."""
        self._lanes = list(lanes)
        self._fill()

    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        self._fill()

    def set_text_size(self, points: int) -> None:
        self._points = points
        self._fill()

    def copy(self, width: int) -> LaneKey:
        """A detached key of this one's lanes and look, laid out for `width` pixels."""
        key = LaneKey(self._theme)
        key.set_text_size(self._points)
        key.set_lanes(self._lanes)
        key.setFixedWidth(width)
        key.setFixedHeight(key.heightForWidth(width))
        return key

    def _fill(self) -> None:
        entries = []
        for _lane_id, name, colour, dashed in self._lanes:
            text = escape(name + (" (baseline)" if dashed else "")).replace(" ", "&nbsp;")
            entries.append(f'<span style="color:{colour}">{DASHED if dashed else SOLID}</span>'
                           f"&nbsp;{text}")
        self.setText(f'<span style="font-size:{self._points}pt; color:{self._theme.foreground}">'
                     f"{(GAP + ' ').join(entries)}</span>")
