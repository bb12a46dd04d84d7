"""One batched step, a row per stream: every stream's guesses in the one pass (kept in its
oracle's colour, refused struck through, as the token view draws them) and the target's own
token after them. Drawn from board.batch_anatomy's rows as rich text: a row is a line."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget

from ..board.batch_anatomy import BatchRows, Piece
from ..board.describe import streams_words
from ..board.kinds import KIND_REJECTED
from ..board.palette import DARK, Theme

EMPTY = "a race of more than one stream shows its latest batched step here"


def piece_html(piece: Piece, theme: Theme) -> str:
    text = html.escape(piece.text.replace("\n", "⏎")) or "·"
    style = f"color:{theme.kind_colour(piece.kind)}"
    if piece.kind == KIND_REJECTED:
        style += ";text-decoration:line-through"
    return f'<span style="{style}">{text}</span>'


def rows_html(rows: BatchRows, theme: Theme, oracle: str) -> str:
    n = len(rows.rows)
    head = (f"<b>{html.escape(oracle)} · batch step {rows.index + 1}</b>: "
            f"{streams_words(n)}, {rows.width} positions in one pass of "
            f"{rows.pass_ms:.1f} ms; "
            f"{rows.kept} guesses kept, {rows.tokens} tokens written")
    lines = [head]
    for row in rows.rows:
        guesses = "".join(piece_html(p, theme) for p in row.guesses) or "<i>no guess</i>"
        left = f" · left: {html.escape(row.left)}" if row.left else ""
        lines.append(f"stream {row.stream + 1} │ {guesses} │ + {piece_html(row.target, theme)}"
                     f" · kept {row.kept} of {len(row.guesses)}{left}")
    return "<br>".join(lines)


class BatchAnatomy(QLabel):
    def __init__(self, theme: Theme = DARK, parent: QWidget | None = None) -> None:
        super().__init__(EMPTY, parent)
        self.theme = theme
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setWordWrap(True)
        self.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.rows: BatchRows | None = None
        self._oracle = ""

    def show_rows(self, rows: BatchRows | None, oracle: str = "") -> None:
        self.rows, self._oracle = rows, oracle
        self.setText(EMPTY if rows is None else rows_html(rows, self.theme, oracle))

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.show_rows(self.rows, self._oracle)
