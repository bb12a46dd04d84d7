"""Theoretical speedup against K, priced by this machine's cost profile, with each lane's live
operating point on it.

For a lane's measured acceptance rate alpha, the curve is Leviathan et al.'s expected tokens per
step, (1 - alpha^(K+1)) / (1 - alpha), over the cost of the step relative to one plain step:
verifying K+1 tokens (from the profile; free without one, their GPU assumption). The dot is
where the lane runs: its K (mean K for auto) and its measured speedup. On a CPU, where a batch
of 16 costs several tokens, the curves bend down early: that is why a drafter that wins on a
GPU can lose here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QVBoxLayout, QWidget

from ..engines.cost import theoretical_speedup
from .palette import DARK, Theme
from .plot_style import TEXT_PT, make_plot, theme_plot

K_LIMIT = 32


def theory_curve(alpha: float, relative: Sequence[float] | None,
                 k_max: int = K_LIMIT) -> np.ndarray:
    """Speedup for K = 0..k_max; relative[n-1] is the cost of n tokens over one token."""
    if relative:
        def verify(n: int) -> float:
            return float(relative[min(n, len(relative)) - 1])
    else:
        verify = None
    return np.array([theoretical_speedup(alpha, k, verify) for k in range(k_max + 1)])


class CostCurve(QWidget):
    """One plot: a theoretical curve and a live dot per lane."""

    def __init__(self, theme: Theme = DARK, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plot = make_plot("Theoretical speedup by K (dot: each lane)", "K", "× plain")
        self.plot.addItem(pg.InfiniteLine(pos=1.0, angle=0))
        self.plot.setToolTip(
            "Expected tokens per step (Leviathan et al.) at each lane's measured acceptance,\n"
            "over the cost of verifying K+1 tokens; the dot is where the lane runs. Batch\n"
            "costs come from `specviz profile --target MODEL`; without a stored profile\n"
            "every batch costs as much as one token.")
        self._relative: list[float] | None = None
        self._lanes: dict[str, dict] = {}
        self._items: dict[str, tuple[pg.PlotDataItem, pg.ScatterPlotItem]] = {}
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot)
        self.set_theme(theme)

    def set_costs(self, relative: Sequence[float] | None, label: str = "") -> None:
        """Batch costs relative to one token (n = 1, 2, ...), or None for free batches."""
        self._relative = list(relative) if relative else None
        where = label or ("batches free" if relative is None else "profiled batch costs")
        self.plot.setTitle(f"Theoretical speedup by K ({where})")  # dots: where lanes run
        for lane_id in self._lanes:
            self._draw(lane_id)

    def set_lane(self, lane_id: str, label: str, colour: str, acceptance: float | None,
                 k: float, speedup: float | None) -> None:
        previous = self._lanes.get(lane_id)
        self._lanes[lane_id] = {"label": label, "colour": colour, "alpha": acceptance,
                                "k": k, "speedup": speedup}
        if lane_id not in self._items:
            curve = self.plot.plot(name=label)
            dot = pg.ScatterPlotItem(size=11)
            self.plot.addItem(dot)
            self._items[lane_id] = (curve, dot)
        if previous is None or previous["colour"] != colour:
            # Styled once per colour: a new pen or brush with every point costs a redraw
            # of the dot's symbol at every refresh.
            curve, dot = self._items[lane_id]
            pen = pg.mkPen(colour, width=2)
            curve.setPen(pen)
            dot.setPen(pen)
            dot.setBrush(pg.mkBrush(colour))
        self._draw(lane_id)

    def remove_lane(self, lane_id: str) -> None:
        self._lanes.pop(lane_id, None)
        items = self._items.pop(lane_id, None)
        if items:
            for item in items:
                self.plot.removeItem(item)

    def curve_data(self, lane_id: str) -> tuple[np.ndarray, np.ndarray]:
        return self._items[lane_id][0].getData()

    def dot_data(self, lane_id: str) -> tuple[np.ndarray, np.ndarray]:
        return self._items[lane_id][1].getData()

    def set_theme(self, theme: Theme, points: int = TEXT_PT) -> None:
        theme_plot(self.plot, theme, points)

    def _draw(self, lane_id: str) -> None:
        lane, (curve, dot) = self._lanes[lane_id], self._items[lane_id]
        if lane["alpha"] is None:
            curve.setData([], [])
        else:
            ys = theory_curve(lane["alpha"], self._relative)
            curve.setData(np.arange(len(ys)), ys)
        if lane["speedup"] is None:
            dot.setData([], [])
        else:
            dot.setData([lane["k"]], [lane["speedup"]])
