"""One step laid open: every proposed token, its verdict and why, the target's token, timings."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ..board.describe import margin, prob, visible, why
from ..board.kinds import KIND_REJECTED, KIND_TARGET, proposal_kind
from ..board.palette import DARK, Theme
from ..engines.events import DECLINE_WORDS, ProposedToken, StepEvent

COLUMNS = ("#", "position", "token", "source", "p_draft", "p_target", "verdict", "why")
TOKEN_COLUMN = COLUMNS.index("token")
VERDICT_COLUMN = COLUMNS.index("verdict")
WHY_COLUMN = COLUMNS.index("why")


class StepInspector(QWidget):
    """A table of one step's tokens, with the step's header and timings around it."""

    def __init__(self, theme: Theme = DARK, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._theme = theme
        self._event: StepEvent | None = None
        self.header = QLabel()
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.timings = QLabel()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for widget in (self.header, self.table, self.timings):
            layout.addWidget(widget)
        self._apply_palette()
        self.clear()

    @property
    def event(self) -> StepEvent | None:
        return self._event

    def show_step(self, event: StepEvent) -> None:
        self._event = event
        judged = (f"nothing proposed: {DECLINE_WORDS.get(event.declined, event.declined)}"
                  if event.declined else f"{event.n_accepted}/{len(event.proposed)} accepted")
        k = f"K={event.k} (auto)" if event.auto_k else f"K={event.k}"
        if event.explored:
            k += ", exploring: sent to learn the oracle's odds"
        self.header.setText(
            f"step {event.step} · {event.oracle} · {k} · context position {event.position} · "
            f"{judged}"
        )
        rows = [_proposal_row(event, i, t) for i, t in enumerate(event.proposed)]
        rows.append(_target_row(event))
        kinds = [proposal_kind(t) for t in event.proposed] + [KIND_TARGET]
        self.table.setRowCount(len(rows))
        for r, (row, kind) in enumerate(zip(rows, kinds, strict=True)):
            for c, text in enumerate(row):
                self.table.setItem(r, c, self._item(text, kind if c == TOKEN_COLUMN else None))
        t = event.timing
        self.timings.setText(
            f"draft {t.draft_ms:.2f} ms · verify {t.verify_ms:.2f} ms · "
            f"other {t.other_ms:.2f} ms · total {t.total_ms:.2f} ms"
        )

    def clear(self) -> None:
        self._event = None
        self.table.setRowCount(0)
        self.header.setText("no step selected")
        self.timings.setText("")

    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        self._apply_palette()
        if self._event is not None:
            self.show_step(self._event)

    def _apply_palette(self) -> None:
        palette = self.palette()
        role = QPalette.ColorRole
        for roles, colour in (((role.Window, role.Base, role.Button), self._theme.background),
                              ((role.AlternateBase,), self._theme.shade),
                              ((role.WindowText, role.Text, role.ButtonText),
                               self._theme.foreground)):
            for r in roles:
                palette.setColor(r, QColor(colour))
        self.setPalette(palette)
        self.setAutoFillBackground(True)

    def _item(self, text: str, kind: str | None) -> QTableWidgetItem:
        item = QTableWidgetItem(text)
        if kind is not None:
            item.setForeground(QColor(self._theme.kind_colour(kind)))
            font = item.font()
            font.setStrikeOut(kind == KIND_REJECTED)
            item.setFont(font)
        item.setTextAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        return item


def _proposal_row(event: StepEvent, index: int, token: ProposedToken) -> list[str]:
    verdict = "accepted" if token.accepted else f"rejected ({token.reject_reason or '?'})"
    return [
        str(index + 1),
        str(event.position + index),
        visible(token.text),
        _source(token),
        prob(token.p_draft),
        prob(token.p_target),
        verdict,
        why(token),
    ]


def _source(token: ProposedToken) -> str:
    text = token.source
    if token.detail:
        text += f" · {token.detail}"
    span = token.span
    if span is not None and span.run is not None:
        text += f" ← earlier run {span.run}, its token {span.tok_start}"
    elif span is not None:
        text += f" ← tokens {span.tok_start}–{span.tok_end}"
    return text


def _target_row(event: StepEvent) -> list[str]:
    target = event.target
    return [
        "T",
        str(event.position + event.n_accepted),
        visible(target.text),
        "target",
        "—",
        prob(target.p_target),
        target.kind,
        f"the target's own token · logit margin {margin(target.margin)}",
    ]
