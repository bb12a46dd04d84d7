"""The lanes side by side, and the one buffer through which every event reaches the screen.

Events arrive (from engine threads or the replay clock) faster than a screen can show them.
`push` only appends to a list; a ~60 Hz timer drains it into the token views, and the graphs
(the costly repaint) are redrawn at most five times a second, so the GUI stays responsive
whatever the step rate.
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QSplitter, QWidget

from ...board.lanes_model import BoardModel
from ...board.palette import Theme
from ...board.streams_race import StreamsRace
from ...engines import events as ev
from ...engines.batch_events import BatchStep, StreamsSummary
from ...engines.host.run_spec import LaneSpec
from ...widgets.graphs import LaneGraphs
from ..state.run_setup import MAX_LANES
from .lane_widget import LaneWidget

DRAIN_MS = 16
# The graphs take tens of milliseconds to repaint on a small CPU; redrawn at most this often,
# they keep the GUI thread free for the token views (measured: benchmarks/gui_responsiveness.py).
GRAPHS_S = 0.2


class LaneBoard(QWidget):
    hovered = Signal(object, object)  # LaneWidget, Span or None (None also on leaving)
    clicked = Signal(object, int)  # LaneWidget, step
    kChanged = Signal(str, int)
    autoChanged = Signal(str, bool, int)
    knobChanged = Signal(str, str, int)
    changed = Signal()  # lanes added, removed or reconfigured
    refreshed = Signal()  # the graphs were redrawn (at most every GRAPHS_S)
    streamFollowed = Signal(int, str)  # a stream (0-based) a lane follows now, its prompt

    def __init__(self, model: BoardModel, graphs: LaneGraphs, theme: Theme,
                 recent_models: list[str], parent: QWidget | None = None,
                 streams: StreamsRace | None = None) -> None:
        super().__init__(parent)
        self.model = model  # what the lanes are and have received (the graphs observe it)
        self.streams = streams or StreamsRace()  # lanes of N streams: the stream each shows
        self.graphs = graphs
        self.theme = theme
        self.recent_models = recent_models
        self.lanes: dict[str, LaneWidget] = {}  # their widgets, by the same ids
        self._pending: list[tuple[str, ev.Event]] = []
        self._splitter = QSplitter(Qt.Orientation.Horizontal)
        self._splitter.setChildrenCollapsible(False)
        QHBoxLayout(self).addWidget(self._splitter)
        self.layout().setContentsMargins(0, 0, 0, 0)
        self._timer = QTimer(self, interval=DRAIN_MS)
        self._timer.timeout.connect(self._tick)
        self._graphs_at = 0.0  # when the graphs were last redrawn (monotonic seconds)
        self._graphs_stale = False
        # Redraws the graphs, no sooner than GRAPHS_S after the last redraw.
        self._graphs_later = QTimer(self, singleShot=True)
        self._graphs_later.timeout.connect(self._refresh_if_stale)

    # ------------------------------------------------------------ lanes

    def add_lane(self, config: LaneSpec) -> LaneWidget | None:
        if len(self.lanes) >= MAX_LANES:
            return None
        lane_id = self.model.add(config).lane_id
        colour = self._free_colour()
        lane = LaneWidget(lane_id, config, self.theme, colour, self.recent_models)
        self.lanes[lane_id] = lane
        self._splitter.addWidget(lane)
        self.graphs.show_lane(lane_id, config.oracle, colour)
        lane.view.tokenHovered.connect(lambda _s, _t, span: self.hovered.emit(lane, span))
        lane.view.tokenClicked.connect(lambda step: self.clicked.emit(lane, step))
        lane.kChanged.connect(self.kChanged)
        lane.autoChanged.connect(self.autoChanged)
        lane.knobChanged.connect(self.knobChanged)
        lane.oracleChanged.connect(self._relabel)
        lane.configChanged.connect(lambda: self._reconfigured(lane_id))
        lane.removeRequested.connect(self.remove_lane)
        lane.streamPicked.connect(self.pick_stream)
        self._show_figures()
        self.changed.emit()
        return lane

    def remove_lane(self, lane_id: str) -> None:
        lane = self.lanes.pop(lane_id)
        self.model.remove(lane_id)  # the graphs forget it
        self.streams.remove(lane_id)
        lane.hide()
        lane.setParent(None)
        lane.deleteLater()
        self._pending = [(lid, e) for lid, e in self._pending if lid != lane_id]
        self._show_figures()
        self.changed.emit()

    def remove_all(self) -> None:
        for lane_id in list(self.lanes):
            self.remove_lane(lane_id)

    def configs(self) -> list[LaneSpec]:
        return [state.config for state in self.model.lanes.values()]

    def state(self, lane_id: str):
        return self.model.lanes[lane_id]

    def set_replay(self, lane_id: str, name: str, header: dict) -> None:
        """A lane that plays a trace: its recorded oracle and budget, no controls."""
        state = self.model.lanes[lane_id]
        state.replay_oracle = header.get("oracle", "?")
        state.max_tokens = header.get("settings", {}).get("max_tokens")
        self.lanes[lane_id].set_replay(name, header)
        self.read_header(lane_id, header)

    def read_header(self, lane_id: str, header: dict) -> None:
        """A lane's trace header, live or replayed: a plain server becomes the baseline."""
        self.model.read_header(lane_id, header)
        self._show_figures()
        if header.get("server") is not None:
            self.lanes[lane_id].show_server(header["server"])

    def update_baseline(self) -> None:
        """Speedups divide by the first plain-decoding lane."""
        self.model.update_baseline()
        self._show_figures()

    def _reconfigured(self, lane_id: str) -> None:
        lane = self.lanes.get(lane_id)
        if lane is not None:
            self.model.reconfigure(lane_id, lane.config())
        self.changed.emit()

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        for index, lane in enumerate(self.lanes.values()):
            colour = theme.lane_colour(index)
            lane.set_theme(theme, colour)
            self.graphs.set_lane_colour(lane.lane_id, colour)
        self.graphs.set_theme(theme)

    # ------------------------------------------------------------ a race of N streams

    def start_streams(self, lane_id: str, header: dict) -> None:
        """A lane's run began: a batch of streams shows its picker, one stream hides it."""
        lane = self.streams.start(lane_id, header)
        self.lanes[lane_id].streams.show_streams(lane)
        if lane is not None:  # it may follow a stream other than 1 (a pick kept)
            self._follow_prompt(lane_id)
            if lane.picked:  # a race starts on the person's prompt: only another is said
                self.streamFollowed.emit(lane.picked, lane.prompts[lane.picked])
        self._show_figures()  # its header's speedup: this race's batch's, or a lane's again

    def push_batch(self, lane_id: str, batch) -> None:
        """A batch event: the stream the lane follows reaches its view as a lane's steps. The
        Streams dock redraws with the graphs even when that stream has left the batch and the
        others go on."""
        self.push_many(lane_id, self.streams.take(lane_id, batch))
        self._graphs_stale = True
        if not self._timer.isActive():
            self._timer.start()

    def pick_stream(self, lane_id: str, stream: int) -> None:
        """The lane's text, figures and graphs follow `stream` from its first step."""
        events = self.streams.pick(lane_id, stream)
        self.rewind(lane_id, events)
        self._follow_prompt(lane_id)
        self.lanes[lane_id].streams.update_figures(self.streams.lanes[lane_id])
        self.streamFollowed.emit(stream, self.lanes[lane_id].user_prompt)

    def _follow_prompt(self, lane_id: str) -> None:
        """The lane's prompt is the followed stream's: its copied tokens' spans index it."""
        lane, batch = self.lanes[lane_id], self.streams.lanes[lane_id]
        lane.prompt_text = batch.prompt_texts[batch.picked]
        lane.user_prompt = batch.prompts[batch.picked]

    # ------------------------------------------------------------ events

    def push(self, lane_id: str, event: ev.Event) -> None:
        self._pending.append((lane_id, event))
        if not self._timer.isActive():
            self._timer.start()

    def push_many(self, lane_id: str, events: list[ev.Event]) -> None:
        for event in events:
            self.push(lane_id, event)

    def push_records(self, lane_id: str, records: list) -> None:
        """A replayed trace's records: a batch's to its streams, a single run's events."""
        for record in records:
            if isinstance(record, BatchStep | StreamsSummary):
                self.push_batch(lane_id, record)
            else:
                self.push(lane_id, record)

    def rewind_records(self, lane_id: str, records: list) -> None:
        """Redraw a replayed lane from scratch with `records` (stepping back): a batch's from
        its first step again, the stream it follows kept."""
        self.streams.restart(lane_id)
        self.rewind(lane_id, [])
        self.push_records(lane_id, records)

    def rewind(self, lane_id: str, events: list[ev.Event]) -> None:
        """Redraw a lane from scratch with `events` (a replay stepping back)."""
        self._pending = [(lid, e) for lid, e in self._pending if lid != lane_id]
        self.lanes[lane_id].clear()
        self.model.clear(lane_id)  # the graphs forget its K markers
        self._show_figures()
        self._graphs_stale = True  # drawn again even when no step comes back (to the start)
        self._schedule_graphs()
        self.push_many(lane_id, events)

    def reset(self) -> None:
        """Empty every lane and graph for a new run. A lane's batch of streams goes too: it
        comes back with the lane's start, and a lane that fails to start keeps none of the
        race before's (its picker, its batch's speedup, the baseline it was)."""
        self._pending.clear()
        self.model.clear()
        self.streams.end_race()
        for lane in self.lanes.values():
            lane.clear()
            lane.streams.show_streams(None)
        self._show_figures()

    def drain(self) -> None:
        """Draw everything pending now, graphs included."""
        self._append_pending()
        self._refresh_graphs(staggered=False)

    def _tick(self) -> None:
        if self._pending:
            self._append_pending()
        else:
            self._timer.stop()
        self._schedule_graphs()

    def _schedule_graphs(self) -> None:
        """Redraw the graphs GRAPHS_S after the last redraw if anything came since: one rule
        during a burst of steps and after it (steps arrive in bursts many times a second, so
        drawing at every burst's end would redraw far more often)."""
        if self._graphs_stale and not self._graphs_later.isActive():
            wait = GRAPHS_S - (time.monotonic() - self._graphs_at)
            self._graphs_later.start(max(0, round(wait * 1000)))

    def _append_pending(self) -> None:
        pending, self._pending = self._pending, []
        by_lane: dict[str, list[ev.Event]] = {}
        for lane_id, event in pending:
            lane = self.lanes.get(lane_id)
            if lane is not None:
                lane.append(event)
                by_lane.setdefault(lane_id, []).append(event)
        for lane_id, events in by_lane.items():
            self.model.append(lane_id, events)
        self._graphs_stale = self._graphs_stale or bool(pending)

    def _refresh_if_stale(self) -> None:
        if self._graphs_stale:
            self._refresh_graphs()

    def _refresh_graphs(self, staggered: bool = True) -> None:
        self._graphs_later.stop()
        self.graphs.refresh(staggered)
        self._show_figures()
        self._graphs_at = time.monotonic()
        self._graphs_stale = False
        self.refreshed.emit()

    def _show_figures(self) -> None:
        for lane_id, lane in self.lanes.items():
            figures = self.model.figures(lane_id)
            declined = self.model.declined(lane_id)
            if declined is not None:
                figures["declined"] = declined
            batch = self.streams.lanes.get(lane_id)
            if batch is not None:  # the header's speedup is the batch's (lane_widget)
                figures.update(streams=batch.n, batch_speedup=self.streams.speedup(lane_id))
            lane.set_figures(figures)
            if batch is not None:
                lane.streams.update_figures(batch)

    def _free_colour(self) -> str:
        used = {lane.colour for lane in self.lanes.values()}
        free = [c for c in self.theme.lanes if c not in used]
        return free[0] if free else self.theme.lane_colour(len(self.lanes))

    def _relabel(self, lane_id: str) -> None:
        """The graphs name lanes by oracle; a new oracle is a new lane to them."""
        lane = self.lanes.get(lane_id)
        if lane is not None:
            # The steps it holds were another oracle's: they go with it.
            self._pending = [(lid, e) for lid, e in self._pending if lid != lane_id]
            lane.clear()
            self.model.clear(lane_id)
            self.model.reconfigure(lane_id, lane.config())
            self.graphs.show_lane(lane_id, lane.oracle_name(), lane.colour)
            self._show_figures()
