"""The generated text, every token coloured by what happened to it.

Steps are appended through one QTextCursor, a QTextCharFormat per token; each format carries
the token's (step, token) indices as user properties, so hover and click map a point in the
text back to the event. Appends share one open edit block until `flush` (run by a 16 ms
timer) closes it, so the document is laid out at most once a frame, not once per token:
laying out a paragraph costs its whole length, and text without newlines is one paragraph.
The document is only rebuilt when the theme or the rejected-token toggle changes what every
token looks like. A token's text is laid out cut to describe.TOKEN_SHOWN_CHARS (with its
length): one token of megabytes kept Qt's layout busy for minutes.
"""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import QEvent, QObject, QPoint, QPointF, Qt, QTimer, Signal
from PySide6.QtGui import (
    QColor,
    QFontDatabase,
    QHelpEvent,
    QMouseEvent,
    QPalette,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
)
from PySide6.QtWidgets import QHBoxLayout, QLabel, QTextEdit, QToolTip, QVBoxLayout, QWidget

from ..board.describe import cut, proposal_tooltip, target_tooltip
from ..board.kinds import KIND_REJECTED, KIND_TARGET, KINDS, proposal_kind, words
from ..board.palette import DARK, Theme
from ..engines.events import StepEvent

STEP_PROPERTY = QTextFormat.UserProperty + 1  # index into TokenView.events
TOKEN_PROPERTY = QTextFormat.UserProperty + 2  # index into proposed; len(proposed) = target
FLUSH_MS = 16  # lay out pending appends at most about 60 times a second
# The token where a lane's text parted from plain decoding's: a wavy red underline on a red
# tint, a colour and a line no token kind uses (rejected tokens are struck through in brown),
# seen from the back of a room; the token keeps its kind's colour.
PARTED_COLOURS = {"dark": ("#ff4f4f", "#5c1f26"), "light": ("#d0002a", "#ffe8eb")}


class TokenView(QWidget):
    """Read-only coloured text of a run, appended step by step."""

    tokenHovered = Signal(int, int, object)  # step, token, Span of a copied token or None
    tokenClicked = Signal(int)  # step

    def __init__(self, theme: Theme = DARK, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._events: list[StepEvent] = []
        self._token_count = 0
        self._show_rejected = True
        self._hovered: tuple[int, int] | None = None
        self._parted: tuple[int, int, str] | None = None  # step, token, why (mark_parting)
        self._block_open = False
        self._theme = theme
        self._formats = _formats(theme)
        self._edit = QTextEdit(readOnly=True)
        self._edit.document().setUndoRedoEnabled(False)  # an undo stack would grow forever
        self._edit.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self._cursor = QTextCursor(self._edit.document())
        self._flush_timer = QTimer(self, singleShot=True, interval=FLUSH_MS)
        self._flush_timer.timeout.connect(self.flush)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self._edit)
        self._apply_palette()
        self._edit.viewport().setMouseTracking(True)
        self._edit.viewport().installEventFilter(self)

    # ------------------------------------------------------------ public API

    @property
    def events(self) -> list[StepEvent]:
        """The appended events, in order (read-only by convention)."""
        return self._events

    @property
    def token_count(self) -> int:
        """Tokens emitted by the appended steps (accepted proposals + target tokens)."""
        return self._token_count

    @property
    def show_rejected(self) -> bool:
        return self._show_rejected

    @property
    def editor(self) -> QTextEdit:
        """The read-only text edit inside (its document holds the coloured tokens)."""
        return self._edit

    def append_step(self, event: StepEvent) -> None:
        self._events.append(event)
        self._token_count += event.n_accepted + 1
        self._open_block()
        self._render(len(self._events) - 1, event)

    def clear(self) -> None:
        self._close_block()
        self._events.clear()
        self._token_count = 0
        self._parted = None
        self._edit.document().clear()
        self._set_hovered(None)

    def set_show_rejected(self, show: bool) -> None:
        if show != self._show_rejected:
            self._show_rejected = show
            self._rebuild()

    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        self._formats = _formats(theme)
        self._apply_palette()
        self._rebuild()

    def set_font_size(self, points: float) -> None:
        font = self._edit.font()
        font.setPointSizeF(points)
        self._edit.setFont(font)  # becomes the document's default font

    def token_at_position(self, position: int) -> tuple[int, int] | None:
        """(step, token) of the character at a document position, None off the tokens."""
        self.flush()
        cursor = QTextCursor(self._edit.document())
        if not 0 <= position < self._edit.document().characterCount() - 1:
            return None
        cursor.setPosition(position + 1)  # charFormat() is the format left of the cursor
        return _indices(cursor.charFormat())

    def token_at(self, point: QPoint) -> tuple[int, int] | None:
        """(step, token) under a point in viewport coordinates, None off the tokens."""
        self.flush()
        offset = QPointF(self._edit.horizontalScrollBar().value(),
                         self._edit.verticalScrollBar().value())
        layout = self._edit.document().documentLayout()
        return _indices(layout.formatAt(QPointF(point) + offset).toCharFormat())

    def tooltip(self, step: int, token: int) -> str:
        event = self._events[step]
        words = proposal_tooltip(event, token) if token < len(event.proposed) else (
            target_tooltip(event))
        parted = self.parted()
        return f"{parted[2]}\n\n{words}" if parted and parted[:2] == (step, token) else words

    def mark_parting(self, step: int, token: int, why: str) -> None:
        """Mark the token where the text parted from plain decoding's, `why` in its tooltip.
        Drawn again whole: once a race, and the token may lie anywhere in the text."""
        self._parted = (step, token, why)
        self._rebuild()

    def parted(self) -> tuple[int, int, str] | None:
        """The marked (step, token, why), or None."""
        return self._parted

    # ------------------------------------------------------------ rendering

    def _render(self, step: int, event: StepEvent) -> None:
        shaded = step % 2 == 1
        # Accepted proposals are a prefix of the proposal, so proposal order is text order.
        for i, token in enumerate(event.proposed):
            if token.accepted:
                self._insert(cut(token.text), proposal_kind(token), shaded, step, i)
            elif self._show_rejected:
                # A rejected newline never happened: show it as a mark, not a line break.
                self._insert(cut(token.text).replace("\n", "↵"), KIND_REJECTED, shaded, step, i)
        self._insert(cut(event.target.text), KIND_TARGET, shaded, step, len(event.proposed))

    def _insert(self, text: str, kind: str, shaded: bool, step: int, token: int) -> None:
        if not text:
            return
        fmt = QTextCharFormat(self._formats[kind, shaded])
        if self._parted is not None and self._parted[:2] == (step, token):
            fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.WaveUnderline)
            line, tint = parted_colours(self._theme)
            fmt.setUnderlineColor(QColor(line))
            fmt.setBackground(QColor(tint))
        fmt.setProperty(STEP_PROPERTY, step)
        fmt.setProperty(TOKEN_PROPERTY, token)
        self._cursor.insertText(text, fmt)

    def _rebuild(self) -> None:
        self._close_block()
        bar = self._edit.verticalScrollBar()
        at_end, value = bar.value() >= bar.maximum(), bar.value()
        self._edit.document().clear()
        self._cursor = QTextCursor(self._edit.document())
        self._cursor.beginEditBlock()
        for step, event in enumerate(self._events):
            self._render(step, event)
        self._cursor.endEditBlock()
        bar.setValue(bar.maximum() if at_end else value)

    def _open_block(self) -> None:
        if not self._block_open:
            self._cursor.movePosition(QTextCursor.MoveOperation.End)
            self._cursor.beginEditBlock()
            self._block_open = True
            self._flush_timer.start()

    def _close_block(self) -> None:
        if self._block_open:
            self._block_open = False
            self._cursor.endEditBlock()

    def flush(self) -> None:
        """Lay out what was appended since the last flush; follow the end if we were there."""
        if not self._block_open:
            return
        bar = self._edit.verticalScrollBar()
        at_end = bar.value() >= bar.maximum()
        self._close_block()
        if at_end:
            bar.setValue(bar.maximum())

    def _apply_palette(self) -> None:
        palette = self._edit.palette()
        palette.setColor(QPalette.ColorRole.Base, QColor(self._theme.background))
        palette.setColor(QPalette.ColorRole.Text, QColor(self._theme.foreground))
        self._edit.setPalette(palette)

    # ------------------------------------------------------------ mouse

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if kind == QEvent.Type.MouseMove:
            self._set_hovered(self.token_at(event.position().toPoint()))
        elif kind == QEvent.Type.Leave:
            self._set_hovered(None)
        elif kind == QEvent.Type.MouseButtonPress and _left(event):
            hit = self.token_at(event.position().toPoint())
            if hit is not None:
                self.tokenClicked.emit(hit[0])
        elif kind == QEvent.Type.ToolTip:
            self._show_tooltip(event)
            return True
        return super().eventFilter(watched, event)

    def _set_hovered(self, hit: tuple[int, int] | None) -> None:
        if hit == self._hovered:
            return
        self._hovered = hit
        if hit is None:
            self.tokenHovered.emit(-1, -1, None)
            return
        step, token = hit
        proposed = self._events[step].proposed
        span = proposed[token].span if token < len(proposed) else None
        self.tokenHovered.emit(step, token, span)

    def _show_tooltip(self, event: QHelpEvent) -> None:
        hit = self.token_at(event.pos())
        if hit is None:
            QToolTip.hideText()
        else:
            QToolTip.showText(event.globalPos(), self.tooltip(*hit), self._edit.viewport())


class Legend(QWidget):
    """A row of coloured swatches naming each token kind."""

    def __init__(self, theme: Theme = DARK, kinds: Iterable[str] = KINDS,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAutoFillBackground(True)
        self._layout = QHBoxLayout(self)
        self._layout.setContentsMargins(4, 2, 4, 2)
        self._theme = theme
        self._kinds = tuple(kinds)
        self._labels: dict[str, QLabel] = {}
        self._points: int | None = None
        self._build()

    @property
    def kinds(self) -> tuple[str, ...]:
        return self._kinds

    def set_kinds(self, kinds: Iterable[str]) -> None:
        self._kinds = tuple(kinds)
        self._build()

    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        self._build()

    def set_point_size(self, points: int) -> None:
        """Text size of the swatches' names (a style sheet: the application's overrides a
        font)."""
        self._points = points
        self._build()

    def label(self, kind: str) -> QLabel:
        return self._labels[kind]

    def _build(self) -> None:
        while (item := self._layout.takeAt(0)) is not None:
            if item.widget() is not None:
                item.widget().hide()  # deleted later: until then it must not paint
                item.widget().deleteLater()
        self._labels = {kind: QLabel(_legend_html(self._theme, kind)) for kind in self._kinds}
        for label in self._labels.values():
            if self._points:
                label.setStyleSheet(f"font-size: {self._points}pt;")
            self._layout.addWidget(label)
        self._layout.addStretch(1)
        palette = self.palette()
        palette.setColor(QPalette.ColorRole.Window, QColor(self._theme.background))
        self.setPalette(palette)


def _legend_html(theme: Theme, kind: str) -> str:
    name = words(kind)
    if kind == KIND_REJECTED:
        name = f"<s>{name}</s>"
    return (f'<span style="color:{theme.kind_colour(kind)}">■</span>&nbsp;'
            f'<span style="color:{theme.foreground}">{name}</span>')


def _formats(theme: Theme) -> dict[tuple[str, bool], QTextCharFormat]:
    """The char format of each (kind, shaded step) pair; tokens copy one and add indices."""
    formats = {}
    for kind in KINDS:
        for shaded in (False, True):
            fmt = QTextCharFormat()
            fmt.setForeground(QColor(theme.kind_colour(kind)))
            if shaded:
                fmt.setBackground(QColor(theme.shade))
            if kind == KIND_REJECTED:
                fmt.setFontStrikeOut(True)
            formats[kind, shaded] = fmt
    return formats


def parted_colours(theme: Theme) -> tuple[str, str]:
    """The parting mark's underline and tint in `theme` (its contrast variants included)."""
    return PARTED_COLOURS["light" if theme.name.startswith("light") else "dark"]


def _indices(fmt: QTextCharFormat) -> tuple[int, int] | None:
    if not fmt.hasProperty(STEP_PROPERTY):
        return None
    return fmt.intProperty(STEP_PROPERTY), fmt.intProperty(TOKEN_PROPERTY)


def _left(event: QMouseEvent) -> bool:
    return event.button() == Qt.MouseButton.LeftButton
