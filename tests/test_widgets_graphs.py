"""LaneGraphs: the numbers behind each curve, lazy refresh, baseline, K markers, figures."""

from __future__ import annotations

import os
from dataclasses import replace

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pyqtgraph as pg
import pytest
from engine_waits import HUNG_MS
from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QPainter, QPicture

from specviz.board.lanes_model import BoardModel
from specviz.board.palette import DARK, LIGHT
from specviz.engines.events import (
    REJECT_MISMATCH,
    TARGET_BONUS,
    TARGET_CORRECTION,
    TARGET_PLAIN,
    ProposedToken,
    StepEvent,
    TargetToken,
    Timing,
    Totals,
)
from specviz.engines.host.run_spec import LaneSpec
from specviz.widgets.graphs import WINDOW, LaneGraphs

pytestmark = pytest.mark.gui


def run(shape: list[tuple[int, int]], ms: list[float] | float = 100.0) -> list[StepEvent]:
    """Events of a run at K = 4 (the most `random_shape` proposes): per step (proposed,
    accepted), each step taking `ms` of verify time. K stays put, as a run's K does until
    the person changes it: a K marker on every step drew thousands of lines."""
    durations = ms if isinstance(ms, list) else [ms] * len(shape)
    events, tokens, proposed, accepted, verify = [], 0, 0, 0, 0.0
    for i, ((n_prop, n_acc), step_ms) in enumerate(zip(shape, durations, strict=True)):
        tokens, proposed, accepted = tokens + n_acc + 1, proposed + n_prop, accepted + n_acc
        verify += step_ms
        tokens_ = tuple(
            ProposedToken(id=j, text=f" p{j}", source="draft", accepted=j < n_acc,
                          reject_reason=None if j < n_acc else REJECT_MISMATCH)
            for j in range(n_prop)
        )
        kind = (TARGET_PLAIN if not n_prop
                else TARGET_BONUS if n_acc == n_prop else TARGET_CORRECTION)
        events.append(StepEvent(
            step=i, oracle="test", k=4, position=20 + tokens, proposed=tokens_,
            target=TargetToken(id=0, text=" t", kind=kind, p_target=0.9, margin=1.0),
            text="", timing=Timing(0.0, step_ms, 0.0),
            totals=Totals(tokens, i + 1, proposed, accepted, 0.0, verify, 0.0),
        ))
    return events


@pytest.fixture
def graphs(qtbot) -> LaneGraphs:
    widget = LaneGraphs(BoardModel(), DARK)
    qtbot.addWidget(widget)
    return widget


def add_lane(graphs: LaneGraphs, lane_id: str, label: str, colour: str) -> None:
    """A lane in the model the graphs draw; one labelled plain (or none) decodes plainly and
    so is the baseline, when it is the first such lane."""
    graphs.model.add(LaneSpec("none" if label in ("plain", "none") else "draft"), lane_id)
    graphs.show_lane(lane_id, label, colour)


def feed(graphs: LaneGraphs, lane: str, events: list[StepEvent]) -> None:
    graphs.model.append(lane, events)


def data(graphs: LaneGraphs, lane: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = graphs.lane_items(lane)[name].getData()
    return (np.asarray([]), np.asarray([])) if x is None else (x, y)


def random_shape(n: int, seed: int = 1) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    shape = []
    for _ in range(n):
        n_prop = int(rng.integers(0, 5))  # 0: the oracle had no guess this step
        shape.append((n_prop, int(rng.integers(0, n_prop + 1))))
    return shape


def test_acceptance_rate_rolling_and_overall(graphs):
    shape = random_shape(50)
    add_lane(graphs, "a", "lane a", DARK.lanes[0])
    feed(graphs, "a", run(shape))
    graphs.refresh()
    expected_rolling, expected_overall = [], []
    for i in range(len(shape)):
        window = shape[max(0, i - WINDOW + 1): i + 1]
        prop, acc = sum(p for p, _ in window), sum(a for _, a in window)
        expected_rolling.append(acc / prop if prop else np.nan)
        prop, acc = sum(p for p, _ in shape[: i + 1]), sum(a for _, a in shape[: i + 1])
        expected_overall.append(acc / prop if prop else np.nan)
    x, rolling = data(graphs, "a", "rolling")
    np.testing.assert_array_equal(x, np.arange(50))
    np.testing.assert_allclose(rolling, expected_rolling, equal_nan=True)
    _, overall = data(graphs, "a", "overall")
    np.testing.assert_allclose(overall, expected_overall, equal_nan=True)
    assert graphs.model.figures("a")["acceptance_rate"] == pytest.approx(expected_overall[-1])


def test_histogram_counts_steps_by_accepted_tokens(graphs):
    add_lane(graphs, "base", "plain", DARK.lanes[0])
    add_lane(graphs, "a", "lane a", DARK.lanes[1])
    add_lane(graphs, "b", "lane b", DARK.lanes[2])
    feed(graphs, "base", run([(0, 0)] * 5))
    feed(graphs, "a", run([(4, 0), (4, 2), (4, 2), (0, 0), (4, 4), (3, 2)]))
    feed(graphs, "b", run([(2, 1)]))
    graphs.refresh()
    bars = {lane: graphs.lane_items(lane)["bars"].opts for lane in ("base", "a", "b")}
    # Steps without a proposal are left out: plain decoding has no bars at all.
    assert len(bars["base"]["height"]) == 0
    np.testing.assert_array_equal(bars["a"]["height"], [1, 0, 3, 0, 1])
    np.testing.assert_array_equal(bars["b"]["height"], [0, 1])
    # Lanes with bars sit side by side inside each bin.
    width = bars["a"]["width"]
    assert width == pytest.approx(0.4)
    np.testing.assert_allclose(bars["a"]["x"], np.arange(5) - 0.2)
    np.testing.assert_allclose(bars["b"]["x"], np.arange(2) + 0.2)
    graphs.model.remove("b")  # the remaining lane's bars take the whole bin again
    graphs.refresh()
    assert graphs.lane_items("a")["bars"].opts["width"] == pytest.approx(0.8)


def test_acceptance_by_draft_position(graphs):
    add_lane(graphs, "a", "lane a", DARK.lanes[0])
    feed(graphs, "a", run([(4, 0), (4, 2), (4, 4), (2, 1), (0, 0)]))
    graphs.refresh()
    x, y = data(graphs, "a", "position")
    np.testing.assert_array_equal(x, [1, 2, 3, 4])
    # Position 1: 3 of 4 steps kept it; 2: 2 of 4; 3: 1 of 3; 4: 1 of 3.
    np.testing.assert_allclose(y, [3 / 4, 2 / 4, 1 / 3, 1 / 3])


def test_draft_positions_past_the_first_eight(graphs):
    add_lane(graphs, "a", "lane a", DARK.lanes[0])
    feed(graphs, "a", run([(12, 3), (10, 2)]))  # K above the initial buffer of 8
    graphs.refresh()
    x, y = data(graphs, "a", "position")
    np.testing.assert_array_equal(x, range(1, 13))
    np.testing.assert_allclose(y, [1, 1, 0.5] + [0] * 9)


def test_race_is_tokens_over_own_compute_time(graphs):
    add_lane(graphs, "a", "lane a", DARK.lanes[0])
    feed(graphs, "a", run([(2, 2), (2, 0), (2, 1)], ms=[100.0, 50.0, 250.0]))
    graphs.refresh()
    x, y = data(graphs, "a", "race")
    np.testing.assert_allclose(x, [0.0, 0.1, 0.15, 0.4])
    np.testing.assert_allclose(y, [0, 3, 4, 6])


def test_speedup_against_the_baseline_lane(graphs):
    add_lane(graphs, "plain", "plain", DARK.lanes[0])
    add_lane(graphs, "spec", "spec", DARK.lanes[1])
    # Baseline: 1, 2, 3 tokens at 0.2, 0.3, 0.4 s -> 5, 6.67, 7.5 tok/s.
    feed(graphs, "plain", run([(0, 0)] * 3, ms=[200.0, 100.0, 100.0]))
    # Lane: 3 tokens at 0.25 s (12 tok/s), 8 at 0.5 s (16 tok/s, past the baseline's end).
    feed(graphs, "spec", run([(2, 2), (4, 4)], ms=[250.0, 250.0]))
    graphs.refresh()
    x, y = data(graphs, "spec", "speedup")
    np.testing.assert_allclose(x, [0.25, 0.5])
    base_at_025 = (5.0 + 20 / 3) / 2  # halfway between the baseline's first two rates
    np.testing.assert_allclose(y, [12 / base_at_025, 16 / 7.5])
    assert len(data(graphs, "plain", "speedup")[0]) == 0  # the baseline is the unit line
    assert graphs.model.figures("spec")["speedup"] == pytest.approx(16 / 7.5)
    assert graphs.model.figures("plain")["speedup"] == pytest.approx(1.0)
    # The baseline is dashed in the race, the others solid.
    dash = pg.QtCore.Qt.PenStyle.DashLine
    assert graphs.lane_items("plain")["race"].opts["pen"].style() == dash
    assert graphs.lane_items("spec")["race"].opts["pen"].style() != dash
    graphs.model.reconfigure("plain", LaneSpec("draft"))  # no plain lane left
    graphs.refresh()
    assert len(data(graphs, "spec", "speedup")[0]) == 0
    assert graphs.model.figures("spec")["speedup"] is None


def test_new_baseline_data_redraws_every_speedup(graphs):
    add_lane(graphs, "plain", "plain", DARK.lanes[0])
    add_lane(graphs, "spec", "spec", DARK.lanes[1])
    feed(graphs, "spec", run([(2, 2)] * 2))  # 3 tokens per 0.1 s
    graphs.refresh()
    assert len(data(graphs, "spec", "speedup")[0]) == 0  # no baseline data yet
    feed(graphs, "plain", run([(0, 0)] * 2))  # 1 token per 0.1 s
    graphs.refresh()
    np.testing.assert_allclose(data(graphs, "spec", "speedup")[1], [3.0, 3.0])


def test_refresh_redraws_only_dirty_lanes_and_append_draws_nothing(graphs):
    add_lane(graphs, "a", "a", DARK.lanes[0])
    add_lane(graphs, "b", "b", DARK.lanes[1])
    feed(graphs, "a", run([(2, 1)] * 3))
    feed(graphs, "b", run([(2, 1)] * 3))
    graphs.refresh()
    calls: list[str] = []
    for lane in ("a", "b"):
        curve = graphs.lane_items(lane)["race"]
        original = curve.setData
        curve.setData = lambda *a, _lane=lane, _orig=original, **k: (calls.append(_lane),
                                                                     _orig(*a, **k))
    feed(graphs, "a", run([(2, 1)] * 4)[-1:])
    assert calls == []  # appending never draws
    graphs.refresh()
    assert calls == ["a"]
    graphs.refresh()
    assert calls == ["a"]  # nothing new, nothing drawn


def test_buffers_grow_past_their_first_capacity(graphs):
    add_lane(graphs, "a", "a", DARK.lanes[0])
    shape = random_shape(1000, seed=3)
    feed(graphs, "a", run(shape, ms=1.0))
    graphs.refresh()
    x, y = data(graphs, "a", "race")
    assert len(x) == 1001
    np.testing.assert_allclose(x[-1], 1.0)
    assert y[-1] == sum(a + 1 for _, a in shape) == graphs.model.figures("a")["tokens"]


def _k_markers(plot: pg.PlotWidget) -> list[tuple[float, str]]:
    return [(line.value(), line.label.format) for line in plot.getPlotItem().items
            if isinstance(line, pg.InfiniteLine) and line.angle == 90]


def test_k_change_markers(graphs):
    add_lane(graphs, "a", "a", DARK.lanes[0])
    events = run([(4, 2)] * 4 + [(8, 2)], ms=100.0)
    feed(graphs, "a", [*events[:4], replace(events[4], k=8)])  # K 4, then 8 from step 4
    # At the time the step with the new K began: when the step before it ended.
    assert _k_markers(graphs.race_plot) == [(pytest.approx(0.4), "K=8")]
    assert _k_markers(graphs.speedup_plot) == [(pytest.approx(0.4), "K=8")]
    assert _k_markers(graphs.acceptance_plot) == [(4, "K=8")]
    graphs.model.clear()
    assert _k_markers(graphs.race_plot) == []


def test_figures_lanes_and_clear(graphs):
    add_lane(graphs, "a", "a", DARK.lanes[0])
    assert graphs.model.figures("a") == {"tokens": 0, "tok_per_s": 0.0, "acceptance_rate": None,
                                   "mean_accepted_tokens": 0.0, "speedup": None,
                                   "decline_rate": None}
    feed(graphs, "a", run([(4, 3), (4, 1)], ms=200.0))
    figures = graphs.model.figures("a")
    assert figures["tokens"] == 6
    assert figures["tok_per_s"] == pytest.approx(15.0)
    assert figures["acceptance_rate"] == pytest.approx(0.5)
    assert figures["mean_accepted_tokens"] == pytest.approx(3.0)
    graphs.model.clear()
    graphs.refresh()
    assert graphs.lanes == ("a",) and graphs.model.figures("a")["tokens"] == 0
    assert len(data(graphs, "a", "race")[0]) == 1  # just the origin
    race_items = graphs.race_plot.getPlotItem().items
    graphs.model.remove("a")
    assert graphs.lanes == ()
    assert not any(item in graphs.race_plot.getPlotItem().items for item in race_items
                   if isinstance(item, pg.PlotDataItem))


def test_theme_recolours_the_plots(graphs):
    graphs.set_theme(LIGHT)
    assert graphs.race_plot.backgroundBrush().color().name() == LIGHT.background
    assert set(graphs.plots) == {"acceptance", "histogram", "position", "race", "speedup",
                                 "cost"}


def test_cost_curve_shows_each_lane_where_it_runs(graphs):
    add_lane(graphs, "plain", "plain", DARK.lanes[0])
    add_lane(graphs, "spec", "spec", DARK.lanes[1])
    graphs.set_costs([1.0, 1.7, 2.5, 3.3, 3.7])
    feed(graphs, "plain", run([(0, 0)] * 4, ms=100.0))
    feed(graphs, "spec", run([(4, 3), (4, 4)], ms=250.0))
    graphs.refresh()
    dx, dy = graphs.cost_curve.dot_data("spec")
    assert dx[0] == pytest.approx(4.0)  # tokens proposed per step
    assert dy[0] == pytest.approx(graphs.model.figures("spec")["speedup"])
    _xs, ys = graphs.cost_curve.curve_data("spec")
    alpha = 7 / 8
    assert ys[4] == pytest.approx((1 - alpha**5) / (1 - alpha) / 3.7)
    graphs.model.remove("spec")
    assert "spec" not in graphs.cost_curve._items


def test_one_key_names_every_lane_and_no_plot_has_a_legend(graphs):
    for i, oracle in enumerate(("none", "prompt-lookup", "ngram", "draft")):
        add_lane(graphs, f"lane{i}", oracle, DARK.lane_colour(i))
    text = graphs.key.text()
    for i, oracle in enumerate(("none", "prompt-lookup", "ngram", "draft")):
        assert oracle in text and DARK.lane_colour(i) in text
    assert "none&nbsp;(baseline)" in text and text.count("baseline") == 1
    # Nothing sits over the curves: the plots have no legends of their own.
    assert all(plot.getPlotItem().legend is None for plot in graphs.plots.values())
    graphs.model.remove("lane3")
    graphs.set_lane_colour("lane2", "#123456")
    assert "draft" not in graphs.key.text() and "#123456" in graphs.key.text()
    graphs.model.reconfigure("lane0", LaneSpec("draft"))
    graphs.model.update_baseline()
    assert "baseline" not in graphs.key.text()


def test_picture_of_one_graph_has_the_key_above_it(graphs):
    for i, oracle in enumerate(("none", "prompt-lookup", "ngram", "draft")):
        add_lane(graphs, f"lane{i}", oracle, DARK.lane_colour(i))
    graphs.resize(600, 700)
    graphs.show()
    picture = graphs.picture("race")
    width = graphs.race_plot.width()
    assert picture.width() == width
    key = graphs.key.copy(width)
    assert picture.height() == key.height() + graphs.race_plot.height()
    # Four entries do not fit on one line of one graph's width: the key wraps.
    assert key.height() > graphs.key.heightForWidth(graphs.width())


def test_text_size_reaches_titles_axes_and_the_key(graphs):
    add_lane(graphs, "a", "none", DARK.lanes[0])
    graphs.set_text_size(16)
    item = graphs.race_plot.getPlotItem()
    assert item.titleLabel.opts["size"] == "18pt"
    assert item.getAxis("bottom").style["tickFont"].pointSize() == 16
    assert "font-size:16pt" in graphs.key.text()


class _PaintCounter(QObject):
    """Counts the paint events each watched widget receives."""

    def __init__(self, widgets: dict[str, object]) -> None:
        super().__init__()
        self._names = {widget: name for name, widget in widgets.items()}
        self.counts = dict.fromkeys(widgets, 0)
        for widget in widgets.values():
            widget.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:
        if event.type() == QEvent.Type.Paint and watched in self._names:
            self.counts[self._names[watched]] += 1
        return False

    def settle(self, qtbot, graphs) -> None:
        """Deliver what the event loop holds until a pass over it paints nothing and the
        graphs' second-half timer is not pending: a condition, where waiting for 80 quiet
        ms had counted a busy machine's late paint in the next refresh. The bound is the
        suite's hang guard, never a verdict."""
        from PySide6.QtWidgets import QApplication

        def quiet() -> bool:
            counts = dict(self.counts)
            QApplication.sendPostedEvents()
            QApplication.processEvents()
            return self.counts == counts and not graphs._second.isActive()

        qtbot.waitUntil(quiet, timeout=HUNG_MS)


def test_a_refresh_paints_each_plot_once(graphs, qtbot):
    """An auto range settled only at paint time moved the axes and re-clipped the curves
    during the paint, which asked for a second paint of every plot on every refresh."""
    graphs.resize(1200, 700)
    graphs.show()
    qtbot.waitExposed(graphs)
    n, streams = 300, {}
    for i, lane in enumerate(("plain", "a", "b")):
        add_lane(graphs, lane, lane, DARK.lanes[i])
        shape = [(0, 0)] * n if lane == "plain" else random_shape(n, seed=i)
        streams[lane] = run(shape, ms=20.0 + 10 * i)
    for lane, events in streams.items():
        feed(graphs, lane, events[:200])
    graphs.refresh()
    counter = _PaintCounter({name: plot.viewport() for name, plot in graphs.plots.items()})
    counter.settle(qtbot, graphs)  # the first show and layout paint a few times
    seen = []
    for start in range(200, 300, 20):  # the curves grow, so every range moves
        before = dict(counter.counts)
        for lane, events in streams.items():
            feed(graphs, lane, events[start:start + 20])
        graphs.refresh()
        counter.settle(qtbot, graphs)
        painted = {name: counter.counts[name] - before[name] for name in before}
        seen.append(painted)
    assert all(p == dict.fromkeys(p, 1) for p in seen), seen


def test_half_the_plots_paint_a_moment_later(graphs, qtbot):
    """Six plots painting in one turn of the event loop held the GUI thread 40-50 ms; a
    staggered refresh draws the second half PAINT_GAP_MS later, and a grab in between shows
    the plots (holding their paints instead made a grab of them black)."""
    from PySide6.QtWidgets import QApplication

    from specviz.widgets.graphs import PAINT_GAP_MS

    graphs.resize(1200, 700)
    graphs.show()
    qtbot.waitExposed(graphs)
    add_lane(graphs, "a", "a", DARK.lanes[0])
    # One K throughout (`run`'s): a K change would mark the race and speedup plots at once.
    events = run(random_shape(60, seed=3), ms=20.0)
    feed(graphs, "a", events[:30])
    graphs.refresh()
    counter = _PaintCounter({name: plot.viewport() for name, plot in graphs.plots.items()})
    counter.settle(qtbot, graphs)
    before = dict(counter.counts)
    feed(graphs, "a", events[30:])
    graphs.refresh(staggered=True)
    # The posted repaints, not the timers: the second half's timer cannot fire in between,
    # however long this machine took to get here.
    QApplication.sendPostedEvents()
    first = {name for name in before if counter.counts[name] > before[name]}
    assert first == {"acceptance", "histogram", "position"}
    image = graphs.race_plot.grab().toImage()
    assert len({image.pixelColor(x, y).name() for x in range(0, image.width(), 10)
                for y in range(0, image.height(), 10)}) > 1
    assert graphs._second.isActive() and graphs._second.interval() == PAINT_GAP_MS
    qtbot.waitUntil(lambda: all(counter.counts[name] > before[name] for name in before),
                    timeout=10_000)  # the rest, once its timer fires
    assert graphs.lane_items("a")["race"].getData()[0][-1] == pytest.approx(
        sum(e.timing.total_ms for e in events) / 1000)


def _grid_colours(plot: pg.PlotWidget) -> set[tuple[str, int]]:
    axis = plot.getAxis("left")
    picture = QPicture()
    painter = QPainter(picture)
    try:
        _axis_line, ticks, _texts = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    return {(pen.color().name(), pen.color().alpha()) for pen, _p1, _p2 in ticks}


def test_grid_lines_are_opaque_and_beneath_the_curves(graphs, qtbot):
    """Blending translucent grid lines was most of a plot's paint; opaque ones in the colour
    the translucent ones showed must lie beneath the curves, or they would cut through them."""
    graphs.resize(1000, 600)
    graphs.show()
    qtbot.waitExposed(graphs)
    item = graphs.race_plot.getPlotItem()
    assert item.getAxis("left").zValue() < item.getViewBox().zValue()
    dark = _grid_colours(graphs.race_plot)
    assert dark and all(alpha == 255 for _name, alpha in dark)
    # Between the grid colour and the background, as 20% of the grid over it would show.
    for name, _alpha in dark:
        grid, bg, mixed = (pg.mkColor(c) for c in (DARK.grid, DARK.background, name))
        assert bg.lightness() < mixed.lightness() < grid.lightness()
    graphs.set_theme(LIGHT)
    light = _grid_colours(graphs.race_plot)
    for name, _alpha in light:  # blended with the light background now
        grid, bg, mixed = (pg.mkColor(c) for c in (LIGHT.grid, LIGHT.background, name))
        assert grid.lightness() < mixed.lightness() < bg.lightness()
