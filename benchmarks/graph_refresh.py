"""What one refresh of the window's six graphs costs the GUI thread, with no model loaded.

Builds the graphs (offscreen works) with three lanes of synthetic steps (plain decoding and
two speculating lanes, ~2000 steps each), then repeats: append a few steps to every lane,
`refresh()`, and run the event loop until the plots have painted. Reports per refresh:

- paints of each plot (an event filter on each plot's viewport; the goal is 1);
- GUI-thread CPU time (time.thread_time, so other processes on a loaded machine count
  little) of `refresh()` itself and of the event processing after it (the paints);
  median and max over the refreshes;
- the longest block of the GUI thread: the longest gap of a 1 ms heartbeat timer, wall clock
  (the refresh and the paints that follow it in one turn of the event loop; on a loaded
  machine this one counts other processes too).

    QT_QPA_PLATFORM=offscreen python benchmarks/graph_refresh.py [--steps 2000] [--refreshes 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtWidgets import QApplication

from specviz.board.lanes_model import BoardModel
from specviz.board.palette import DARK
from specviz.engines.events import (
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
from specviz.widgets.graphs import LaneGraphs

QUIET_MS = 30  # the event loop has settled when no plot painted for this long


def synthetic_run(steps: int, k: int, accept: float, step_ms: float, seed: int) -> list:
    """Step events of a lane proposing `k` tokens a step (0: plain decoding)."""
    rng = np.random.default_rng(seed)
    events, totals = [], Totals(0, 0, 0, 0, 0.0, 0.0, 0.0)
    timing = Timing(0.0, step_ms, 0.0)
    for i in range(steps):
        kept = rng.random(k) < accept
        n_acc = k if kept.all() else int(np.argmin(kept))  # the prefix the target kept
        totals = totals.after_step(k, n_acc, timing)
        drafts = tuple(ProposedToken(id=j, text="x", source="draft", accepted=j < n_acc)
                       for j in range(k))
        kind = TARGET_PLAIN if not k else TARGET_BONUS if n_acc == k else TARGET_CORRECTION
        events.append(StepEvent(
            step=i, oracle="draft" if k else "none", k=max(k, 1), position=totals.tokens,
            proposed=drafts, target=TargetToken(0, "t", kind, 0.9, 1.0), text="",
            timing=timing, totals=totals))
    return events


class PaintCounter(QObject):
    def __init__(self, widgets: dict) -> None:
        super().__init__()
        self._names = {widget: name for name, widget in widgets.items()}
        self.counts = dict.fromkeys(widgets, 0)
        self.last = time.perf_counter()
        for widget in widgets.values():
            widget.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:
        if event.type() == QEvent.Type.Paint and watched in self._names:
            self.counts[self._names[watched]] += 1
            self.last = time.perf_counter()
        return False


class Heartbeat(QObject):
    """A 1 ms timer; its longest gap is the longest time the GUI thread could not answer."""

    def __init__(self) -> None:
        super().__init__()
        self.ticks: list[float] = []
        self._timer = QTimer(self, interval=1, timerType=Qt.TimerType.PreciseTimer)
        self._timer.timeout.connect(lambda: self.ticks.append(time.perf_counter()))
        self._timer.start()

    def longest_gap_ms(self) -> float:
        return max((b - a for a, b in zip(self.ticks, self.ticks[1:])), default=0.0) * 1000


def settle(app: QApplication, counter: PaintCounter) -> float:
    """Process events until no paint for QUIET_MS; the GUI thread's CPU seconds spent."""
    cpu, start = time.thread_time(), time.perf_counter()
    counter.last = start
    while time.perf_counter() - counter.last < QUIET_MS / 1000 and time.perf_counter() - start < 2:
        app.processEvents()
        time.sleep(0.001)
    return time.thread_time() - cpu


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2000, help="steps per lane before measuring")
    p.add_argument("--refreshes", type=int, default=30)
    p.add_argument("--per-refresh", type=int, default=3, help="steps per lane per refresh")
    p.add_argument("--size", type=int, nargs=2, default=(1600, 650), metavar=("W", "H"))
    args = p.parse_args()
    app = QApplication.instance() or QApplication(sys.argv)
    model = BoardModel()
    graphs = LaneGraphs(model, DARK)
    graphs.resize(*args.size)
    graphs.show()
    total = args.steps + args.refreshes * args.per_refresh
    streams = {"plain": synthetic_run(total, 0, 0.0, 40.0, 1),
               "lookup": synthetic_run(total, 4, 0.6, 45.0, 2),
               "draft": synthetic_run(total, 4, 0.8, 70.0, 3)}
    for i, lane in enumerate(streams):
        model.add(LaneSpec("none" if lane == "plain" else "draft"), lane)  # plain: the baseline
        graphs.show_lane(lane, lane, DARK.lanes[i])
    graphs.set_costs([1.0, 1.6, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5])
    for lane, events in streams.items():
        model.append(lane, events[: args.steps])
    graphs.refresh()
    counter = PaintCounter({name: plot.viewport() for name, plot in graphs.plots.items()})
    settle(app, counter)
    counter.counts = dict.fromkeys(counter.counts, 0)
    refresh_ms, paint_ms, blocks = [], [], []
    heartbeat = Heartbeat()
    for r in range(args.refreshes):
        heartbeat.ticks = []
        settle(app, counter)  # a few heartbeats before the refresh
        start = args.steps + r * args.per_refresh
        for lane, events in streams.items():
            model.append(lane, events[start: start + args.per_refresh])
        cpu = time.thread_time()
        graphs.refresh()
        refresh_ms.append((time.thread_time() - cpu) * 1000)
        paint_ms.append(settle(app, counter) * 1000)
        blocks.append(heartbeat.longest_gap_ms())
    both = [a + b for a, b in zip(refresh_ms, paint_ms, strict=True)]
    print(f"3 lanes, {args.steps}+ steps each, {args.refreshes} refreshes, graphs "
          f"{args.size[0]}x{args.size[1]}, platform {app.platformName()}")
    print("paints per refresh: " + ", ".join(
        f"{name} {count / args.refreshes:.2f}" for name, count in counter.counts.items()))
    for label, values in (("refresh()", refresh_ms), ("paints after it", paint_ms),
                          ("together", both)):
        print(f"GUI-thread CPU ms, {label}: median {statistics.median(values):.1f}, "
              f"max {max(values):.1f}")
    print(f"longest GUI-thread block (1 ms heartbeat, wall) per refresh: median "
          f"{statistics.median(blocks):.1f} ms, max {max(blocks):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
