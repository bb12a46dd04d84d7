"""Speedup against streams: what each speculating lane measured at every N raced in this
window session (a dot, its interval as an error bar), over what the cost profile predicts at
each N for the lane's acceptance (a dashed curve), the predicted crossover a dotted line and
the measured one (the first N not faster) a ring around its dot. Observes
the board's StreamsRace; redrawn with the other graphs (at most every GRAPHS_S), one
setData per item."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from ..board.palette import DARK, Theme
from ..board.streams_race import STREAM_COUNTS, StreamsRace
from .plot_style import TEXT_PT, make_plot, theme_plot


class _LaneItems:
    """One lane's items on the plot, made once and moved with setData."""

    def __init__(self, plot: pg.PlotWidget, colour: str) -> None:
        self.curve = pg.PlotDataItem(pen=pg.mkPen(colour, width=1.5, style=Qt.PenStyle.DashLine))
        self.bars = pg.ErrorBarItem(x=np.zeros(0), y=np.zeros(0), pen=pg.mkPen(colour),
                                    beam=0.25)
        self.dots = pg.ScatterPlotItem(size=9, brush=pg.mkBrush(colour), pen=pg.mkPen(colour))
        # The measured crossover: a ring around its dot (the first N not faster).
        self.ring = pg.ScatterPlotItem(size=20, brush=pg.mkBrush(None),
                                       pen=pg.mkPen(colour, width=2))
        self.crossover = pg.InfiniteLine(angle=90, pen=pg.mkPen(colour, style=Qt.PenStyle.DotLine),
                                         label="", labelOpts={"position": 0.9, "color": colour})
        for item in self.items:
            plot.addItem(item)
        self.crossover.hide()

    def remove(self, plot: pg.PlotWidget) -> None:
        for item in self.items:
            plot.removeItem(item)

    @property
    def items(self) -> tuple:
        return self.curve, self.bars, self.dots, self.ring, self.crossover


class StreamsGraph(QWidget):
    def __init__(self, race: StreamsRace, theme: Theme = DARK,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.race = race
        self.plot = make_plot("Speedup against streams (dots: measured, dashes: predicted)",
                              "streams (users at once)", "× plain", whole_x=True)
        self.plot.setXRange(1, STREAM_COUNTS[-1], padding=0.04)
        self._unit = pg.InfiniteLine(pos=1.0, angle=0)
        self.plot.addItem(self._unit)
        self.note = QLabel("race with more than one stream to measure a point", wordWrap=True)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.plot, 1)
        box.addWidget(self.note)
        self._lanes: dict[str, _LaneItems] = {}
        self.set_theme(theme)

    def set_theme(self, theme: Theme) -> None:
        theme_plot(self.plot, theme, TEXT_PT)
        self._unit.setPen(pg.mkPen(theme.grid, style=Qt.PenStyle.DashLine))

    def refresh(self, colours: dict[str, str]) -> None:
        """Every speculating lane's dots, bars, curve and crossover, as the race has them."""
        shown = [lid for lid in colours if self.race.points(lid) or
                 self.race.prediction(lid) is not None]
        for lane_id in set(self._lanes) - set(shown):
            self._lanes.pop(lane_id).remove(self.plot)
        words = []
        for lane_id in shown:
            items = self._lanes.get(lane_id) or self._lanes.setdefault(
                lane_id, _LaneItems(self.plot, colours[lane_id]))
            words.append(self._draw(lane_id, items))
        self.note.setText(" · ".join(w for w in words if w) or
                          "race with more than one stream to measure a point")

    def _draw(self, lane_id: str, items: _LaneItems) -> str:
        points = self.race.points(lane_id)
        x = np.array([m.n for m in points], dtype=float)
        y = np.array([m.speedup.ratio for m in points], dtype=float)
        low = np.array([m.speedup.low if m.speedup.low is not None else m.speedup.ratio
                        for m in points], dtype=float)
        high = np.array([m.speedup.high if m.speedup.high is not None else m.speedup.ratio
                         for m in points], dtype=float)
        items.dots.setData(x=x, y=y)
        items.bars.setData(x=x, y=y, top=high - y, bottom=y - low)
        measured = self.race.crossover(lane_id)
        ring = [(m.n, m.speedup.ratio) for m in points if m.n == measured]
        items.ring.setData(x=[n for n, _ in ring], y=[r for _, r in ring])
        prediction = self.race.prediction(lane_id)
        if prediction is None:
            items.curve.setData([], [])
        else:
            ns = sorted(prediction.speedups)
            items.curve.setData(ns, [prediction.speedups[n] for n in ns])
        at = prediction.crossover if prediction is not None else None
        items.crossover.setVisible(at is not None)
        if at is not None:
            items.crossover.setValue(at)
            items.crossover.label.setFormat(f"predicted crossover: {at}")
        return self._words(lane_id, at, prediction is not None)

    def _words(self, lane_id: str, predicted: int | None, profiled: bool) -> str:
        lane = self.race.lanes.get(lane_id)
        name = lane.oracle if lane is not None else lane_id
        measured = self.race.crossover(lane_id)
        said = (f"{name}: stops paying at {measured} streams (measured)" if measured
                else f"{name}: pays at every N measured" if self.race.points(lane_id)
                else f"{name}: nothing measured yet")
        if not profiled:
            return f"{said}; no cost profile stored here (`specviz profile`): no prediction"
        return said + (f"; predicted to stop at {predicted}" if predicted
                       else "; predicted to pay at every N up to 16")
