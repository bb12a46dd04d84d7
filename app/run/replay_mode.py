"""Traces played back in the lanes, beside the live runner: which traces, the player, and
whether the board shows replayed lanes or the person's own set-up."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal

from ...board.one_prompt import check_one_prompt
from ...engines.host.run_spec import LaneSpec
from ..state.run_setup import MAX_LANES
from ..views.board import LaneBoard
from .trace_player import ReplayPlayer, load_trace


class ReplayControl(QObject):
    changed = Signal()  # opened, played, paused, finished or left: the window's actions follow

    def __init__(self, board: LaneBoard, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.board = board
        self.player: ReplayPlayer | None = None
        self.replaying = False  # the lanes show traces, not the person's set-up

    @property
    def playing(self) -> bool:
        return self.player is not None and self.player.playing

    def open(self, paths: list[Path], speed: float) -> ReplayPlayer:
        """One lane per trace (as much as is readable; a problem shows in its lane), playing.
        Traces of different prompts are refused (a SpecvizError), the lanes left as they were."""
        traces = [load_trace(p) for p in paths[:MAX_LANES]]
        check_one_prompt(traces)
        self.close_player()
        self.replaying = True
        self.board.remove_all()
        lanes = {}
        for trace in traces:
            header = _with_auto_k(trace)
            k = header.get("settings", {}).get("k", 1)
            lane = self.board.add_lane(LaneSpec(header.get("oracle", "none"), k))
            self.board.set_replay(lane.lane_id, trace.path.name, header)
            lane.trace_path = trace.path
            if trace.problem:
                lane.show_message(trace.problem)
            if trace.batched:  # a race of N streams: its picker and the Streams dock
                self.board.start_streams(lane.lane_id, header)
                lanes[lane.lane_id] = trace.records
            else:
                lanes[lane.lane_id] = trace.events
        self.board.update_baseline()
        self.player = ReplayPlayer(lanes, speed, self)
        self.player.advanced.connect(self.board.push_records)
        self.player.rewound.connect(self.board.rewind_records)
        self.player.finished.connect(self.changed)
        self.player.play()
        self.changed.emit()
        return self.player

    def leave(self) -> None:
        """No more replay; the window puts the person's lanes back."""
        self.close_player()
        self.board.remove_all()
        self.replaying = False
        self.changed.emit()

    def close_player(self) -> None:
        if self.player is not None:
            self.player.pause()
            self.player.deleteLater()
            self.player = None

    def set_speed(self, speed: float) -> None:
        if self.player is not None:
            self.player.set_speed(speed)

    def toggle(self, play: bool) -> None:
        if self.player is not None:
            (self.player.play if play else self.player.pause)()
        self.changed.emit()

    def pause(self) -> None:
        if self.player is not None:
            self.player.pause()
        self.changed.emit()

    def step(self, delta: int) -> None:
        if self.player is not None:
            self.player.step(delta)
            self.changed.emit()


def _with_auto_k(trace) -> dict:
    """The trace's header, saying whether K was auto (older traces say it only per step)."""
    settings = trace.header.get("settings", {})
    if "auto_k" in settings or not isinstance(settings, dict):
        return trace.header
    auto = any(getattr(e, "auto_k", False) for e in trace.events)
    return {**trace.header, "settings": {**settings, "auto_k": auto}}
