"""The Streams dock: speedup against streams (measured dots over the predicted curve) and the
anatomy of a batched step, beside the Step dock; in front when a race of N streams starts."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDockWidget, QMainWindow, QScrollArea, QSplitter

from ...board.batch_anatomy import batch_rows
from ...board.palette import DARK, THEMES
from ...board.streams_race import StreamsRace
from ...widgets.batch_anatomy import BatchAnatomy
from ...widgets.streams_graph import StreamsGraph

SPLIT_UNIT = 100  # the splitter's shares, in pixels it scales to the dock's height


def latest_full(batches: list, n: int):
    """The latest step that held every stream (once streams end and leave the batch, its
    last steps hold few), else the latest."""
    return next((b for b in reversed(batches) if len(b.steps) == n), batches[-1])


class StreamsDock(QDockWidget):
    """Made by the window (an app.main_window.MainWindow, passed in)."""

    def __init__(self, window: QMainWindow, race: StreamsRace) -> None:
        super().__init__("Streams", window)
        self.setObjectName("dock-streams")
        self.race = race
        theme = THEMES.get(window.settings.theme(), DARK)
        self.graph = StreamsGraph(race, theme)
        self.anatomy = BatchAnatomy(theme)
        self.shown_step: tuple[str, int] | None = None  # a clicked step; None: the latest
        rows = QScrollArea(widgetResizable=True)  # 16 streams' rows scroll, the graph stays
        rows.setWidget(self.anatomy)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.graph)
        split.addWidget(rows)
        split.setSizes([3 * SPLIT_UNIT, 2 * SPLIT_UNIT])  # the rows get two fifths
        self.setWidget(split)
        window.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self)
        window.tabifyDockWidget(window.inspector_dock, self)
        window.inspector_dock.raise_()
        race.started.connect(self._on_started)

    def _on_started(self, lane_id: str) -> None:
        if lane_id in self.race.lanes:  # a race of N streams: its graph in front
            self.shown_step = None
            self.raise_()

    def refresh(self, colours: dict[str, str]) -> None:
        """Redrawn with the other graphs: the dots and curves, and the batched step shown."""
        self.graph.refresh(colours)
        self._show_batch()

    def show_step(self, lane_id: str, step: int) -> None:
        """The batched step in which the lane's followed stream took its step `step`."""
        if lane_id in self.race.lanes:
            self.shown_step = (lane_id, step)
            self._show_batch()

    def _show_batch(self) -> None:
        lane_id, index = self.shown_step or (self._speculating(), None)
        lane = self.race.lanes.get(lane_id) if lane_id else None
        if lane is None or not lane.batches:
            self.anatomy.show_rows(None)
            return
        batch = latest_full(lane.batches, lane.n) if index is None else next(
            (b for b in lane.batches for s, e in b.steps
             if s == lane.picked and e.step == index), lane.batches[-1])
        self.anatomy.show_rows(batch_rows(batch), lane.oracle)

    def _speculating(self) -> str | None:
        return next((lid for lid, lane in self.race.lanes.items() if not lane.plain), None)

    def set_theme(self, theme) -> None:
        self.graph.set_theme(theme)
        self.anatomy.set_theme(theme)
