"""How specviz's plots look: axes, grid, text size and theme, shared by every graph."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QColor, QFont, QPainter, QPen

from ..board.palette import DARK, Theme

TEXT_PT = 9  # graph text size outside presentation mode


class _GridAxis(pg.AxisItem):
    """An axis whose grid lines are opaque, in the colour pyqtgraph's translucent lines show
    on the plot's background, and lie beneath the curves.

    Blending translucent lines across the plot was more than half of a plot's paint time.
    """

    def __init__(self, orientation: str) -> None:
        super().__init__(orientation)
        self._background = QColor(DARK.background)
        self._pens: dict[tuple[int, int], QPen] = {}  # (colour, alpha) -> opaque pen

    def set_background(self, colour: str) -> None:
        self._background = QColor(colour)
        self._pens.clear()
        self.picture = None  # drawn again with the new colours
        self.update()

    def generateDrawSpecs(self, p: QPainter):
        specs = super().generateDrawSpecs(p)
        if specs is None or self.grid is False:
            return specs
        axis, ticks, texts = specs
        return axis, [(self._opaque(pen), p1, p2) for pen, p1, p2 in ticks], texts

    def _opaque(self, pen: QPen) -> QPen:
        colour = pen.color()
        key = (colour.rgb(), colour.alpha())
        if key not in self._pens:
            a, bg = colour.alphaF(), self._background
            mixed = QColor.fromRgbF(*(a * c + (1 - a) * b for c, b in (
                (colour.redF(), bg.redF()), (colour.greenF(), bg.greenF()),
                (colour.blueF(), bg.blueF()))))
            self._pens[key] = QPen(pen)
            self._pens[key].setColor(mixed)
        return self._pens[key]


class _WholeAxis(_GridAxis):
    """Ticks on whole numbers only: draft positions and token counts have no halves."""

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list:
        return [(max(1.0, spacing), offset)
                for spacing, offset in super().tickSpacing(minVal, maxVal, size)]


def make_plot(title: str, x_label: str, y_label: str, *, whole_x: bool = False) -> pg.PlotWidget:
    axes = {"left": _GridAxis("left"),
            "bottom": _WholeAxis("bottom") if whole_x else _GridAxis("bottom")}
    plot = pg.PlotWidget(axisItems=axes)
    for axis in axes.values():  # opaque grid lines beneath the curves, not across them
        axis.setZValue(plot.getPlotItem().getViewBox().zValue() - 1)
    plot.setTitle(title)
    plot.setLabel("bottom", x_label)
    plot.setLabel("left", y_label)
    for name in ("left", "bottom"):
        axis = plot.getAxis(name)
        axis.enableAutoSIPrefix(False)  # no "(x0.001)" on ratios
        axis.setStyle(maxTickLevel=1)  # the finest grid level cost half of every repaint
    plot.showGrid(x=True, y=True, alpha=0.2)
    # Curves have a point per step: thin them to a few per pixel and skip those out of view.
    # (A plot imposes these on every item it holds, so they are set here, not per curve.)
    plot.setDownsampling(auto=True, mode="peak")
    plot.setClipToView(True)
    plot.setMenuEnabled(False)
    return plot


def theme_plot(plot: pg.PlotWidget, theme: Theme, points: int) -> None:
    item = plot.getPlotItem()
    plot.setBackground(theme.background)
    item.setTitle(item.titleLabel.text, color=theme.foreground, size=f"{points + 2}pt")
    font = QFont()
    font.setPointSize(points)
    for name in ("left", "bottom"):
        axis = item.getAxis(name)
        axis.setPen(theme.grid)
        axis.setTextPen(theme.foreground)
        axis.setTickFont(font)
        axis.setLabel(axis.labelText, color=theme.foreground, **{"font-size": f"{points}pt"})
        axis.set_background(theme.background)
