"""The cost curve: theoretical speedup by K for a lane's acceptance, priced by a profile."""

from __future__ import annotations

import pytest

from specviz.engines.cost.step_cost import expected_tokens_iid
from specviz.widgets.cost_curve import CostCurve, theory_curve

pytestmark = pytest.mark.gui

# Cost of n tokens over one token, n = 1..16, a 2-core CPU: 4 ~3.3x, 8 ~5x, 16 ~6x.
CPU = [1, 1.7, 2.5, 3.3, 3.7, 4.2, 4.6, 5.0, 5.1, 5.2, 5.3, 5.5, 5.6, 5.7, 5.9, 6.0]


def test_theory_curve_free_batches_vs_cpu():
    free, cpu = theory_curve(0.8, None, 8), theory_curve(0.8, CPU, 8)
    assert free[0] == cpu[0] == pytest.approx(1.0)
    assert free[4] == pytest.approx(expected_tokens_iid(0.8, 4))
    assert cpu[3] == pytest.approx(expected_tokens_iid(0.8, 3) / 3.3)
    # A drafter right 60% of the time wins with free batches, loses at every K here.
    assert max(theory_curve(0.6, CPU, 15)[1:]) < 1.0 < max(theory_curve(0.6, None, 15))


def test_widget_draws_a_curve_and_the_lane_operating_point(qtbot):
    widget = CostCurve()
    qtbot.addWidget(widget)
    widget.set_costs(CPU)
    widget.set_lane("a", "prompt-lookup", "#e69f00", 0.95, 5.0, 1.3)
    xs, ys = widget.curve_data("a")
    assert list(xs[:3]) == [0, 1, 2] and ys[0] == pytest.approx(1.0)
    assert ys[15] == pytest.approx(expected_tokens_iid(0.95, 15) / 6.0)
    dx, dy = widget.dot_data("a")
    assert (dx[0], dy[0]) == (5.0, 1.3)
    widget.set_costs(None)  # free batches: the curve rises
    assert widget.curve_data("a")[1][15] == pytest.approx(expected_tokens_iid(0.95, 15))
    widget.remove_lane("a")
    assert "a" not in widget._items


def test_lane_colour_reaches_curve_and_dot(qtbot):
    widget = CostCurve()
    qtbot.addWidget(widget)
    for colour in ("#e69f00", "#56b4e9"):  # a theme change recolours the lanes
        widget.set_lane("a", "draft", colour, 0.8, 4.0, 1.1)
        curve, dot = widget._items["a"]
        assert curve.opts["pen"].color().name() == colour
        brushes = {b.color().name() for b in dot.data["brush"] if b is not None}
        assert dot.opts["brush"].color().name() == colour and brushes <= {colour}


def test_the_what_if_curve_follows_its_acceptance_and_draft_cost(qtbot):
    widget = CostCurve()
    qtbot.addWidget(widget)
    widget.set_costs(CPU)
    widget.alpha_box.setValue(0.95)
    ys = widget.what_if_data()[1]
    assert ys[4] == pytest.approx(expected_tokens_iid(0.95, 4) / 3.7)
    assert "best K=" in widget.verdict.text()
    widget.draft_box.setValue(0.5)  # half a target token per drafted token
    assert widget.what_if_data()[1][4] == pytest.approx(expected_tokens_iid(0.95, 4) / (3.7 + 2))
    assert widget.verdict.text().startswith("plain decoding is faster")
    widget.set_lane("a", "ngram", "#e69f00", 0.6, 3.0, 0.8)
    index = widget.from_lane.findData("a")
    assert "ngram: 60%" in widget.from_lane.itemText(index)
    widget.from_lane.activated.emit(index)  # a lane's live acceptance as the starting point
    assert widget.alpha_box.value() == pytest.approx(0.6)
    widget.remove_lane("a")
    assert widget.from_lane.findData("a") < 0


def test_break_even_acceptance_matches_the_curve():
    from specviz.widgets.cost_curve import break_even_alpha

    alpha = break_even_alpha(3, CPU, 0.0)
    assert theory_curve(alpha, CPU, 3)[3] == pytest.approx(1.0, abs=1e-6)
    assert break_even_alpha(3, [1, 2, 3, 4], 0.0) is None  # 4 tokens cost 4: never pays
    assert break_even_alpha(3, None, 0.0) == pytest.approx(0.0, abs=1e-6)  # free batches


def test_without_a_profile_nothing_is_promised_and_one_click_asks_for_one(qtbot):
    widget = CostCurve()
    qtbot.addWidget(widget)
    widget.show()
    widget.set_lane("a", "draft", "#e69f00", 0.8, 4.0, 1.1)
    widget.set_costs(None, profiled=False)
    assert len(widget.curve_data("a")[0] or []) == 0 and len(widget.what_if_data()[0] or []) == 0
    assert widget.profile_button.isVisible()
    assert "no profile" in widget.plot.getPlotItem().titleLabel.text
    with qtbot.waitSignal(widget.profileRequested, timeout=1000):
        widget.profile_button.click()
    widget.set_costs(CPU)
    assert not widget.profile_button.isVisible() and len(widget.curve_data("a")[0]) == 33


def test_k_axis_stays_whole_without_a_profile(qtbot):
    """Without a profile only the dots are drawn; K's axis must not shrink to 0..1 around
    them, and a lane run beyond the axis widens it."""
    widget = CostCurve()
    qtbot.addWidget(widget)
    widget.set_costs(None, profiled=False)
    widget.set_lane("a", "prompt-lookup", "#e69f00", 0.2, 0.4, 0.7)
    widget.plot.getPlotItem().getViewBox().prepareForPaint()
    low, high = widget.plot.getPlotItem().getViewBox().viewRange()[0]
    assert low <= 0 and high >= 16
    widget.set_lane("b", "ngram", "#009e73", 0.9, 24.0, 1.1)
    assert widget.plot.getPlotItem().getViewBox().viewRange()[0][1] >= 25


# llama.cpp's kernels take rows in blocks: here 8 tokens cost less than 7 (the 0.5B's shape
# on one machine), and 5 cost much more than 4.
STAIRS = [1, 1.3, 1.9, 2.4, 3.3, 3.5, 4.26, 3.66, 4.5, 4.8, 5.1, 5.4, 5.5, 5.6, 5.7, 5.8]


def _tip(widget) -> str:
    return " ".join(widget.plot.toolTip().split())


def test_the_tooltip_says_what_verification_costs_here(qtbot):
    from specviz.widgets.cost_curve import TOOLTIP

    widget = CostCurve()
    qtbot.addWidget(widget)
    widget.set_costs(STAIRS)
    assert widget.plot.toolTip().startswith(TOOLTIP)
    tip = _tip(widget)
    assert "2, 4 and 8 tokens (K = 1, 3, 7) costs 1.30x, 2.40x and 3.66x one token" in tip
    assert "the dearest step is K = 3 to 4 (+0.90x)" in tip
    assert "K = 7 costs less than K = 6 (3.66x against 4.26x)" in tip
    widget.set_costs(CPU)  # rising all the way: no dip to tell
    tip = _tip(widget)
    assert "1.70x, 3.30x and 5.00x" in tip and "costs less" not in tip
    assert "the dearest step is K = 1 to 2 (+0.80x)." in tip
    widget.set_costs(None)  # free batches: nothing measured to tell
    assert widget.plot.toolTip() == TOOLTIP
    widget.set_costs(None, profiled=False)
    assert widget.plot.toolTip() == TOOLTIP


def test_the_batch_note_takes_the_deepest_dip_in_view():
    from specviz.widgets.cost_curve import batch_note

    def note(costs):
        return " ".join(batch_note(costs).split())

    # 16 tokens a little under 12, 8 well under 7: the deeper dip is told.
    costs = [1, 1.45, 1.93, 2.33, 2.95, 3.34, 3.96, 3.8, 4.2, 4.5, 4.7, 4.94, 4.93, 4.92, 4.91, 4.9]
    assert "K = 7 costs less than K = 6 (3.80x against 3.96x)" in note(costs)
    assert "K = 15 costs less than K = 11 (4.90x against 4.94x)" in note(
        [*costs[:7], 4.23, *costs[8:]])
    assert "K = 17" not in note([*costs, 4.95, 4.0])  # beyond the K first shown (16)
    assert note([1, 1.5]).startswith("Here verifying 2 tokens (K = 1) costs 1.50x one token")
    assert batch_note([1]) == "" and batch_note(None) == ""
    assert all(len(line) <= 85 for line in batch_note(costs).splitlines())
