"""StepInspector shows each token's verdict and why; KControl keeps its two halves in step."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

from specviz.board.palette import DARK, LIGHT
from specviz.engines.events import (
    REJECT_AFTER,
    REJECT_MISMATCH,
    REJECT_SAMPLED,
    TARGET_CORRECTION,
    ProposedToken,
    Span,
    StepEvent,
    TargetToken,
    Timing,
    Totals,
)
from specviz.widgets.inspector import COLUMNS, StepInspector
from specviz.widgets.k_control import KControl

pytestmark = pytest.mark.gui


def sampled_step() -> StepEvent:
    proposed = (
        ProposedToken(5, " the\n", "draft", True, p_draft=0.5, p_target=0.6, accept_prob=1.0,
                      draw=0.2),
        ProposedToken(6, " cat", "prompt", False, p_draft=0.75, p_target=0.3,
                      reject_reason=REJECT_SAMPLED, accept_prob=0.4, draw=0.91,
                      span=Span(2, 4, 7, 15), detail="2-gram match"),
        ProposedToken(7, "\tsat", "draft", False, reject_reason=REJECT_AFTER),
    )
    return StepEvent(
        step=7, oracle="draft", k=3, position=40, proposed=proposed,
        target=TargetToken(9, " dog", TARGET_CORRECTION, p_target=0.45, margin=0.125),
        text=" the\n dog", timing=Timing(1.5, 8.0, 0.25),
        totals=Totals(20, 8, 24, 12, 12.0, 64.0, 2.0),
    )


def greedy_step() -> StepEvent:
    proposed = (ProposedToken(3, "x", "ngram", False, p_target=0.01,
                              reject_reason=REJECT_MISMATCH),)
    return StepEvent(
        step=0, oracle="ngram", k=1, position=4, proposed=proposed,
        target=TargetToken(4, "y", TARGET_CORRECTION, p_target=0.99, margin=4.0),
        text="y", timing=Timing(0.0, 1.0, 0.0), totals=Totals(1, 1, 1, 0, 0.0, 1.0, 0.0),
    )


def cell(inspector: StepInspector, row: int, column: str) -> str:
    return inspector.table.item(row, COLUMNS.index(column)).text()


@pytest.fixture
def inspector(qtbot) -> StepInspector:
    widget = StepInspector(DARK)
    qtbot.addWidget(widget)
    return widget


def test_rejected_sampled_token_shows_acceptance_probability_and_draw(inspector):
    inspector.show_step(sampled_step())
    assert inspector.table.rowCount() == 4  # three proposals and the target's token
    assert cell(inspector, 1, "verdict") == "rejected (sampled)"
    why = cell(inspector, 1, "why")
    assert "draw 0.910" in why and "min(1, p/q) = 0.400" in why
    assert cell(inspector, 0, "verdict") == "accepted"
    assert "draw 0.200 ≤" in cell(inspector, 0, "why")
    assert "never judged" in cell(inspector, 2, "why")
    assert cell(inspector, 1, "p_draft") == "0.750"
    assert cell(inspector, 1, "p_target") == "0.300"
    assert cell(inspector, 2, "p_draft") == "—"
    assert "2-gram match" in cell(inspector, 1, "source")
    assert "tokens 2–4" in cell(inspector, 1, "source")


def test_positions_and_visible_whitespace(inspector):
    inspector.show_step(sampled_step())
    assert [cell(inspector, r, "position") for r in range(4)] == ["40", "41", "42", "41"]
    assert cell(inspector, 0, "token") == "␣the↵"
    assert cell(inspector, 2, "token") == "⇥sat"


def test_target_row_and_timings(inspector):
    inspector.show_step(sampled_step())
    assert cell(inspector, 3, "source") == "target"
    assert cell(inspector, 3, "verdict") == TARGET_CORRECTION
    assert cell(inspector, 3, "p_target") == "0.450"
    assert "logit margin 0.125" in cell(inspector, 3, "why")
    timings = inspector.timings.text()
    assert "draft 1.50 ms" in timings and "verify 8.00 ms" in timings
    assert "other 0.25 ms" in timings and "total 9.75 ms" in timings
    assert "step 7" in inspector.header.text() and "K=3" in inspector.header.text()


def test_greedy_mismatch_reason(inspector):
    inspector.show_step(greedy_step())
    assert cell(inspector, 0, "verdict") == "rejected (mismatch)"
    assert "greedy mismatch" in cell(inspector, 0, "why")


def test_token_cell_is_coloured_by_kind_and_theme(inspector):
    inspector.show_step(sampled_step())
    token = COLUMNS.index("token")
    assert inspector.table.item(0, token).foreground().color().name() == DARK.kind_colour("draft")
    rejected = inspector.table.item(1, token)
    assert rejected.foreground().color().name() == DARK.kind_colour("rejected")
    assert rejected.font().strikeOut()
    inspector.set_theme(LIGHT)
    assert inspector.table.item(0, token).foreground().color().name() == LIGHT.kind_colour("draft")


def test_clear(inspector):
    inspector.show_step(sampled_step())
    inspector.clear()
    assert inspector.table.rowCount() == 0 and inspector.event is None
    assert inspector.timings.text() == ""


def test_k_control_keeps_slider_and_spin_box_in_step(qtbot):
    control = KControl(4)
    qtbot.addWidget(control)
    seen: list[int] = []
    control.valueChanged.connect(seen.append)
    control.setValue(7)
    assert control.slider.value() == 7 and control.value() == 7
    control.slider.setValue(12)
    assert control.spin_box.value() == 12
    control.setValue(12)  # no change, no signal
    control.setValue(99)  # clamped
    assert control.value() == 32 and control.slider.value() == 32
    control.setValue(0)
    assert control.value() == 1
    assert seen == [7, 12, 32, 1]


def test_k_control_auto_rests_the_slider(qtbot):
    control = KControl(4)
    qtbot.addWidget(control)
    seen: list[bool] = []
    control.autoChanged.connect(seen.append)
    control.set_auto(True)
    assert control.is_auto() and not control.slider.isEnabled() and not control.spin_box.isEnabled()
    control.auto.setChecked(False)
    assert control.slider.isEnabled() and seen == [True, False]


def test_a_declined_step_says_why_nothing_was_proposed(inspector):
    from step_factory import make_step

    from specviz.engines.events import DECLINE_NO_MATCH

    inspector.show_step(make_step(3).marked_declined(DECLINE_NO_MATCH))
    assert "nothing proposed: no match" in inspector.header.text()


def test_lane_figures_show_the_decline_rate_and_its_reasons():
    from specviz.app.views.lane_widget import declined_tip, figures_text

    figures = {"tokens": 10, "decline_rate": 0.25, "declined": {"no-match": 2, "auto-k": 1}}
    assert "declined 25%" in figures_text(figures)
    assert "declined" not in figures_text({"tokens": 10, "decline_rate": 0.0})  # plain lane
    tip = declined_tip(figures)
    assert tip.index("2 steps: no match") < tip.index("1 step: auto K chose 0")
