"""Draw a stored cost profile (`specviz profile`) as the README's picture.

Left: what verifying n tokens costs relative to one token, per context length, on this machine.
Right: Leviathan et al.'s theoretical speedup against K for a few acceptance rates, priced by
this profile (solid) and with free batches, their GPU assumption (dashed). The gap between the
two is why a drafter that wins on a GPU can lose on a CPU.

    python benchmarks/profile_picture.py --target qwen2.5-coder-1.5b --threads 2 --out cost.png
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pyqtgraph as pg
import pyqtgraph.exporters
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from specviz.board.palette import LIGHT
from specviz.engines.cost import profile as prof
from specviz.engines.cost.step_cost import speedup_curve

ALPHAS = (0.6, 0.8, 0.9)
KS = list(range(0, 17))


def main() -> int:
    args = _parse()
    profile = prof.load(args.target, args.backend, args.device, args.threads)
    if profile is None:
        print(f"no stored profile for {args.target} ({args.backend}, {args.device}, "
              f"{args.threads} threads): run `specviz profile` first", file=sys.stderr)
        return 2
    app = QApplication.instance() or QApplication([])
    pg.setConfigOptions(antialias=True, background=LIGHT.background, foreground=LIGHT.foreground)
    layout = pg.GraphicsLayoutWidget()
    layout.resize(*args.size)
    _cost_plot(layout.addPlot(), profile)
    _speedup_plot(layout.addPlot(), profile, args.context)
    app.processEvents()
    pg.exporters.ImageExporter(layout.scene()).export(str(args.out))
    print(f"wrote {args.out}")
    return 0


def _cost_plot(plot, profile: prof.Profile) -> None:
    plot.setTitle(f"{profile.model}: verify cost ({profile.backend}, {profile.device}, "
                  f"{profile.threads} threads)")
    plot.setLabel("bottom", "tokens in one forward pass")
    plot.setLabel("left", "cost / one token")
    plot.showGrid(x=True, y=True, alpha=0.3)
    plot.addLegend(offset=(8, 8))
    for i, ctx in enumerate(profile.contexts):
        ys = [profile.relative(n, ctx) for n in profile.batches]
        plot.plot(profile.batches, ys, pen=pg.mkPen(LIGHT.lane_colour(i), width=2),
                  symbol="o", symbolSize=5, symbolBrush=LIGHT.lane_colour(i),
                  name=f"context {ctx}")
    plot.plot(profile.batches, [1.0] * len(profile.batches),
              pen=pg.mkPen(LIGHT.grid, width=2, style=Qt.PenStyle.DashLine),
              name="free batches (GPU-like)")


def _speedup_plot(plot, profile: prof.Profile, context: int) -> None:
    plot.setTitle(f"theoretical speedup at context {context}: this machine (solid) vs free "
                  "batches (dashed)")
    plot.setLabel("bottom", "K (draft length)")
    plot.setLabel("left", "speedup over plain decoding")
    plot.showGrid(x=True, y=True, alpha=0.3)
    plot.addLegend(offset=(-8, 8))
    plot.addLine(y=1.0, pen=pg.mkPen(LIGHT.foreground, width=1))
    for i, alpha in enumerate(ALPHAS):
        colour = LIGHT.lane_colour(i)
        plot.plot(KS, speedup_curve(alpha, KS, profile, context),
                  pen=pg.mkPen(colour, width=3), name=f"acceptance {alpha:.0%}")
        plot.plot(KS, speedup_curve(alpha, KS, None),
                  pen=pg.mkPen(colour, width=2, style=Qt.PenStyle.DashLine))


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="qwen2.5-coder-1.5b")
    p.add_argument("--backend", default="llama")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--size", type=int, nargs=2, default=(1400, 520), metavar=("W", "H"))
    p.add_argument("--out", type=Path, default=Path("assets/cost_profile.png"))
    return p.parse_args()


if __name__ == "__main__":
    raise SystemExit(main())
