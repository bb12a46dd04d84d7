"""Theoretical speedup against K, priced by this machine's cost profile, with each lane's live
operating point on it.

For a lane's measured acceptance rate alpha, the curve is Leviathan et al.'s expected tokens per
step, (1 - alpha^(K+1)) / (1 - alpha), over the cost of the step relative to one plain step:
verifying K+1 tokens (from the profile; free without one, their GPU assumption). The dot is
where the lane runs: its K (mean K for auto) and its measured speedup. On a CPU, where a batch
of 16 costs several tokens, the curves bend down early: that is why a drafter that wins on a
GPU can lose here. A lane of N streams is its batch: every stream's acceptance and K, its
speedup over the plain batch, its curve priced at N (K+1 tokens a stream against one).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)
from superqt import QElidingLabel

from ..board.palette import DARK, Theme
from ..engines.cost.step_cost import break_even_acceptance, theoretical_speedup
from .plot_style import TEXT_PT, make_plot, theme_plot

K_LIMIT = 32
K_VIEW = 16  # K shown at first: on a CPU the curves have peaked by then
TOOLTIP = ("Expected tokens per step (Leviathan et al.) at each lane's measured acceptance,\n"
           "over the cost of verifying K+1 tokens on this machine (its cost profile) and of\n"
           "drafting; the dot is where the lane runs (a lane of N streams: its batch, priced\n"
           "at N). Dashed: the what-if curve below.")


def theory_curve(alpha: float, relative: Sequence[float] | None, k_max: int = K_LIMIT,
                 draft_cost: float = 0.0) -> np.ndarray:
    """Speedup for K = 0..k_max; relative[n-1] is the cost of n tokens over one token;
    draft_cost is one drafted token's cost over one target token's."""
    if relative:
        def verify(n: int) -> float:
            return float(relative[min(n, len(relative)) - 1])
    else:
        verify = None
    return np.array([theoretical_speedup(alpha, k, verify, draft_cost)
                     for k in range(k_max + 1)])


def break_even_alpha(k: int, relative: Sequence[float] | None, draft_cost: float = 0.0,
                     ) -> float | None:
    """The acceptance rate at which draft length k just matches plain decoding (None: it
    never does, even if every guess holds)."""
    verify = float(relative[min(k + 1, len(relative)) - 1]) if relative else 1.0
    return break_even_acceptance(k, verify + k * draft_cost)


class CostCurve(QWidget):
    """One plot: a theoretical curve and a live dot per lane, and a what-if curve whose
    acceptance and draft cost the person sets (or takes from a lane)."""

    profileRequested = Signal()  # "profile this machine" was clicked

    def __init__(self, theme: Theme = DARK, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plot = make_plot("Theoretical speedup by K (dot: each lane)", "K", "× plain",
                              whole_x=True)
        # K's axis is fixed, not fitted to what is drawn: without a profile only the dots are
        # drawn, and an auto range would stretch K from 0 to 1 around them.
        self.plot.setXRange(0, K_VIEW, padding=0.02)
        self.plot.getPlotItem().getViewBox().setLimits(xMin=-0.5, xMax=K_LIMIT + 0.5)
        self.plot.addItem(pg.InfiniteLine(pos=1.0, angle=0, label="break-even",
                                          labelOpts={"position": 0.8}))
        self.plot.setToolTip(TOOLTIP)
        self._relative: list[float] | None = None
        self._profiled = True  # False: no profile yet, nothing is drawn
        self._lanes: dict[str, dict] = {}
        self._items: dict[str, tuple[pg.PlotDataItem, pg.ScatterPlotItem]] = {}
        self.what_if = self.plot.plot(name="what if")
        self.what_if.setZValue(-1)
        self.profile_button = QPushButton("Profile this machine", visible=False)
        self.profile_button.setToolTip("Measure what verifying 1..32 tokens costs here (the "
                                       "target's cost profile); a minute or two, once")
        self.profile_button.clicked.connect(self.profileRequested)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.plot, 1)
        layout.addLayout(self._what_if_row())
        self.set_theme(theme)

    def _what_if_row(self) -> QHBoxLayout:
        # Leviathan et al.'s symbols, spelled out in the tooltips: the row must stay narrow
        # enough for half a small window.
        self.alpha_box = QDoubleSpinBox(minimum=0.0, maximum=0.99, singleStep=0.05, value=0.7,
                                        decimals=2, prefix="α ")
        self.alpha_box.setToolTip("What if: the acceptance rate α, the chance that a guessed "
                                  "token is accepted")
        self.draft_box = QDoubleSpinBox(minimum=0.0, maximum=2.0, singleStep=0.05, value=0.0,
                                        decimals=2, prefix="c ", suffix="×")
        self.draft_box.setToolTip("What if: the draft's cost c, drafting one token over one "
                                  "plain step of the target (0 for prompt lookup; about "
                                  "0.3-0.7 for a small draft model on a CPU)")
        self.from_lane = QComboBox()
        self.from_lane.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.from_lane.setMinimumContentsLength(5)
        self.from_lane.addItem("α of a lane…", None)
        self.from_lane.setToolTip("Take a lane's live acceptance as α")
        self.from_lane.activated.connect(self._take_lane)
        self.verdict = QElidingLabel()  # ends in "…" where cut; the whole verdict in its tip
        self.verdict.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        for box in (self.alpha_box, self.draft_box):
            box.valueChanged.connect(self._draw_what_if)
        self._controls = (QLabel("what if"), self.alpha_box, self.draft_box, self.from_lane)
        row = QHBoxLayout()
        row.setContentsMargins(4, 0, 4, 0)
        for widget in (*self._controls, self.profile_button):
            row.addWidget(widget)
        row.addWidget(self.verdict, 1)
        return row

    def set_costs(self, relative: Sequence[float] | None, label: str = "",
                  profiled: bool = True) -> None:
        """Batch costs relative to one token (n = 1, 2, ...); None with `profiled` for free
        batches, None without it when this machine has no profile yet (nothing is drawn)."""
        self._relative = list(relative) if relative else None
        self._profiled = profiled or relative is not None
        where = label or ("batches free" if relative is None else "profiled batch costs")
        # What prices the curves goes under K: in the title it was cut off at a third of a
        # 1400-pixel window (the dots are where lanes run).
        self.plot.setTitle("Theoretical speedup by K" if self._profiled
                           else "Speedup by K: no profile yet")
        self.plot.setLabel("bottom", f"K ({where})" if self._profiled else "K")
        note = batch_note(self._relative)
        self.plot.setToolTip(f"{TOOLTIP}\n{note}" if note else TOOLTIP)
        self.profile_button.setVisible(not self._profiled)
        for widget in self._controls:  # nothing to ask "what if" of without a profile
            widget.setVisible(self._profiled)
        for lane_id in self._lanes:
            self._draw(lane_id)
        self._draw_what_if()

    def set_lane(self, lane_id: str, label: str, colour: str, acceptance: float | None,
                 k: float, speedup: float | None, relative: Sequence[float] | None = None,
                 streams: int = 1) -> None:
        """A lane's curve and dot. A lane of `streams` > 1: its curve priced by `relative`
        (a pass of n tokens a stream over one a stream, at its N; None: no curve)."""
        previous = self._lanes.get(lane_id)
        self._lanes[lane_id] = {"label": label, "colour": colour, "alpha": acceptance,
                                "k": k, "speedup": speedup, "streams": streams,
                                "relative": relative}
        self._list_lane(lane_id, label, acceptance)
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
        index = self.from_lane.findData(lane_id)
        if index >= 0:
            self.from_lane.removeItem(index)
        items = self._items.pop(lane_id, None)
        if items:
            for item in items:
                self.plot.removeItem(item)

    def curve_data(self, lane_id: str) -> tuple[np.ndarray, np.ndarray]:
        """The whole curve, also where it runs beyond K's axis (drawing clips to the view)."""
        return self._items[lane_id][0].getOriginalDataset()

    def dot_data(self, lane_id: str) -> tuple[np.ndarray, np.ndarray]:
        return self._items[lane_id][1].getData()

    def set_theme(self, theme: Theme, points: int = TEXT_PT) -> None:
        theme_plot(self.plot, theme, points)
        self.what_if.setPen(pg.mkPen(theme.foreground, width=2, style=Qt.PenStyle.DashLine))

    def what_if_data(self) -> tuple[np.ndarray, np.ndarray]:
        return self.what_if.getData()

    def _list_lane(self, lane_id: str, label: str, acceptance: float | None) -> None:
        """Keep the lane in the "from a lane" list, with its acceptance so far."""
        text = f"{label}: {'-' if acceptance is None else f'{acceptance:.0%}'}"
        index = self.from_lane.findData(lane_id)
        if index < 0:
            self.from_lane.addItem(text, lane_id)
        elif self.from_lane.itemText(index) != text:
            self.from_lane.setItemText(index, text)

    def _take_lane(self, index: int) -> None:
        lane = self._lanes.get(self.from_lane.itemData(index))
        if lane is not None and lane["alpha"] is not None:
            self.alpha_box.setValue(min(lane["alpha"], self.alpha_box.maximum()))
        self.from_lane.setCurrentIndex(0)

    def _draw_what_if(self) -> None:
        if not self._profiled:
            self.what_if.setData([], [])
            self.verdict.setText("")
            return
        alpha, cost = self.alpha_box.value(), self.draft_box.value()
        ys = theory_curve(alpha, self._relative, K_LIMIT, cost)
        self.what_if.setData(np.arange(len(ys)), ys)
        self.verdict.setText(what_if_verdict(ys, self._relative, cost))
        self.verdict.setToolTip(self.verdict.text())

    def _draw(self, lane_id: str) -> None:
        lane, (curve, dot) = self._lanes[lane_id], self._items[lane_id]
        batch = lane["streams"] > 1
        relative = lane["relative"] if batch else self._relative
        if lane["alpha"] is None or not self._profiled or (batch and relative is None):
            curve.setData([], [])
        else:
            ys = theory_curve(lane["alpha"], relative)
            curve.setData(np.arange(len(ys)), ys)
        if lane["speedup"] is None:
            dot.setData([], [])
        else:
            dot.setData([lane["k"]], [lane["speedup"]])
            self._keep_in_view(lane["k"])

    def _keep_in_view(self, k: float) -> None:
        """Widen K's axis to show a lane run at a K beyond it (never narrow it)."""
        low, high = self.plot.getPlotItem().getViewBox().viewRange()[0]
        if k > high - 0.5:
            self.plot.setXRange(low, min(k + 1, K_LIMIT), padding=0.02)


def what_if_verdict(speedups: np.ndarray, relative: Sequence[float] | None,
                    draft_cost: float) -> str:
    """The best K of a what-if curve and what acceptance it needs to pay at all."""
    best = int(np.argmax(speedups))
    if best == 0 or speedups[best] <= 1.0:
        even = break_even_alpha(1, relative, draft_cost)
        need = "never" if even is None else f"needs acceptance ≥ {even:.2f} at K=1"
        return f"plain decoding is faster ({need})"
    even = break_even_alpha(best, relative, draft_cost)
    return (f"best K={best}: {speedups[best]:.2f}×; K={best} breaks even at acceptance "
            f"{even:.2f}")


def batch_note(relative: Sequence[float] | None, k_max: int = K_VIEW) -> str:
    """One sentence on what verification costs here, from the profile's relative costs
    (relative[n-1]: n tokens over one): 2, 4 and 8 tokens, the dearest step from one K to
    the next, and a K that costs less than a smaller K where there is one (the largest such
    dip). llama.cpp's kernels take rows in blocks, so these steps are uneven. Empty for free
    batches."""
    if not relative or len(relative) < 2:
        return ""
    rel = [float(r) for r in relative[: k_max + 1]]
    shown = [n for n in (2, 4, 8) if n <= len(rel)]
    note = (f"Here verifying {_listed([str(n) for n in shown])} tokens "
            f"(K = {', '.join(str(n - 1) for n in shown)}) costs "
            f"{_listed([f'{rel[n - 1]:.2f}x' for n in shown])} one token")
    n = max(range(2, len(rel) + 1), key=lambda i: rel[i - 1] - rel[i - 2])
    note += f"; the dearest step is K = {n - 2} to {n - 1} (+{rel[n - 1] - rel[n - 2]:.2f}x)"
    dip = None  # (how much less, n tokens, the dearer smaller batch)
    for n in range(3, len(rel) + 1):
        m = max(range(2, n), key=lambda i: rel[i - 1])
        drop = rel[m - 1] - rel[n - 1]
        if drop >= 0.01 and (dip is None or drop > dip[0]):
            dip = (drop, n, m)
    if dip:
        _, n, m = dip
        note += (f", and K = {n - 1} costs less than K = {m - 1} "
                 f"({rel[n - 1]:.2f}x against {rel[m - 1]:.2f}x)")
    return textwrap.fill(note + ".", 85)


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
