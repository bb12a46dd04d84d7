"""The anatomy of one step, played in stages for a talk (board/anatomy_stages.py builds them).

The view observes an `Anatomy` and draws its current `Stage` with a QPainter: the text so far,
the guesses as cards coloured by source (a tree as a tree), the target's one pass around them,
each verdict, the target's own token, the time of the step against one plain step's.
Everything it writes is the model's; the view adds only the layout. Fonts, pens and the
layout are made when the size, the theme or the step changes, never while painting.

Keys: Right, PageDown or N the next stage (a presenter's clicker sends PageDown); Left,
PageUp or P the one before; Space plays and pauses; + and - the speed; Home and End; F fills
the screen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from PySide6.QtCore import QEvent, QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFont,
    QFontDatabase,
    QFontMetricsF,
    QKeyEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
)
from PySide6.QtWidgets import QWidget

from ..board import anatomy_stages as st
from ..board.describe import prob
from ..board.kinds import KIND_REJECTED, KIND_TARGET, KINDS
from ..board.kinds import words as kind_words
from ..board.palette import DARK, Theme
from ..engines.events import TARGET_BONUS, TARGET_CORRECTION

STAGE_MS = 2200  # one stage's time on screen at speed 1
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0)
FADED = 70  # alpha of what no longer matters (refused, dropped)
WRAP = Qt.TextFlag.TextWordWrap
CENTRE = Qt.AlignmentFlag.AlignCenter
LEFT = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
TOP_LEFT = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop

NEXT_KEYS = (Qt.Key.Key_Right, Qt.Key.Key_PageDown, Qt.Key.Key_N)
BACK_KEYS = (Qt.Key.Key_Left, Qt.Key.Key_PageUp, Qt.Key.Key_P)
OTHER_KEYS = (Qt.Key.Key_Space, Qt.Key.Key_Plus, Qt.Key.Key_Equal, Qt.Key.Key_Minus,
              Qt.Key.Key_Home, Qt.Key.Key_End, Qt.Key.Key_F)


@dataclass
class _Style:
    """Fonts, colours and pens for one theme at one size (u: the layout's unit, in pixels)."""

    theme: Theme
    u: float
    fonts: dict[str, QFont] = field(default_factory=dict)
    colours: dict[str, QColor] = field(default_factory=dict)
    pens: dict[str, QPen] = field(default_factory=dict)
    metrics: dict[str, QFontMetricsF] = field(default_factory=dict)
    shade: QBrush = field(default_factory=QBrush)

    def __post_init__(self) -> None:
        fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family()
        for name, size, bold, family in (
                ("title", 1.5, True, None), ("caption", 0.92, False, None),
                ("token", 1.3, True, fixed), ("context", 0.95, False, fixed),
                ("label", 0.72, True, None), ("small", 0.62, False, None),
                ("bar", 0.62, False, fixed), ("bar-drawn", 0.62, True, fixed)):
            font = QFont(family) if family else QFont()
            font.setPixelSize(max(6, round(size * self.u)))
            font.setBold(bold)
            self.fonts[name] = font
        strike = QFont(self.fonts["token"])
        strike.setStrikeOut(True)
        self.fonts["struck"] = strike
        self.metrics = {name: QFontMetricsF(font) for name, font in self.fonts.items()}
        t = self.theme
        for kind in KINDS:
            self.colours[kind] = QColor(t.kind_colour(kind))
            faded = QColor(t.kind_colour(kind))
            faded.setAlpha(FADED)
            self.colours[f"{kind}-faded"] = faded
        for name in ("background", "foreground", "shade", "grid"):
            self.colours[name] = QColor(getattr(t, name))
        self.colours["grid-faded"] = QColor(t.grid)
        self.colours["grid-faded"].setAlpha(FADED)
        self.colours["pass"] = QColor(t.foreground)  # the target's colour: its own tokens
        self.shade = QBrush(self.colours["shade"])
        for name, colour in self.colours.items():
            self.pens[name] = QPen(colour, max(1.0, 0.08 * self.u))
        self.pens["focus"] = QPen(self.colours["foreground"], max(2.0, 0.22 * self.u))
        self.pens["pass"] = QPen(self.colours["pass"], max(2.0, 0.12 * self.u))
        self.pens["dashed"] = QPen(self.colours["grid"], max(1.0, 0.08 * self.u),
                                   Qt.PenStyle.DashLine)

    def font(self, name: str) -> QFont:
        return self.fonts[name]


@dataclass
class _Layout:
    """Where everything goes for one anatomy at one size."""

    width: float
    u: float
    anatomy: st.Anatomy | None
    cards: list[QRectF] = field(default_factory=list)  # a card per guess (chain or tree)
    extra: QRectF | None = None  # a chain's last position, scored by the pass, never guessed
    own: QRectF | None = None  # the target's own token
    tree_font: QFont | None = None
    tree_struck: QFont | None = None
    tree_metrics: QFontMetricsF | None = None
    edges: list[tuple[int, int]] = field(default_factory=list)  # (parent or -1, child)
    heads: list[QRectF] = field(default_factory=list)  # a tree's Medusa head over each level
    root: QRectF | None = None  # a tree's root: the pending token
    residual: QRectF | None = None  # a sampled correction's residual, beside its own token


class AnatomyView(QWidget):
    """Plays one step's anatomy stage by stage."""

    stageChanged = Signal(int)
    playingChanged = Signal(bool)

    def __init__(self, theme: Theme = DARK, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # Every stage of every step shown, in order: (its step's anatomy, the stage's index).
        self._stages: list[tuple[st.Anatomy, int]] = []
        self._index = 0
        self._speed = 1.0
        self._theme = theme
        self._style = _Style(theme, 20.0)
        self._layout: _Layout | None = None
        self._texts: list[str] = []
        self._timer = QTimer(self, interval=STAGE_MS)
        self._timer.timeout.connect(self._advance)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setAutoFillBackground(True)
        self.setMinimumSize(96, 54)  # a dock beside the Step dock must not widen the window
        self._apply_palette()

    # ------------------------------------------------------------ model

    @property
    def anatomy(self) -> st.Anatomy | None:
        """The step shown now."""
        return self._stages[self._index][0] if self._stages else None

    @property
    def index(self) -> int:
        return self._index

    @property
    def stage(self) -> st.Stage | None:
        if not self._stages:
            return None
        made, index = self._stages[self._index]
        return made.stages[index]

    @property
    def stage_count(self) -> int:
        return len(self._stages)

    @property
    def speed(self) -> float:
        return self._speed

    @property
    def theme(self) -> Theme:
        return self._theme

    @property
    def texts(self) -> list[str]:
        """What the last paint wrote about the step (every word and number), in order."""
        return list(self._texts)

    @property
    def playing(self) -> bool:
        return self._timer.isActive()

    def set_anatomy(self, anatomy: st.Anatomy, stage: int = 0) -> None:
        self.set_anatomies([anatomy], stage)

    def set_anatomies(self, anatomies: list[st.Anatomy], stage: int = 0) -> None:
        """Steps played one after another (a run of steps for a slide)."""
        self._stages = [(made, i) for made in anatomies for i in range(len(made.stages))]
        self._layout = None
        self._index = -1  # whatever `stage` is, it is news
        self.go(stage)

    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        self._style = _Style(theme, self._style.u)
        self._layout = None
        self._apply_palette()
        self.update()

    # ------------------------------------------------------------ stepping

    def go(self, index: int) -> None:
        count = self.stage_count
        index = max(0, min(index, count - 1)) if count else 0
        if index != self._index:
            self._index = index
            self.update()
            self.stageChanged.emit(index)

    def forward(self) -> None:
        self.go(self._index + 1)

    def back(self) -> None:
        self.go(self._index - 1)

    def set_playing(self, on: bool) -> None:
        if on == self.playing:
            return
        if on:
            if self._index >= self.stage_count - 1:  # played to the end: from the start
                self.go(0)
            self._timer.start()
        else:
            self._timer.stop()
        self.playingChanged.emit(on)

    def toggle_play(self) -> None:
        self.set_playing(not self.playing)

    def set_speed(self, speed: float) -> None:
        self._speed = speed
        self._timer.setInterval(round(STAGE_MS / speed))

    def faster(self) -> None:
        self.set_speed(next((s for s in SPEEDS if s > self._speed), SPEEDS[-1]))

    def slower(self) -> None:
        self.set_speed(next((s for s in reversed(SPEEDS) if s < self._speed), SPEEDS[0]))

    def toggle_full_screen(self) -> None:
        """F: the window the anatomy is in (its own, a floating dock, or the main window)
        fills the screen, or leaves it."""
        top = self.window()
        if top.isFullScreen():
            top.showNormal()
        else:
            top.showFullScreen()

    def _advance(self) -> None:
        if self._index >= self.stage_count - 1:
            self.set_playing(False)
        else:
            self.forward()

    # ------------------------------------------------------------ keys

    def event(self, event: QEvent) -> bool:
        # The window's replay actions own Space, Left and Right: while the anatomy has the
        # focus its keys come here first.
        if event.type() == QEvent.Type.ShortcutOverride and self._handles(event.key()):
            event.accept()
            return True
        return super().event(event)

    def _handles(self, key: int) -> bool:
        return key in NEXT_KEYS or key in BACK_KEYS or key in OTHER_KEYS

    def keyPressEvent(self, event: QKeyEvent) -> None:
        key = event.key()
        actions = {Qt.Key.Key_Space: self.toggle_play, Qt.Key.Key_Plus: self.faster,
                   Qt.Key.Key_Equal: self.faster, Qt.Key.Key_Minus: self.slower,
                   Qt.Key.Key_Home: lambda: self.go(0),
                   Qt.Key.Key_End: lambda: self.go(self.stage_count - 1),
                   Qt.Key.Key_F: self.toggle_full_screen}
        if key in NEXT_KEYS:
            self.forward()
        elif key in BACK_KEYS:
            self.back()
        elif key in actions:
            actions[key]()
        else:
            super().keyPressEvent(event)

    # ------------------------------------------------------------ drawing

    def resizeEvent(self, event) -> None:
        self._layout = None
        super().resizeEvent(event)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setRenderHint(QPainter.RenderHint.TextAntialiasing)
        if not self._stages:
            self._texts = []
            self._draw_empty(painter)
        else:
            self._draw(painter, self.anatomy, self.stage)
        painter.end()

    def _apply_palette(self) -> None:
        palette = self.palette()
        palette.setColor(QPalette.ColorRole.Window, QColor(self._theme.background))
        self.setPalette(palette)

    def _ensure_layout(self) -> _Layout:
        u = min(self.width() / 64.0, self.height() / 36.0)
        made = self.anatomy
        lay = self._layout
        if lay is None or lay.u != u or lay.width != self.width() or lay.anatomy is not made:
            if self._style.u != u:
                self._style = _Style(self._theme, u)
            self._layout = _lay_out(made, self.width(), u)
        return self._layout

    def _draw_empty(self, p: QPainter) -> None:
        self._ensure_layout()
        s = self._style
        p.setPen(s.pens["grid"])
        p.setFont(s.font("caption"))
        p.drawText(self.rect(), CENTRE | WRAP, "click a token to take its step apart")

    def _draw(self, p: QPainter, a: st.Anatomy, stage: st.Stage) -> None:
        lay, s = self._ensure_layout(), self._style
        painter = _Painter(p, s, lay, a, stage, self.width())
        painter.draw()
        self._texts = painter.texts
        p.setPen(s.pens["grid"])
        p.setFont(s.font("small"))
        e = a.event
        where = (f"step {e.step} · {e.oracle} · K={e.k}" + (f" · {a.batch}" if a.batch else "")
                 + f" · stage {self._index + 1}/{self.stage_count}"
                 + (f" · ▶ {self._speed:g}×" if self.playing else ""))
        p.drawText(QRectF(0, 34.6 * lay.u, self.width() - 1.2 * lay.u, 1.2 * lay.u),
                   Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, where)


# ---------------------------------------------------------------- layout


CARDS_TOP, CARD_H = 11.6, 5.2  # the guesses' row (units)
OWN_TOP, OWN_H = 23.0, 3.4  # the target's own token
BARS_TOP = 27.0  # the step's time against a plain step's
LEGEND_TOP = 33.0
# A sampled correction's residual: its one-line caption (two lines' room), then a bar a token.
RESIDUAL_TOP, RESIDUAL_W, RESIDUAL_HEAD, RESIDUAL_ROW = 21.3, 26.0, 1.6, 0.7
# Over the target's own token in a chain: where it goes.
OWN_PLACE = {TARGET_CORRECTION: "▼ in place of the refused guess",
             TARGET_BONUS: "▼ one more, from the same pass"}


def _lay_out(a: st.Anatomy | None, width: float, u: float) -> _Layout:
    lay = _Layout(width, u, a)
    if a is None:
        return lay
    if a.is_tree:
        _lay_out_tree(lay, a)
    else:
        _lay_out_chain(lay, a)
    return lay


def _lay_out_chain(lay: _Layout, a: st.Anatomy) -> None:
    u, n = lay.u, len(a.pieces) + 1
    slot = min(9.5 * u, (lay.width - 3 * u) / n)
    x0 = (lay.width - n * slot) / 2
    for i in range(n):
        rect = QRectF(x0 + i * slot + 0.25 * u, CARDS_TOP * u, slot - 0.5 * u, CARD_H * u)
        if i < n - 1:
            lay.cards.append(rect)
        else:
            lay.extra = rect
    at = lay.cards[a.event.n_accepted] if a.event.n_accepted < len(lay.cards) else lay.extra
    lay.own = QRectF(at.x(), OWN_TOP * u, at.width(), OWN_H * u)
    if a.residual:
        lay.residual = _residual_panel(lay.own, lay.width, u, len(a.residual))


def _residual_panel(own: QRectF, width: float, u: float, bars: int) -> QRectF | None:
    """Beside the correction, on the side with more room: under the kept guesses' numbers
    and over the step's time (None where the view is too narrow to read it)."""
    right = width - 1.5 * u - (own.right() + 1.2 * u)
    left = own.left() - 1.2 * u - 1.5 * u
    room = min(max(left, right), RESIDUAL_W * u)
    if room < 12 * u:
        return None
    height = (RESIDUAL_HEAD + bars * RESIDUAL_ROW) * u
    top = min(RESIDUAL_TOP, BARS_TOP - 0.1 - height / u) * u
    x = own.right() + 1.2 * u if right >= left else own.left() - 1.2 * u - room
    return QRectF(x, top, room, height)


def _lay_out_tree(lay: _Layout, a: st.Anatomy) -> None:
    u, pieces = lay.u, a.pieces
    levels = 1 + max((p.depth for p in pieces), default=0)
    column = min(10 * u, (lay.width - 3 * u) / (levels + 2))  # the root, the levels, the own
    x0 = (lay.width - (levels + 2) * column) / 2
    rows = _tree_rows(pieces)
    top, height = 9.8 * u, 12.4 * u
    if a.heads:  # a row over the levels names the head that guessed each
        lay.heads = [QRectF(x0 + (d + 1) * column + 0.3 * u, top, column - 1.1 * u, 1.2 * u)
                     for d in range(len(a.heads))]
        top, height = top + 1.3 * u, height - 1.3 * u
    row_h = min(2.6 * u, height / max(1, max(rows.values(), default=0) + 1))
    box_h = 0.8 * row_h
    for i, piece in enumerate(pieces):
        x = x0 + (piece.depth + 1) * column
        lay.cards.append(QRectF(x + 0.3 * u, top + rows[i] * row_h, column - 1.1 * u, box_h))
        lay.edges.append((piece.parent, i))
    lay.root = QRectF(x0 + 0.3 * u, top + _root_row(rows, pieces) * row_h, column - 1.1 * u,
                      box_h)
    path = a.event.path or ()
    # After the path's last node, on its row where nothing grows from it there, else below.
    last = path[-1] if path else -1
    end = lay.cards[last] if last >= 0 else lay.root
    x = x0 + (len(path) + 1) * column + 0.3 * u
    if any(p.parent == last for p in pieces):
        lay.own = QRectF(x, OWN_TOP * u, column - 1.1 * u, OWN_H * u)
    else:
        lay.own = QRectF(x, end.y(), column - 1.1 * u, end.height())
    font = QFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family())
    font.setPixelSize(max(6, round(min(1.1 * u, 0.55 * box_h))))
    font.setBold(True)
    lay.tree_font = font
    lay.tree_struck = QFont(font)
    lay.tree_struck.setStrikeOut(True)
    lay.tree_metrics = QFontMetricsF(font)


def _tree_rows(pieces: tuple[st.Piece, ...]) -> dict[int, float]:
    """Each node's row: leaves one after another depth first, a parent level with its first
    child (so the likeliest branch, tried first, is a straight line)."""
    kids: dict[int, list[int]] = {}
    for i, piece in enumerate(pieces):
        kids.setdefault(piece.parent, []).append(i)
    rows: dict[int, float] = {}
    next_row = 0

    def place(node: int) -> float:
        nonlocal next_row
        children = kids.get(node, [])
        if not children:
            rows[node] = next_row
            next_row += 1
            return rows[node]
        placed = [place(c) for c in children]  # every child, in order, before the parent
        rows[node] = placed[0]
        return placed[0]

    for top in kids.get(-1, []):
        place(top)
    return rows


def _root_row(rows: dict[int, float], pieces: tuple[st.Piece, ...]) -> float:
    firsts = [rows[i] for i, p in enumerate(pieces) if p.parent == -1]
    return firsts[0] if firsts else 0.0


# ---------------------------------------------------------------- painting


class _Painter:
    """Draws one stage: made per paint, holding only references to what is cached."""

    def __init__(self, p: QPainter, s: _Style, lay: _Layout, a: st.Anatomy, stage: st.Stage,
                 width: float) -> None:
        self.p, self.s, self.lay, self.a, self.stage, self.width = p, s, lay, a, stage, width
        self.u = lay.u
        self.texts: list[str] = []  # what this paint wrote, in order (AnatomyView.texts)

    def _write(self, rect: QRectF, flags, text: str) -> None:
        self.p.drawText(rect, flags, text)
        self.texts.append(text)

    def draw(self) -> None:
        self._headline()
        self._context()
        if self.a.is_tree:
            self._tree()
        else:
            self._chain()
        if self.stage.own_shown:
            self._own()
        if self.stage.residual_shown and self.lay.residual is not None:
            self._residual()
        if self.stage.pass_drawn:
            self._bars()
        self._legend()

    def _text(self, rect: QRectF, text: str, font: str, colour: str,
              flags=TOP_LEFT | WRAP) -> None:
        self.p.setFont(self.s.font(font))
        self.p.setPen(self.s.pens[colour])
        self._write(rect, flags, text)

    def _headline(self) -> None:
        u, w = self.u, self.width
        self._text(QRectF(1.5 * u, 0.7 * u, w - 3 * u, 2.2 * u), self.stage.title, "title",
                   "foreground", LEFT)
        self._text(QRectF(1.5 * u, 3.0 * u, w - 3 * u, 2.8 * u), self.stage.caption, "caption",
                   "foreground")

    def _context(self) -> None:
        u = self.u
        y, h = 6.4 * u, 1.8 * u
        self._text(QRectF(1.5 * u, y, 7 * u, h), "text so far:", "label", "grid", LEFT)
        pieces = [(text, "context") for text in self.a.context]
        if self.stage.tally_shown:
            pieces += [(text, kind) for text, kind in self.a.kept_texts]
        self._pieces_row(pieces, 8.8 * u, y, h)

    def _pieces_row(self, pieces: list[tuple[str, str]], x: float, y: float, h: float) -> None:
        """Tokens side by side, each on a shade so a listener sees where tokens part; the
        row is cut on the left (the newest text matters)."""
        p, s, u = self.p, self.s, self.u
        font = s.font("context")
        metrics = s.metrics["context"]
        widths = [metrics.horizontalAdvance(text) + 0.5 * u for text, _ in pieces]
        room = self.width - 1.5 * u - x
        while len(widths) > 1 and sum(widths) > room:
            pieces, widths = pieces[1:], widths[1:]
        p.setFont(font)
        for (text, kind), width in zip(pieces, widths):
            rect = QRectF(x, y, width - 0.15 * u, h)
            p.fillRect(rect, s.colours["shade"])
            p.setPen(s.pens["foreground" if kind == "context" else kind])
            self._write(rect, CENTRE, text)
            x += width

    # ------------------------------------------------------------ a chain

    def _chain(self) -> None:
        if self.stage.pass_drawn:
            self._pass_frame()
        for i, rect in enumerate(self.lay.cards):
            if i in self.stage.visible:
                self._card(i, rect)
                if i in self.stage.judged:
                    self._verdict(i, rect)
        if self.stage.pass_drawn and self.lay.extra is not None:
            self._extra_position()

    def _pass_frame(self) -> None:
        """The one pass drawn around every position it scored."""
        u, lay = self.u, self.lay
        last = lay.extra if lay.extra is not None else lay.cards[-1]
        first = lay.cards[0] if lay.cards else last
        frame = QRectF(first.left() - 0.2 * u, first.top() - 1.7 * u,
                       last.right() - first.left() + 0.4 * u, last.height() + 1.9 * u)
        self.p.setPen(self.s.pens["pass"])
        self.p.setBrush(Qt.BrushStyle.NoBrush)
        self.p.drawRoundedRect(frame, 0.4 * u, 0.4 * u)
        n = self.a.positions
        self._text(QRectF(frame.left() + 0.4 * u, frame.top() + 0.1 * u, frame.width(), 1.4 * u),
                   f"one pass of the target: {n} position{'s' if n != 1 else ''}", "label",
                   "pass", LEFT)

    def _framed(self, i: int, rect: QRectF, corner: float):
        """Guess i's frame as this stage looks at it; its piece, look and colour."""
        piece, look = self.a.pieces[i], self.a.look(self.stage, i)
        colour = _colour(piece, look)
        self.p.setBrush(self.s.shade if look.lit else Qt.BrushStyle.NoBrush)
        self.p.setPen(self.s.pens["focus"] if look.emphasis else self.s.pens[colour])
        self.p.drawRoundedRect(rect, corner * self.u, corner * self.u)
        return piece, look, colour

    def _card(self, i: int, rect: QRectF) -> None:
        s, u = self.s, self.u
        piece, look, colour = self._framed(i, rect, 0.35)
        token = QRectF(rect.x(), rect.y() + 0.2 * u, rect.width(), 2.0 * u)
        font = "struck" if look.struck else "token"
        self._text(token, _elided(piece.text, s.metrics[font], rect.width() - 0.4 * u), font,
                   colour, CENTRE)
        self._text(QRectF(rect.x() + 0.3 * u, rect.y() + 2.2 * u, rect.width() - 0.6 * u,
                          rect.height() - 2.3 * u), _card_lines(piece), "small", colour,
                   Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop | WRAP)

    def _verdict(self, i: int, rect: QRectF) -> None:
        piece, u = self.a.pieces[i], self.u
        mark = {st.KEPT: "✓ kept", st.REFUSED: "✗ refused", st.DROPPED: "— thrown away"}
        colour = (piece.kind if piece.verdict == st.KEPT else KIND_REJECTED)
        top = rect.bottom() + 0.3 * u
        self._text(QRectF(rect.x(), top, rect.width(), 1.3 * u), mark[piece.verdict], "label",
                   colour, CENTRE)
        self._text(QRectF(rect.x() + 0.1 * u, top + 1.4 * u, rect.width() - 0.2 * u, 4.4 * u),
                   _verdict_lines(piece), "small", "foreground",
                   Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop | WRAP)

    def _extra_position(self) -> None:
        """The position after the last guess: the pass scores it too (the bonus's place)."""
        rect, u = self.lay.extra, self.u
        self.p.setPen(self.s.pens["dashed"])
        self.p.setBrush(Qt.BrushStyle.NoBrush)
        self.p.drawRoundedRect(rect, 0.35 * u, 0.35 * u)
        self._text(rect.adjusted(0.3 * u, 0.3 * u, -0.3 * u, -0.3 * u),
                   "the next position: scored in the same pass", "small", "grid",
                   CENTRE | WRAP)

    # ------------------------------------------------------------ a tree

    def _tree(self) -> None:
        lay, stage, p, s = self.lay, self.stage, self.p, self.s
        for parent, child in lay.edges:
            if child not in stage.visible:
                continue
            look = self.a.look(stage, child)  # the path lit as the walk takes it
            p.setPen(s.pens["pass" if look.lit else "grid-faded" if look.faded else "grid"])
            start = lay.root if parent < 0 else lay.cards[parent]
            end = lay.cards[child]
            p.drawLine(QPointF(start.right(), start.center().y()),
                       QPointF(end.left(), end.center().y()))
        self._root()
        for i, rect in enumerate(lay.cards):
            if i in stage.visible:
                self._node(i, rect)
        shown = {self.a.pieces[i].depth for i in stage.visible}
        for depth, (rect, head) in enumerate(zip(lay.heads, self.a.heads)):
            if depth in shown:
                self._text(rect, head, "small", self.a.pieces[0].kind, CENTRE)
        if stage.pass_drawn:
            self._tree_pass_label()

    def _root(self) -> None:
        rect = self.lay.root
        self.p.setPen(self.s.pens["grid"])
        self.p.setBrush(Qt.BrushStyle.NoBrush)
        self.p.drawRoundedRect(rect, 0.3 * self.u, 0.3 * self.u)
        self._text(rect, "now", "small", "grid", CENTRE)

    def _node(self, i: int, rect: QRectF) -> None:
        p, s, u = self.p, self.s, self.u
        piece, look, colour = self._framed(i, rect, 0.25)
        font = self.lay.tree_struck if look.struck else self.lay.tree_font
        p.setFont(font)
        p.setPen(s.pens[colour])
        token = rect
        if piece.p_draft is not None and rect.height() >= 1.9 * u:  # room for p_draft below
            token = QRectF(rect.x(), rect.y(), rect.width(), rect.height() * 0.62)
            self._text(QRectF(rect.x(), token.bottom() - 0.1 * u, rect.width(),
                              rect.height() * 0.38), f"p_draft {prob(piece.p_draft)}", "small",
                       colour, CENTRE)
            p.setFont(font)
            p.setPen(s.pens[colour])
        self._write(token, CENTRE, _elided(piece.text, self.lay.tree_metrics,
                                           rect.width() - 0.3 * u))

    def _tree_pass_label(self) -> None:
        u = self.u
        n = self.a.positions
        self._text(QRectF(1.5 * u, 8.4 * u, self.width - 3 * u, 1.3 * u),
                   f"one pass of the target scored every node: {n} positions, each seeing only "
                   "its own branch", "label", "pass", LEFT)

    # ------------------------------------------------------------ the end of the step

    def _own(self) -> None:
        rect, s, u, a = self.lay.own, self.s, self.u, self.a
        if a.is_tree:  # the target's token hangs after the path's last node
            path = a.event.path or ()
            start = self.lay.cards[path[-1]] if path else self.lay.root
            self.p.setPen(s.pens["pass"])
            if rect.top() > start.bottom():  # below the tree: the node's children hold its row
                # Down the gap between the columns, so the lit line crosses no faded node.
                gap = (start.right() + rect.left()) / 2
                mid, low = start.center().y(), rect.center().y()
                self.p.drawPolyline([QPointF(start.right(), mid), QPointF(gap, mid),
                                     QPointF(gap, low), QPointF(rect.left(), low)])
            else:
                self.p.drawLine(QPointF(start.right(), start.center().y()),
                                QPointF(rect.left(), rect.center().y()))
        elif a.event.target.kind in OWN_PLACE:
            self._text(QRectF(rect.x() - 2 * u, rect.y() - 1.2 * u, rect.width() + 4 * u,
                              1.1 * u), OWN_PLACE[a.event.target.kind], "small", "foreground",
                       CENTRE)
        self.p.setBrush(s.shade)
        self.p.setPen(s.pens["focus"])
        self.p.drawRoundedRect(rect, 0.35 * u, 0.35 * u)
        if rect.height() < OWN_H * u:  # at the end of a tree's row, as small as its nodes
            self.p.setFont(self.lay.tree_font)
            self.p.setPen(s.pens[KIND_TARGET])
            self._write(rect, CENTRE, _elided(a.own, self.lay.tree_metrics, rect.width()))
            return
        self._text(QRectF(rect.x(), rect.y() + 0.2 * u, rect.width(), 1.9 * u),
                   _elided(a.own, s.metrics["token"], rect.width() - 0.4 * u), "token",
                   KIND_TARGET, CENTRE)
        self._text(QRectF(rect.x(), rect.y() + 2.0 * u, rect.width(), 1.2 * u),
                   f"target's own · {a.event.target.kind}", "small", "foreground", CENTRE)

    def _residual(self) -> None:
        """What the correction was drawn from: the residual's likeliest tokens as bars on one
        absolute scale (a full bar is probability 1), the drawn one in the target's colour."""
        rect, u, p, s = self.lay.residual, self.u, self.p, self.s
        self._text(QRectF(rect.x(), rect.y(), rect.width(), RESIDUAL_HEAD * u),
                   self.a.residual_words, "small", "foreground", TOP_LEFT | WRAP)
        label_w, value_w = 7.0 * u, 5.6 * u
        scale = rect.width() - label_w - value_w - 0.6 * u
        y = rect.y() + RESIDUAL_HEAD * u
        for i, bar in enumerate(self.a.residual):
            row = QRectF(rect.x(), y + i * RESIDUAL_ROW * u, rect.width(), RESIDUAL_ROW * u)
            colour = KIND_TARGET if bar.drawn else "grid"
            font = "bar-drawn" if bar.drawn else "bar"
            # The drawn token may rank below the others kept: its rank says how far.
            label = bar.text if bar.rank == i else f"#{bar.rank + 1} {bar.text}"
            self._text(QRectF(row.x(), row.y(), label_w - 0.3 * u, row.height()),
                       _elided(label, s.metrics[font], label_w - 0.3 * u), font, colour,
                       Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            track = QRectF(row.x() + label_w, row.y() + 0.12 * u, scale, row.height() - 0.24 * u)
            p.fillRect(track, s.colours["shade"])
            p.fillRect(QRectF(track.x(), track.y(), max(0.06 * u, bar.p * scale),
                              track.height()), s.colours[colour])
            value = f"{prob(bar.p)}  ◀ drawn" if bar.drawn else prob(bar.p)
            self._text(QRectF(track.right() + 0.3 * u, row.y(), value_w, row.height()), value,
                       font if bar.drawn else "small", colour, LEFT)

    def _bars(self) -> None:
        """The step's time, split as the event records it, above one plain step's."""
        a, u = self.a, self.u
        t = a.event.timing
        if a.server:
            parts = [(f"{a.server}'s clock: the whole step", t.total_ms, "pass")]
        else:
            parts = [("guess", t.draft_ms, a.pieces[0].kind if a.pieces else "grid"),
                     (f"one pass, {a.positions} positions", t.verify_ms, "pass"),
                     ("the rest", t.other_ms, "grid")]
        # One scale for every stage: plain decoding's time for the step's tokens fits too.
        scale = (self.width - 15 * u) / max(t.total_ms, a.plain_ms_for_tokens or 0.0, 1e-9)
        self._bar_row(BARS_TOP * u, f"this step: {st.ms(t.total_ms)}", parts, scale)
        if a.plain is None:
            return
        if self.stage.tally_shown:  # the same tokens, one plain step each
            n = a.tokens
            label = f"plain, {n} token{'s' if n != 1 else ''}: {st.ms(a.plain_ms_for_tokens)}"
            steps = [("1 token", a.plain.ms, "grid")] * n
        else:
            label, steps = f"plain step: {st.ms(a.plain.ms)}", [("1 token", a.plain.ms, "grid")]
        self._bar_row((BARS_TOP + 2.2) * u, label, steps, scale)
        self._text(QRectF(13.5 * u, (BARS_TOP + 4.1) * u, self.width - 15 * u, 1.0 * u),
                   f"plain step: {a.plain.where}", "small", "grid", LEFT)

    def _bar_row(self, y: float, label: str, parts: list[tuple[str, float, str]],
                 scale: float) -> None:
        u, p, s = self.u, self.p, self.s
        self._text(QRectF(1.5 * u, y, 11.8 * u, 1.8 * u), label, "label", "foreground", LEFT)
        x = 13.5 * u
        for words, value, colour in parts:
            width = value * scale
            if width <= 0:
                continue
            rect = QRectF(x, y + 0.2 * u, width, 1.4 * u)
            p.fillRect(rect, s.colours[colour])
            p.fillRect(QRectF(x, rect.y(), min(width / 8, 0.1 * u), rect.height()),
                       s.colours["background"])  # where one part ends and the next begins
            for text in (f"{words} {st.ms(value)}", st.ms(value)):  # the time alone if cramped
                if s.metrics["small"].horizontalAdvance(text) < width - 0.4 * u:
                    self._text(rect, text, "small", "background", CENTRE)
                    break
            x += width

    def _legend(self) -> None:
        """The colours a listener needs: each source shown, refused, the target's own."""
        u = self.u
        kinds = list(dict.fromkeys(piece.kind for piece in self.a.pieces))
        kinds += [KIND_REJECTED, KIND_TARGET]
        words_of = {KIND_REJECTED: "refused", KIND_TARGET: "the target's own"}
        if self.a.is_tree and any(self.a.look(self.stage, i).faded
                                  for i in self.stage.visible):
            # Once the captions move on, the faded branches still say why they faded.
            faded = f"{self.a.pieces[0].kind}-faded"
            kinds.append(faded)
            words_of[faded] = st.FADED_WORDS
        x = 1.5 * u
        metrics = self.s.metrics["small"]
        for kind in kinds:
            self.p.fillRect(QRectF(x, (LEGEND_TOP + 0.35) * u, 0.8 * u, 0.8 * u),
                            self.s.colours[kind])
            words = words_of.get(kind) or kind_words(kind)
            self._text(QRectF(x + 1.1 * u, LEGEND_TOP * u, 12 * u, 1.5 * u), words, "small",
                       "foreground", LEFT)
            x += 2.2 * u + metrics.horizontalAdvance(words)
        self._lookahead(x + u)

    def _lookahead(self, x: float) -> None:
        state = self.a.event.lookahead
        if state is None:
            return
        rows = " / ".join(" ".join(row) for row in state.window[:3])
        width = self.width - x - 1.5 * self.u
        text = (f"lookahead: n-gram pool {state.pool_size} ({state.new_ngrams} new this step) · "
                f"Jacobi window after it: {rows}")
        self._text(QRectF(x, LEGEND_TOP * self.u, width, 1.5 * self.u),
                   _elided(text, self.s.metrics["small"], width), "small", "grid", LEFT)


def _colour(piece: st.Piece, look: st.Look) -> str:
    kind = KIND_REJECTED if look.struck else piece.kind
    return f"{kind}-faded" if look.faded else kind


def _elided(text: str, metrics: QFontMetricsF, width: float) -> str:
    return metrics.elidedText(text, Qt.TextElideMode.ElideRight, max(1.0, width))


def _card_lines(piece: st.Piece) -> str:
    lines = [piece.source]
    if piece.p_draft is not None:
        lines.append(f"p_draft {prob(piece.p_draft)}")
    if piece.detail:
        lines.append(piece.detail)
    return "\n".join(lines)


def _verdict_lines(piece: st.Piece) -> str:
    """Under a judged guess: the numbers its verdict rests on (the caption says them in
    words)."""
    if piece.verdict == st.DROPPED:
        return ""
    lines = [f"target: {piece.wanted!r}"] if piece.wanted is not None else []
    if piece.p_target is not None:
        lines.append(f"p_target {prob(piece.p_target)}")
    if piece.draw is not None:
        lines += [f"chance {prob(piece.accept_prob)}", f"draw {prob(piece.draw)}"]
    return "\n".join(lines)
