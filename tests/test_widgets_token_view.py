"""TokenView and Legend: formats per token kind, rejected toggle, shading, hover, speed."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QHelpEvent, QMouseEvent, QTextCursor
from PySide6.QtWidgets import QApplication, QToolTip

from specviz.board.kinds import KINDS
from specviz.board.palette import DARK, HIGH_CONTRAST, LIGHT, THEMES, high_contrast
from specviz.engines.events import (
    REJECT_AFTER,
    REJECT_MISMATCH,
    TARGET_BONUS,
    TARGET_CORRECTION,
    ProposedToken,
    Span,
    StepEvent,
    TargetToken,
    Timing,
    Totals,
)
from specviz.widgets.token_view import Legend, TokenView

pytestmark = pytest.mark.gui

SPAN = Span(tok_start=3, tok_end=5, chr_start=10, chr_end=18)


def tok(text: str, source: str = "draft", accepted: bool = True, **kw) -> ProposedToken:
    reason = None if accepted else kw.pop("reject_reason", REJECT_MISMATCH)
    return ProposedToken(id=len(text), text=text, source=source, accepted=accepted,
                         reject_reason=reason, **kw)


def step(index: int, proposed: tuple[ProposedToken, ...], target: str = " sat",
         kind: str = TARGET_CORRECTION) -> StepEvent:
    accepted = [t for t in proposed if t.accepted]
    n = len(accepted) + 1
    return StepEvent(
        step=index, oracle="test", k=len(proposed), position=10 + index, proposed=proposed,
        target=TargetToken(id=1, text=target, kind=kind, p_target=0.8, margin=1.5),
        text="".join(t.text for t in accepted) + target,
        timing=Timing(1.0, 2.0, 0.5),
        totals=Totals(n * (index + 1), index + 1, len(proposed), len(accepted), 1.0, 2.0, 0.5),
    )


def first_step() -> StepEvent:
    return step(0, (
        tok(" The", "draft", p_draft=0.9, p_target=0.7),
        tok(" cat", "prompt", span=SPAN, detail="3-gram match"),
        tok(" dog", "prompt", accepted=False, p_target=0.1),
        tok(" ran", "prompt", accepted=False, reject_reason=REJECT_AFTER),
    ))


def plain_text(view: TokenView) -> str:
    view.flush()
    return view.editor.document().toPlainText()


def fmt_at(view: TokenView, position: int):
    cursor = QTextCursor(view.editor.document())
    cursor.setPosition(position + 1)  # charFormat() describes the character left of it
    return cursor.charFormat()


def colour_at(view: TokenView, text: str) -> str:
    return fmt_at(view, plain_text(view).index(text) + 1).foreground().color().name()


@pytest.fixture
def view(qtbot) -> TokenView:
    widget = TokenView(DARK)
    qtbot.addWidget(widget)
    widget.resize(600, 400)
    return widget


def test_each_kind_has_its_format(view):
    view.append_step(first_step())
    view.append_step(step(1, (tok(" on", "ngram"), tok(" a", "rule")), " mat", TARGET_BONUS))
    assert plain_text(view) == " The cat dog ran sat on a mat"
    assert colour_at(view, " The") == DARK.kind_colour("draft")
    assert colour_at(view, " cat") == DARK.kind_colour("prompt")
    assert colour_at(view, " on") == DARK.kind_colour("ngram")
    assert colour_at(view, " a ") == DARK.kind_colour("other")
    assert colour_at(view, " sat") == DARK.kind_colour("target")
    assert colour_at(view, " mat") == DARK.kind_colour("target")
    for rejected in (" dog", " ran"):
        fmt = fmt_at(view, plain_text(view).index(rejected) + 1)
        assert fmt.fontStrikeOut()
        assert fmt.foreground().color().name() == DARK.kind_colour("rejected")
    assert not fmt_at(view, 1).fontStrikeOut()
    assert view.token_count == 3 + 3
    assert view.events[1].step == 1


def test_rejected_tokens_hide_and_come_back(view):
    view.append_step(first_step())
    view.set_show_rejected(False)
    assert plain_text(view) == " The cat sat"
    view.append_step(step(1, (tok(" on"), tok(" up", accepted=False))))
    assert plain_text(view) == " The cat sat on sat"
    assert colour_at(view, " cat") == DARK.kind_colour("prompt")  # formats survive the rebuild
    view.set_show_rejected(True)
    assert plain_text(view) == " The cat dog ran sat on up sat"
    assert fmt_at(view, plain_text(view).index(" up") + 1).fontStrikeOut()


def test_a_rejected_newline_is_a_mark_not_a_line_break(view):
    view.append_step(step(0, (tok("x"), tok("\n", accepted=False)), target="\n"))
    assert plain_text(view) == "x↵\n"
    assert view.editor.document().blockCount() == 2  # only the target's newline breaks


def test_step_shading_alternates(view):
    for i in range(4):
        view.append_step(step(i, (tok(f" w{i}"),), target=f" t{i}"))
    text = plain_text(view)
    shades = [fmt_at(view, text.index(f" t{i}")).background() for i in range(4)]
    assert [b.style() == Qt.BrushStyle.NoBrush for b in shades] == [True, False, True, False]
    assert shades[1].color().name() == shades[3].color().name() == DARK.shade
    # Within a step every token shares the shade.
    assert fmt_at(view, text.index(" w1")).background().color().name() == DARK.shade


def test_positions_map_back_to_step_and_token(view):
    view.append_step(first_step())
    view.append_step(step(1, (tok(" on"),)))
    text = plain_text(view)
    assert view.token_at_position(text.index(" cat") + 2) == (0, 1)
    assert view.token_at_position(text.index(" ran")) == (0, 3)
    assert view.token_at_position(text.index(" sat")) == (0, 4)  # the target: len(proposed)
    assert view.token_at_position(text.index(" on")) == (1, 0)
    assert view.token_at_position(len(text) + 5) is None


def _point_inside(view: TokenView, position: int) -> QPoint:
    """A viewport point over the character at `position`."""
    cursor = QTextCursor(view.editor.document())
    cursor.setPosition(position)
    left = view.editor.cursorRect(cursor)
    cursor.setPosition(position + 1)
    right = view.editor.cursorRect(cursor)
    return QPoint((left.x() + right.x()) // 2, left.center().y())


def _send(view: TokenView, kind: QEvent.Type, point: QPoint,
          button: Qt.MouseButton = Qt.MouseButton.NoButton) -> None:
    viewport = view.editor.viewport()
    event = QMouseEvent(kind, QPointF(point), QPointF(viewport.mapToGlobal(point)), button,
                        button, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(viewport, event)


def test_hovering_a_copied_token_emits_its_span(view, qtbot):
    view.show()
    view.append_step(first_step())
    text = plain_text(view)
    with qtbot.waitSignal(view.tokenHovered, timeout=1000) as hovered:
        _send(view, QEvent.Type.MouseMove, _point_inside(view, text.index(" cat") + 2))
    assert hovered.args == [0, 1, SPAN]
    with qtbot.waitSignal(view.tokenHovered, timeout=1000) as hovered:
        _send(view, QEvent.Type.MouseMove, _point_inside(view, text.index(" The") + 2))
    assert hovered.args == [0, 0, None]
    with qtbot.waitSignal(view.tokenHovered, timeout=1000) as hovered:
        _send(view, QEvent.Type.MouseMove, QPoint(300, 350))  # below the text
    assert hovered.args == [-1, -1, None]


def test_clicking_a_token_emits_its_step(view, qtbot):
    view.show()
    view.append_step(first_step())
    view.append_step(step(1, (tok(" on"),), target=" top"))
    point = _point_inside(view, plain_text(view).index(" top") + 2)
    with qtbot.waitSignal(view.tokenClicked, timeout=1000) as clicked:
        _send(view, QEvent.Type.MouseButtonPress, point, Qt.MouseButton.LeftButton)
    assert clicked.args == [1]


def test_help_event_shows_the_token_tooltip(view):
    view.show()
    view.append_step(first_step())
    point = _point_inside(view, plain_text(view).index(" cat") + 2)
    viewport = view.editor.viewport()
    QApplication.sendEvent(viewport, QHelpEvent(QEvent.Type.ToolTip, point,
                                                viewport.mapToGlobal(point)))
    assert QToolTip.text() == view.tooltip(0, 1)
    QToolTip.hideText()


def test_tooltips_name_kind_probabilities_span_and_detail(view):
    view.append_step(first_step())
    copied = view.tooltip(0, 1)
    assert "prompt proposal 2/4" in copied and "accepted" in copied
    assert "tokens 3–5" in copied and "prompt characters 10–18" in copied
    assert "3-gram match" in copied
    assert "p_draft 0.900 · p_target 0.700" in view.tooltip(0, 0)
    assert "greedy mismatch" in view.tooltip(0, 2)
    target = view.tooltip(0, 4)
    assert "correction" in target and "margin 1.500" in target


def test_theme_and_font_size(view):
    view.append_step(first_step())
    view.set_theme(LIGHT)
    assert colour_at(view, " The") == LIGHT.kind_colour("draft")
    assert colour_at(view, " dog") == LIGHT.kind_colour("rejected")
    view.set_font_size(15)
    assert view.editor.document().defaultFont().pointSizeF() == 15


def test_clear_forgets_everything(view):
    view.append_step(first_step())
    view.clear()
    assert plain_text(view) == "" and view.events == [] and view.token_count == 0
    view.append_step(step(0, (tok(" new"),)))
    assert plain_text(view) == " new sat"


def test_ten_thousand_tokens_append_at_a_steady_pace(view):
    """2,500 steps of 4 emitted tokens (+1 rejected), laid out after every step. Counted, not
    timed: each flush hands the layout one document change, at the end, and laying it out
    costs the paragraphs it touches; those characters stay the same per step as the text
    grows (a rebuild per step, or text that never breaks its paragraph, grows them with it).
    The time it takes is benchmarks/token_view_append.py's."""
    view.show()
    events = [
        step(i, (tok(f" a{i}"), tok(" b", "prompt"), tok(" c", "ngram"),
                 tok(" d", accepted=False)), target="\n" if i % 8 == 7 else " t")
        for i in range(2500)
    ]
    document = view.editor.document()
    changes = []  # per flush: (position, removed, added)
    document.contentsChange.connect(lambda at, removed, added: changes.append(
        (at, removed, added)))
    relaid = []  # per flush: the characters of the paragraphs the change touched
    for event in events:
        before = len(changes)
        end = document.characterCount() - 1
        view.append_step(event)
        view.flush()  # the live worst case: a layout per step
        assert len(changes) == before + 1, "one document change per flush"
        at, removed, added = changes[-1]
        assert removed == 0 and at >= end - 1, (at, removed, end)  # appended, nothing redone
        relaid.append(touched_characters(document, at, added))
    assert view.token_count == 10_000
    first, last = sum(relaid[:500]), sum(relaid[-500:])
    assert last < 1.5 * first, (first, last)
    assert view.token_at_position(len(plain_text(view)) - 2) == (2499, 4)


def touched_characters(document, at: int, added: int) -> int:
    """The length of the paragraphs from the one holding `at` to the one holding its end."""
    block, last = document.findBlock(at), document.findBlock(at + added)
    total = block.length()
    while block != last and block.isValid():
        block = block.next()
        total += block.length()
    return total


def test_legend_shows_every_kind_in_theme_colours(qtbot):
    legend = Legend(DARK)
    qtbot.addWidget(legend)
    assert set(KINDS) == {k for k in KINDS if legend.label(k).text()}
    assert DARK.kind_colour("prompt") in legend.label("prompt").text()
    assert "<s>" in legend.label("rejected").text()
    legend.set_theme(LIGHT)
    assert LIGHT.kind_colour("prompt") in legend.label("prompt").text()
    legend.set_kinds(("prompt", "target", "rejected"))
    assert legend.kinds == ("prompt", "target", "rejected")
    with pytest.raises(KeyError):
        legend.label("draft")


def _luminance(colour: str) -> float:
    channels = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(a: str, b: str) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("name", sorted(THEMES))
def test_token_colours_are_readable_on_both_step_shades(name):
    theme = THEMES[name]
    for kind in KINDS:
        needed = 3.0 if kind == "rejected" else 4.5  # rejected is faded on purpose
        for background in (theme.background, theme.shade):
            assert _contrast(theme.kind_colour(kind), background) >= needed, (kind, background)
    assert len(set(theme.lanes)) == 4


@pytest.mark.parametrize("name", sorted(HIGH_CONTRAST))
def test_high_contrast_themes_reach_seven_to_one(name):
    theme = HIGH_CONTRAST[name]
    assert high_contrast(THEMES[name]) is theme and high_contrast(theme) is theme
    for kind in KINDS:
        needed = 5.0 if kind == "rejected" else 7.0  # WCAG AAA for text
        for background in (theme.background, theme.shade):
            assert _contrast(theme.kind_colour(kind), background) >= needed, (kind, background)
    assert _contrast(theme.foreground, theme.background) >= 15
    assert all(_contrast(c, theme.background) >= 7.0 for c in theme.lanes)
