"""The README's picture of speculation under concurrency: speedup over batched plain decoding
against the streams decoded at once, one series per K of a `benchmarks/concurrency.py` run
(dots with their 95% intervals), drawn with the window's plot style, offscreen.

    QT_QPA_PLATFORM=offscreen python benchmarks/concurrency_picture.py conc.json \
        docs/concurrency.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pyqtgraph.exporters
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from specviz.board.palette import LIGHT
from specviz.widgets.plot_style import TEXT_PT, make_plot, theme_plot

COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")
OFFSET = 0.12  # series side by side at each N, so their bars do not hide one another


def series(plot: pg.PlotWidget, name: str, points: list[dict], colour: str, shift: float
           ) -> None:
    x = np.log2([p["streams"] for p in points]) + shift
    y = np.array([p["speedup"] for p in points])
    low = np.array([(p["interval"] or [p["speedup"]] * 2)[0] for p in points])
    high = np.array([(p["interval"] or [p["speedup"]] * 2)[1] for p in points])
    plot.addItem(pg.ErrorBarItem(x=x, y=y, top=high - y, bottom=y - low,
                                 pen=pg.mkPen(colour), beam=0.08))
    plot.plot(x, y, pen=pg.mkPen(colour, width=1.5), symbol="o", symbolSize=8,
              symbolBrush=colour, symbolPen=colour, name=name)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("result", type=Path, help="benchmarks/concurrency.py --out JSON")
    p.add_argument("out", type=Path, help="the PNG to write")
    p.add_argument("--size", default="900x480")
    args = p.parse_args()
    data = json.loads(args.result.read_text())
    app = QApplication.instance() or QApplication([])
    plot = make_plot(f"{data['args']['oracle']} on {data['args']['target']}: speedup over plain "
                     "decoding of as many streams", "streams decoded at once", "× plain")
    theme_plot(plot, LIGHT, TEXT_PT)
    plot.addLegend(offset=(-10, 10))
    plot.addItem(pg.InfiniteLine(pos=1.0, angle=0,
                                 pen=pg.mkPen(LIGHT.grid, style=Qt.PenStyle.DashLine)))
    lanes = data["lanes"]
    for i, (k, lane) in enumerate(lanes.items()):
        name = "auto K (for the batch)" if k == "auto" else f"K = {k}"
        series(plot, name, lane["points"], COLOURS[i % len(COLOURS)],
               (i - (len(lanes) - 1) / 2) * OFFSET)
    ns = [pt["streams"] for pt in next(iter(lanes.values()))["points"]]
    plot.getAxis("bottom").setTicks([[(float(np.log2(n)), str(n)) for n in ns]])
    width, height = (int(v) for v in args.size.split("x"))
    plot.resize(width, height)
    plot.show()
    app.processEvents()
    exporter = pyqtgraph.exporters.ImageExporter(plot.getPlotItem())
    exporter.parameters()["width"] = width
    exporter.export(str(args.out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
