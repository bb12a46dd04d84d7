"""Replaying traces: each lane's events at their recorded pace, slower, or step by step.

The clock is compute time: an event is due when the replay clock passes its lane's running
`totals.compute_ms` (a batch step of N streams, when it passes the batch's compute so far),
so lanes race exactly as their own compute time says, whatever the machine doing the replay.
Figures come from the events alone, so a replay always draws the same numbers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from ...engines import events as ev
from ...engines.batch_events import BatchEvent, BatchStep, StreamsSummary
from ...engines.errors import TraceError
from ...engines.trace import read_trace

MIN_SPEED, MAX_SPEED = 0.1, 1.0
Record = ev.Event | BatchEvent
TICK_MS = 16


@dataclass
class LoadedTrace:
    """A trace as far as it could be read; `problem` is the message for its lane."""

    path: Path
    header: dict = field(default_factory=dict)
    events: list[ev.Event] = field(default_factory=list)
    problem: str | None = None
    records: list[Record] = field(default_factory=list)  # every record, in the order written

    @property
    def batched(self) -> bool:
        return any(isinstance(r, BatchStep | StreamsSummary) for r in self.records)


def load_trace(path: str | Path) -> LoadedTrace:
    try:
        trace = read_trace(path)
    except TraceError as exc:  # unreadable header: nothing to play, only the message
        return LoadedTrace(Path(path), problem=str(exc))
    problem = str(trace.problem) if trace.problem else None
    return LoadedTrace(trace.path, trace.header, trace.events, problem, trace.records)


def due_times(records: list[Record]) -> list[float]:
    """When each record is due on the compute clock: an event at its totals' compute time, a
    batch step when the batch's compute reaches its end, the batch's summary with its last
    step (never before a record that came before it)."""
    due, batch_ms = [], 0.0
    for record in records:
        if isinstance(record, BatchStep):
            batch_ms += record.timing.total_ms
            at = batch_ms
        elif isinstance(record, StreamsSummary):
            at = batch_ms
        else:
            at = record.totals.compute_ms
        due.append(max(at, due[-1]) if due else at)
    return due


class ReplayPlayer(QObject):
    """Feeds lanes their events; the window draws what it is given."""

    advanced = Signal(str, list)  # lane id, events to append
    rewound = Signal(str, list)  # lane id, every event to show now (redraw from scratch)
    finished = Signal()

    def __init__(self, lanes: dict[str, list[Record]], speed: float = 1.0,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._events = lanes
        self._due = {lane: due_times(records) for lane, records in lanes.items()}
        self._shown = dict.fromkeys(lanes, 0)
        self._clock_ms = 0.0
        self._speed = 1.0
        self.set_speed(speed)
        self._last_tick = 0.0
        self._timer = QTimer(self, interval=TICK_MS)
        self._timer.timeout.connect(self._tick)

    @property
    def playing(self) -> bool:
        return self._timer.isActive()

    @property
    def done(self) -> bool:
        return all(self._shown[lane] == len(events) for lane, events in self._events.items())

    def set_speed(self, speed: float) -> None:
        self._speed = min(MAX_SPEED, max(MIN_SPEED, float(speed)))

    def play(self) -> None:
        if self.done:
            return
        self._last_tick = time.monotonic()
        self._timer.start()

    def pause(self) -> None:
        self._timer.stop()

    @property
    def end_ms(self) -> float:
        """The compute time of the last lane's last event: when the race is over."""
        return max((due[-1] for due in self._due.values() if due), default=0.0)

    def advance_to(self, clock_ms: float) -> None:
        """Show what is due by this compute time (a video frame's moment); never goes back."""
        self._clock_ms = max(self._clock_ms, clock_ms)
        self._release()

    def finish(self) -> None:
        """Show everything now."""
        self._clock_ms = float("inf")
        self._release()

    def step(self, delta: int) -> None:
        """Pause, then move every lane one verification step forward (+1) or back (-1)."""
        self.pause()
        for lane, events in self._events.items():
            shown = self._shown[lane]
            if delta > 0 and shown < len(events):
                self._show(lane, _after_next_step(events, shown))
            elif delta < 0 and shown > 0:
                self._shown[lane] = _before_last_step(events, shown)
                self.rewound.emit(lane, events[: self._shown[lane]])
        self._clock_ms = max((self._due[lane][n - 1] for lane, n in self._shown.items() if n),
                             default=0.0)

    def _tick(self) -> None:
        now = time.monotonic()
        self._clock_ms += (now - self._last_tick) * 1000.0 * self._speed
        self._last_tick = now
        self._release()

    def _release(self) -> None:
        for lane, events in self._events.items():
            end, due = self._shown[lane], self._due[lane]
            while end < len(events) and due[end] <= self._clock_ms:
                end += 1
            self._show(lane, end)
        if self.done:
            self.pause()
            self.finished.emit()

    def _show(self, lane: str, end: int) -> None:
        start = self._shown[lane]
        if end > start:
            self._shown[lane] = end
            self.advanced.emit(lane, self._events[lane][start:end])


def _after_next_step(events: list[Record], shown: int) -> int:
    """How many events to show after one more step: a run's summary comes with its last step."""
    end = shown + 1
    if end < len(events) and _is_summary(events[end]):
        end += 1
    return end


def _before_last_step(events: list[Record], shown: int) -> int:
    end = shown - 1  # drops events[end]; a summary goes together with its last step
    if end > 0 and _is_summary(events[end]):
        end -= 1
    return end


def _is_summary(record: Record) -> bool:
    return isinstance(record, ev.SummaryEvent | StreamsSummary)
