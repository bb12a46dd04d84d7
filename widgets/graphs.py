"""Six live graphs comparing lanes (one run each): acceptance, depth, accepted tokens per
step, the race, speedup (each lane's interval over its races shaded behind it) and the cost
curve, under one key of the lanes' colours.

The graphs draw the lanes model they observe (board/lanes_model.py's BoardModel: its lanes'
counted steps, totals, figures and baseline, and the signals it emits when they change); they
keep no numbers of their own. A lane that stepped is marked dirty; `refresh` (called by a timer)
recomputes the dirty lanes' curves with numpy and hands each curve to pyqtgraph once. Items
and pens are made once per lane and reused. Time axes use each lane's own compute time
(`Totals.compute_ms`), so lanes that ran side by side or one after another compare the
same way.

A lane of N streams (the board's StreamsRace) shows its followed stream in the first three
plots and the race, as its text view does; its speedup and its cost-curve dot are its batch's
over the plain lane's batch, as its header and the Streams dock give them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QColor, QPainter, QPalette, QPixmap
from PySide6.QtWidgets import QGridLayout, QWidget

from ..board.lanes_model import ACCEPTED, PROPOSED, SECONDS, STEP, TOKENS, BoardModel
from ..board.palette import DARK, Theme
from ..board.streams_race import StreamsRace
from .cost_curve import CostCurve
from .lane_key import LaneKey
from .plot_style import TEXT_PT, make_plot, theme_plot

WINDOW = 16  # steps in the rolling acceptance rate

PAINT_GAP_MS = 16  # the second half of the plots is drawn this much later (see refresh)
# A lane's speedup interval over its races, shaded in its colour: faint enough that the
# bands of several lanes overlap legibly and the curves stay on top.
BAND_ALPHA, BAND_EDGE_ALPHA = 40, 110


@dataclass(eq=False)
class _Lane:
    """How one lane is drawn: its label, colour, plot items and K markers."""

    label: str
    colour: str
    items: dict[str, pg.GraphicsObject] = field(default_factory=dict)
    markers: list[tuple[pg.PlotItem, pg.InfiniteLine]] = field(default_factory=list)

    def clear_markers(self) -> None:
        for plot, marker in self.markers:
            plot.removeItem(marker)
        self.markers.clear()


class LaneGraphs(QWidget):
    """Acceptance over steps, accepted-count histogram, acceptance by position, race, speedup."""

    def __init__(self, model: BoardModel, theme: Theme = DARK,
                 parent: QWidget | None = None, streams: StreamsRace | None = None) -> None:
        """`model`: the lanes model drawn; `streams`: its lanes of N streams (the board's)."""
        super().__init__(parent)
        self.model = model
        self.streams = streams or StreamsRace()
        self._lanes: dict[str, _Lane] = {}
        self._baseline: str | None = None
        self._dirty: set[str] = set()
        self._barred: tuple[str, ...] = ()  # lanes with histogram bars, in slot order
        self._later: set[str] = set()  # lanes whose race, speedup and cost wait (staggered)
        self._second = QTimer(self, singleShot=True, interval=PAINT_GAP_MS)
        self._second.timeout.connect(self._draw_second_half)
        self._text_pt = TEXT_PT
        # Short titles and axis labels: a plot keeps its text whole at a third of a laptop's
        # width, with the docks open.
        self.acceptance_plot = make_plot("Acceptance (solid: last 16, dashed: all)",
                                         "step", "acceptance")
        self.histogram_plot = make_plot("Accepted tokens per drafting step",
                                        "accepted tokens", "steps", whole_x=True)
        self.position_plot = make_plot("Acceptance by draft position", "draft position",
                                       "acceptance", whole_x=True)
        self.race_plot = make_plot("The race: tokens over compute time", "compute time (s)",
                                   "tokens")
        self.speedup_plot = make_plot("Speedup over plain decoding", "compute time (s)",
                                      "× plain")
        self._unit_line = pg.InfiniteLine(pos=1.0, angle=0)
        self.speedup_plot.addItem(self._unit_line)

        self.cost_curve = CostCurve(theme)
        self.key = LaneKey(theme)  # one key for all six plots (see lane_key)
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(self.key, 0, 0, 1, 2)
        grid.addWidget(self.race_plot, 1, 0)
        grid.addWidget(self.speedup_plot, 1, 1)
        grid.addWidget(self.acceptance_plot, 2, 0)
        grid.addWidget(self.position_plot, 2, 1)
        grid.addWidget(self.histogram_plot, 3, 0)
        grid.addWidget(self.cost_curve, 3, 1)
        self.set_theme(theme)
        model.stepped.connect(self._mark_dirty)
        model.k_marked.connect(self.mark_k_change)
        model.cleared.connect(self._on_cleared)
        model.baseline_changed.connect(self._set_baseline)
        model.removed.connect(self._on_removed)
        self.streams.batched.connect(self._on_batched)
        self.streams.started.connect(self._on_streams_started)

    @property
    def plots(self) -> dict[str, pg.PlotWidget]:
        return {"acceptance": self.acceptance_plot, "histogram": self.histogram_plot,
                "position": self.position_plot, "race": self.race_plot,
                "speedup": self.speedup_plot, "cost": self.cost_curve.plot}

    @property
    def lanes(self) -> tuple[str, ...]:
        return tuple(self._lanes)

    @property
    def baseline(self) -> str | None:
        return self._baseline

    def lane_items(self, lane_id: str) -> dict[str, pg.GraphicsObject]:
        """A lane's plot items by name: rolling, overall, position, race, speedup, bars, band
        (its speedup's interval over its races)."""
        return dict(self._lanes[lane_id].items)

    # ------------------------------------------------------------ lanes

    def show_lane(self, lane_id: str, label: str, colour: str) -> None:
        """Draw a lane of the model, labelled (its oracle) and coloured; again: relabelled."""
        if lane_id in self._lanes:
            self._on_removed(lane_id)
        lane = _Lane(label, colour)
        self._lanes[lane_id] = lane
        self._make_items(lane_id, lane)
        self._update_key()
        self._dirty.add(lane_id)
        if lane_id == self.model.baseline():
            self._set_baseline(lane_id)

    def _on_removed(self, lane_id: str) -> None:
        lane = self._lanes.pop(lane_id, None)
        if lane is None:
            return
        for plot, item in self._placed(lane):
            plot.removeItem(item)
        lane.clear_markers()
        self.cost_curve.remove_lane(lane_id)
        self._update_key()
        self._dirty.update(self._lanes)  # bar slots may shift

    def _set_baseline(self, lane_id: str | None) -> None:
        """The plain-decoding lane that speedups divide by (drawn dashed in the race)."""
        if lane_id is not None and lane_id not in self._lanes:
            return  # drawn once the board shows it
        self._baseline = lane_id
        for lid, lane in self._lanes.items():
            self._style_items(lid, lane)
        self._update_key()
        self._dirty.update(self._lanes)

    def set_lane_colour(self, lane_id: str, colour: str) -> None:
        lane = self._lanes[lane_id]
        lane.colour = colour
        self._style_items(lane_id, lane)
        self._update_key()
        self._dirty.add(lane_id)  # the cost curve takes the colour at the next refresh
        for _, marker in lane.markers:
            marker.setPen(_marker_pen(colour))
            marker.label.setColor(colour)

    # ------------------------------------------------------------ data

    def _mark_dirty(self, lane_id: str) -> None:
        self._dirty.add(lane_id)  # drawn at the next refresh

    def _on_batched(self, lane_id: str) -> None:
        """A batch moved (also where its followed stream has ended): its speedup, and every
        lane's where it is the plain batch they divide by."""
        self._dirty.update(self._lanes if lane_id == self.streams.baseline() else {lane_id})

    def _on_streams_started(self, lane_id: str) -> None:
        """A lane began a batch or left streams: its speedup is a batch's, or not. The race
        shows a followed stream's tokens (its pace), which a lane of N streams' race is not."""
        self._on_batched(lane_id)
        followed = "one stream's tokens" if self.streams.lanes else "tokens"
        self.race_plot.setLabel("left", followed)

    def _counts(self, lane_id: str):
        return self.model.lanes[lane_id].counts

    def mark_k_change(self, lane_id: str, event_step: int, label: str) -> None:
        """A vertical line labelled `label` ("K=8") at the lane's current time, and at
        `event_step` by steps."""
        lane = self._lanes.get(lane_id)
        if lane is None:
            return
        # Marked once the step is counted: it began when the step before it ended.
        seconds = self._counts(lane_id).rows.column(SECONDS)
        now = float(seconds[-2]) if len(seconds) > 1 else 0.0
        for plot, x in ((self.race_plot, now), (self.speedup_plot, now),
                        (self.acceptance_plot, float(event_step))):
            marker = pg.InfiniteLine(
                pos=x, angle=90, pen=_marker_pen(lane.colour), label=label,
                labelOpts={"position": 0.92, "color": lane.colour, "movable": False},
            )
            plot.addItem(marker)
            lane.markers.append((plot.getPlotItem(), marker))

    def _on_cleared(self, lane_id: str | None) -> None:
        """The model forgot a lane's steps (None: every lane's): their K markers go too."""
        lanes = self._lanes if lane_id is None else {lane_id: self._lanes.get(lane_id)}
        for lid, lane in lanes.items():
            if lane is not None:
                lane.clear_markers()
                self._dirty.add(lid)

    # ------------------------------------------------------------ drawing

    def refresh(self, staggered: bool = False) -> None:
        """Redraw what changed since the last refresh.

        Staggered (the live window), the race, speedup and cost plots are drawn PAINT_GAP_MS
        after the other three: six plots painting in one turn of the event loop held the GUI
        thread 40-50 ms on a 2-core CPU; in two halves, the token views and input get a turn
        in between."""
        dirty = self._dirty & set(self._lanes)
        self._dirty.clear()
        if dirty:
            for lane_id in dirty:
                self._draw_acceptance(lane_id)
            self._draw_bars(dirty)
            self._settle_views(self._first_plots())
            self._later |= set(self._lanes) if self._baseline in dirty else dirty
        if not self._later:
            return
        if staggered:
            self._second.start()
        else:
            self._draw_second_half()  # and whatever a staggered refresh left waiting

    def _first_plots(self) -> list[pg.PlotWidget]:
        return [self.acceptance_plot, self.histogram_plot, self.position_plot]

    def _draw_second_half(self) -> None:
        self._second.stop()
        later, self._later = self._later & set(self._lanes), set()
        for lane_id in later:
            self._draw_race(lane_id)
            self._draw_speedup(lane_id)
            self._draw_band(lane_id)
            self._draw_operating_point(lane_id)
        self._settle_views([self.race_plot, self.speedup_plot, self.cost_curve.plot])

    def _settle_views(self, plots: list[pg.PlotWidget]) -> None:
        """Fit each plot's auto range to its new data now, not at its next paint.

        A ViewBox defers auto-ranging to the start of its paint; the new range then clips and
        thins the curves again and moves the axes, which asks for a second paint of every plot
        (two paints per refresh, half of them wasted). Settled here, the one paint finds
        nothing left to change.
        """
        for plot in plots:
            plot.getPlotItem().getViewBox().prepareForPaint()

    def set_costs(self, relative: list[float] | None, label: str = "",
                  profiled: bool = True) -> None:
        """The cost profile the theoretical curves are priced with (None: free batches, or
        nothing drawn when the machine has no profile yet: `profiled` False)."""
        self.cost_curve.set_costs(relative, label, profiled)

    def _draw_operating_point(self, lane_id: str) -> None:
        """The lane's theoretical curve and where it runs: tokens proposed per step (the K
        it verifies, on average) against its measured speedup. A lane of N streams: its
        batch's, over a curve priced at its N (someone comparing oracles under concurrency
        compares batches; a stream's pace over a one-stream curve would say another N)."""
        lane, batch = self._lanes[lane_id], self.streams.figures(lane_id)
        if batch is not None:
            self.cost_curve.set_lane(lane_id, lane.label, lane.colour, batch["acceptance_rate"],
                                     batch["proposed_per_step"], batch["speedup"],
                                     self.streams.lanes[lane_id].relative_costs(), batch["streams"])
            return
        figures, totals = self.model.figures(lane_id), self.model.lanes[lane_id].totals
        k = totals.proposed / totals.steps if totals and totals.steps else 0.0
        self.cost_curve.set_lane(lane_id, lane.label, lane.colour, figures["acceptance_rate"],
                                 k, figures["speedup"])

    def _draw_acceptance(self, lane_id: str) -> None:
        counts, items = self._counts(lane_id), self._lanes[lane_id].items
        rows = counts.rows
        steps = rows.column(STEP)
        rolling, overall = acceptance_curves(rows.column(PROPOSED), rows.column(ACCEPTED))
        items["rolling"].setData(steps, rolling, connect="finite")
        items["overall"].setData(steps, overall, connect="finite")
        depth = _used(counts.position_proposed)
        rate = _ratio(counts.position_accepted[:depth], counts.position_proposed[:depth])
        items["position"].setData(np.arange(1, depth + 1), rate, connect="finite")

    def _draw_race(self, lane_id: str) -> None:
        rows = self._counts(lane_id).rows
        self._lanes[lane_id].items["race"].setData(
            np.concatenate([[0.0], rows.column(SECONDS)]),
            np.concatenate([[0.0], rows.column(TOKENS)]))

    def _draw_bars(self, dirty: set[str]) -> None:
        """Bars side by side in each bin, one slot per lane that has proposed anything."""
        barred = tuple(lid for lid in self._lanes if self._counts(lid).histogram.any())
        if barred != self._barred:  # slots moved: every lane's bars shift
            self._barred = barred
            dirty = set(self._lanes)
        width = 0.8 / max(len(barred), 1)
        for lane_id in dirty:
            histogram = self._counts(lane_id).histogram
            heights = histogram[: _used(histogram)]
            slot = barred.index(lane_id) if lane_id in barred else 0
            x = np.arange(len(heights)) - 0.4 + width * (slot + 0.5)
            self._lanes[lane_id].items["bars"].setOpts(x=x, height=heights, width=width)

    def _draw_speedup(self, lane_id: str) -> None:
        curve = self._lanes[lane_id].items["speedup"]
        if lane_id in self.streams.lanes:
            # The batch's: the lane's speedup at N, which its followed stream's pace is not.
            rows = self.streams.speedup_rows(lane_id)
            curve.setData(*(speedup_curve(*rows[0], *rows[1]) if rows else ([], [])))
            return
        if self._baseline is None or lane_id == self._baseline:
            curve.setData([], [])
            return
        lane, base = self._counts(lane_id).rows, self._counts(self._baseline).rows
        curve.setData(*speedup_curve(lane.column(SECONDS), lane.column(TOKENS),
                                     base.column(SECONDS), base.column(TOKENS)))

    def _draw_band(self, lane_id: str) -> None:
        """The lane's speedup interval over its races (the lanes model's rounds), across
        the plot; hidden until two races give one. A lane of N streams: its batch's interval
        in this race, as its header gives it."""
        band = self._lanes[lane_id].items["band"]
        region = self._band_region(lane_id)
        if region == (band.getRegion() if band.isVisible() else None):
            return  # a lane of one's race under way moves no band: only a race's end does
        if region is not None:
            band.setRegion(region)
        band.setVisible(region is not None)  # the curve redrawn with it moves the auto range

    def _band_region(self, lane_id: str) -> tuple[float, float] | None:
        if lane_id in self.streams.lanes:  # plain decoding's own reads 1x, with no interval
            speedup = self.streams.speedup(lane_id)
        else:
            beside = self._baseline not in (None, lane_id)  # else no speedup curve: no band
            speedup = self.model.rounds(lane_id) if beside else None
        return None if speedup is None or speedup.low is None else (speedup.low, speedup.high)

    def _make_items(self, lane_id: str, lane: _Lane) -> None:
        lane.items = {
            "rolling": pg.PlotDataItem(name=lane.label),
            "overall": pg.PlotDataItem(),
            "position": pg.PlotDataItem(symbol="o", symbolSize=6, symbolPen=None,
                                        name=lane.label),
            "race": pg.PlotDataItem(name=lane.label),
            "speedup": pg.PlotDataItem(name=lane.label),
            "bars": pg.BarGraphItem(x=[], height=[], width=0.8),
            "band": pg.LinearRegionItem(orientation="horizontal", movable=False),
        }
        lane.items["band"].setZValue(-1)  # beneath the curves
        lane.items["band"].setVisible(False)
        self._style_items(lane_id, lane)
        for plot, item in self._placed(lane):
            plot.addItem(item)

    def _update_key(self) -> None:
        self.key.set_lanes([(lid, lane.label, lane.colour, lid == self._baseline)
                            for lid, lane in self._lanes.items()])

    def picture(self, name: str) -> QPixmap:
        """One plot as shown, with the key above it at the plot's width (a graph exported
        on its own)."""
        graph = self.plots[name].grab()
        key = self.key.copy(graph.width()).grab()
        out = QPixmap(graph.width(), key.height() + graph.height())
        out.fill(QColor(self._theme.background))
        painter = QPainter(out)
        painter.drawPixmap(0, 0, key)
        painter.drawPixmap(0, key.height(), graph)
        painter.end()
        return out

    def _style_items(self, lane_id: str, lane: _Lane) -> None:
        items, colour = lane.items, lane.colour
        solid = pg.mkPen(colour, width=2)
        for name in ("rolling", "position", "speedup"):
            items[name].setPen(solid)
        items["overall"].setPen(pg.mkPen(colour, width=1.5, style=Qt.PenStyle.DashLine))
        items["race"].setPen(_race_pen(colour, lane_id == self._baseline))
        items["position"].setSymbolBrush(colour)
        items["bars"].setOpts(brush=colour, pen=pg.mkPen(colour))
        band, edge = items["band"], pg.mkPen(_alpha(colour, BAND_EDGE_ALPHA), width=1)
        band.setBrush(_alpha(colour, BAND_ALPHA))
        band.update()  # a region's new brush repaints it only when asked
        for line in band.lines:
            line.setPen(edge)

    def _placed(self, lane: _Lane) -> list[tuple[pg.PlotItem, pg.GraphicsObject]]:
        where = {"rolling": self.acceptance_plot, "overall": self.acceptance_plot,
                 "position": self.position_plot, "race": self.race_plot,
                 "speedup": self.speedup_plot, "bars": self.histogram_plot,
                 "band": self.speedup_plot}
        return [(where[name].getPlotItem(), item) for name, item in lane.items.items()]

    # ------------------------------------------------------------ theme

    def set_text_size(self, points: int) -> None:
        """Text size of titles, axes and the key (larger for presentation)."""
        self._text_pt = points
        self.key.set_text_size(points)
        self.set_theme(self._theme)

    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        palette = self.palette()
        palette.setColor(QPalette.ColorRole.Window, QColor(theme.background))
        self.setPalette(palette)
        self.setAutoFillBackground(True)  # the gaps between plots match them
        for plot in self.plots.values():
            theme_plot(plot, theme, self._text_pt)
        self.key.set_theme(theme)
        self._unit_line.setPen(pg.mkPen(theme.grid, style=Qt.PenStyle.DashLine))


# ---------------------------------------------------------------- numbers


def acceptance_curves(proposed: np.ndarray, accepted: np.ndarray,
                      window: int = WINDOW) -> tuple[np.ndarray, np.ndarray]:
    """Per step: accepted/proposed over the last `window` steps, and since the start.

    NaN where nothing was proposed in the span (plain decoding, or an oracle with no guess).
    """
    p = np.concatenate([[0.0], np.cumsum(proposed)])
    a = np.concatenate([[0.0], np.cumsum(accepted)])
    end = np.arange(1, len(proposed) + 1)
    start = np.maximum(end - window, 0)
    return _ratio(a[end] - a[start], p[end] - p[start]), _ratio(a[1:], p[1:])


def speedup_curve(seconds: np.ndarray, tokens: np.ndarray, base_seconds: np.ndarray,
                  base_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A lane's tok/s so far over the baseline's tok/s at the same compute time.

    The baseline's rate is interpolated between its steps and held at its ends, so a lane
    that ran past the baseline's last step is compared with the baseline's final rate.
    """
    mine, base = seconds > 0, base_seconds > 0
    if not mine.any() or not base.any():
        return np.empty(0), np.empty(0)
    t = seconds[mine]
    base_rate = np.interp(t, base_seconds[base], base_tokens[base] / base_seconds[base])
    return t, (tokens[mine] / t) / base_rate


def _used(counts: np.ndarray) -> int:
    """Length of `counts` up to its last non-zero entry."""
    nonzero = np.flatnonzero(counts)
    return int(nonzero[-1]) + 1 if len(nonzero) else 0


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.full(len(num), np.nan), where=den > 0)


# ---------------------------------------------------------------- styling


def _race_pen(colour: str, baseline: bool):
    style = Qt.PenStyle.DashLine if baseline else Qt.PenStyle.SolidLine
    return pg.mkPen(colour, width=2, style=style)


def _alpha(colour: str, alpha: int) -> QColor:
    shade = QColor(colour)
    shade.setAlpha(alpha)
    return shade


def _marker_pen(colour: str):
    return pg.mkPen(colour, width=1, style=Qt.PenStyle.DotLine)
