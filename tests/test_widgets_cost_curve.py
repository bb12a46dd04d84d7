"""The cost curve: theoretical speedup by K for a lane's acceptance, priced by a profile."""

from __future__ import annotations

import pytest

from specviz.engines.cost import expected_tokens_iid
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
