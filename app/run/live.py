"""A live run: asyncio on the Qt loop (qasync) orchestrates, an engine process computes.

The coroutine finds the models (offering to fetch missing registry models), sends the run
spec to the engine process of the run's device and waits for it to say the run is done. What
the engine says arrives as messages on the GUI thread: each lane's trace is written here, from
the events received, so that when the engine process dies everything received so far stays on
screen and on disk, each lane says what happened, and the next run starts a fresh process.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QWidget

from ...engines import events as ev
from ...engines import models
from ...engines.errors import SpecvizError
from ...engines.host import run_spec as rs
from ...engines.host.run_spec import RunRequest
from ...engines.loop.streams import BatchStep, StreamsSummary
from ...engines.trace import TraceWriter
from ..state.run_setup import new_trace_path
from ..state.server_keys import KeyFor, with_keys
from ..views.board import LaneBoard
from .engine_client import EngineClient, EngineLink
from .model_fetch import fetch
from .remote_engine import RemoteEngine, RemoteEngineClient

CLOSE_S = 2.0  # an idle engine process is given this long to end before it is killed


def models_on_disk(lane: rs.LaneSpec) -> list[str]:
    """The models a lane needs downloaded before it runs: its oracle's, or the draft a
    spawned llama-server loads (the server reads it, not the engine's pool)."""
    if lane.on_server:
        return [lane.inputs["draft"]] if lane.inputs.get("draft") else []
    return list(lane.models.values())


class LiveRunner(QObject):
    statusChanged = Signal(str, bool)  # message, busy
    finished = Signal()

    def __init__(self, board: LaneBoard, window: QWidget, interactive: bool = True,
                 remote: RemoteEngine | None = None, server_key: KeyFor | None = None) -> None:
        super().__init__(window)
        self.board = board
        self.window = window
        self.interactive = interactive  # may ask the person (fetching); not in `specviz shot`
        self.remote = remote  # engines on another machine (`specviz serve`), else here
        self.server_key = server_key or (lambda _origin: None)  # stored API keys
        self.running = False
        self.engines: dict[str, EngineLink] = {}  # one process per device, kept between runs
        self.engine: EngineLink | None = None  # the current run's
        self.stats: dict = {}  # the engine's last word on its models (loads, idle)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specviz-load")
        self.crash: str | None = None  # how the last run's engine died, if it did
        self._writers: dict[str, TraceWriter] = {}
        self._received: dict[str, list[ev.StepEvent]] = {}  # for a trace cut off by a crash
        self._running_said = False  # a streams race said "running" (its first batch came)
        self._ended: set[str] = set()  # lanes whose run is over (summary or error)
        self._lane_ids: list[str] = []
        self._stopping = False
        self._paused = False  # also holds a run that is still loading
        self._done: asyncio.Future | None = None

    def start(self, request: RunRequest) -> asyncio.Future:
        """Run every lane on the board; the task ends when all lanes have."""
        if self.running:
            raise RuntimeError("a run is already going")
        self.running, self._stopping, self._paused = True, False, False
        self.crash = None
        self._ended, self._writers = set(), {}  # `started` speaks of this run only
        return asyncio.ensure_future(self._run(request))

    def started(self, lane_id: str) -> bool:
        """Whether the engine has built this lane of the current run."""
        return lane_id in self._writers or lane_id in self._ended

    async def _run(self, request: RunRequest) -> None:
        lanes = dict(self.board.lanes)
        self.board.reset()
        for lane in lanes.values():
            lane.set_running(True)
        try:
            if await self._models_ready(request, lanes):
                await self._run_lanes(request, lanes)
        finally:
            self._close_traces()
            for lane in lanes.values():
                lane.set_running(False)
            self.running = False
            self.statusChanged.emit("stopped" if self._stopping else "ready", False)
            self.finished.emit()
            self.board.drain()  # the last events, already queued

    # ------------------------------------------------------------ controls

    def set_k(self, lane_id: str, k: int) -> None:
        if self.running and self.engine:
            self.engine.send("set_k", lane=lane_id, k=k)

    def set_auto(self, lane_id: str, on: bool, k: int) -> None:
        """Cost-aware K on or off for a running lane (off: back to the fixed `k`)."""
        if self.running and self.engine:
            self.engine.send("set_auto", lane=lane_id, on=on, k=k)

    def set_knob(self, lane_id: str, name: str, value: int) -> None:
        """Change an oracle setting of a running lane; a refusal comes back to the lane."""
        if self.running and self.engine:
            self.engine.send("set_knob", lane=lane_id, name=name, value=value)

    def pause(self, paused: bool) -> None:
        self._paused = paused
        if self.running and self.engine:
            self.engine.send("pause" if paused else "resume")

    def stop(self) -> None:
        self._stopping = True
        if self.running and self.engine:
            self.engine.send("stop")

    def shutdown(self, timeout: float) -> bool:
        """Stop everything and end the engine processes, at most `timeout` seconds."""
        self.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)
        done = all([engine.shutdown(timeout) for engine in self.engines.values()])
        self._close_traces()
        return done

    # ------------------------------------------------------------ steps

    async def _models_ready(self, request: RunRequest, lanes: dict) -> bool:
        """Registry models and Hub names that are not downloaded yet: fetch them, with a
        progress dialog that can cancel (SPECVIZ_NO_FETCH=1: not fetched, each lane then says
        how to)."""
        if not self.interactive or self.remote is not None or not models.fetch_allowed():
            return True  # a missing model is then each lane's error (a remote engine's own)
        wanted = [request.model.target, *(model for lane in lanes.values()
                                          for model in models_on_disk(lane.config()))]
        loop = asyncio.get_event_loop()
        self.statusChanged.emit("checking the models…", True)
        for name in await loop.run_in_executor(self._executor, models.missing, wanted):
            self.statusChanged.emit(f"fetching {name}…", True)
            try:
                if await fetch(self.window, name, self._executor) is None:
                    return False
            except SpecvizError as exc:
                self.statusChanged.emit(str(exc), False)
                return False
        return True

    async def _run_lanes(self, request: RunRequest, lanes: dict) -> None:
        if self._stopping or not lanes:
            return
        # Threads left automatic: the engine's llama.cpp follows the cores the rest of the
        # machine leaves free (its count beside the window, gui_threads(), at most).
        model = request.model
        configs, secrets = with_keys({lane_id: lane.config() for lane_id, lane in lanes.items()},
                                     self.server_key)
        spec = rs.RunSpec(replace(request, model=model), configs)
        try:
            engine = self.engine = self.engine_for(model.device or "auto")
        except SpecvizError as exc:
            for lane in lanes.values():
                lane.show_message(str(exc))
            return
        self._lane_ids, self._ended, self._writers, self._received = list(lanes), set(), {}, {}
        self._running_said = False
        for lane_id in lanes:
            self.board.state(lane_id).max_tokens = request.max_tokens
        self._done = asyncio.get_event_loop().create_future()
        self.statusChanged.emit("starting the engine…", True)
        if self.remote is None:  # keys never leave this machine
            for name, value in secrets.items():
                engine.send("secret", name=name, value=value)
        engine.send("run", spec=rs.to_dict(spec))
        if self._paused:
            engine.send("pause")
        await self._done

    def engine_for(self, device: str) -> EngineLink:
        """The device's engine process, started if need be. The others end: their models
        are not this run's (lanes of a run share its device)."""
        for other, engine in list(self.engines.items()):
            if other != device:
                engine.shutdown(CLOSE_S)
                del self.engines[other]
        engine = self.engines.get(device)
        if engine is None:
            engine = self.engines[device] = (
                EngineClient(device, self) if self.remote is None
                else RemoteEngineClient(self.remote, device, self))
            engine.laneStarted.connect(self._on_started)
            engine.laneEvent.connect(self._on_event)
            engine.laneBatch.connect(self._on_batch)
            engine.laneFailed.connect(self._on_failed)
            engine.controlRefused.connect(self._on_refused)
            engine.laneNote.connect(self._on_note)
            engine.status.connect(lambda text: self.statusChanged.emit(text, True))
            engine.runDone.connect(self._on_done)
            engine.runRefused.connect(
                lambda why: self._end_every_lane(f"the engine refused the run: {why}"))
            engine.died.connect(self._on_died)
        engine.ensure_started()
        return engine

    # ------------------------------------------------------------ from the engine

    def _on_started(self, lane_id: str, header: dict) -> None:
        lane = self.board.lanes.get(lane_id)
        if lane is None:
            return
        lane.start_run(header.get("prompt_text", ""), header.get("prompt", ""))
        self.board.read_header(lane_id, header)
        self.board.start_streams(lane_id, header)
        lane.trace_path = new_trace_path(lane.oracle_name(), lane_id)
        try:
            self._writers[lane_id] = TraceWriter(lane.trace_path, header)
        except SpecvizError as exc:  # a full disk or read-only home: the lane runs untraced
            lane.show_message(f"{exc}; this lane runs without a trace")

    def _on_failed(self, lane_id: str, why: str) -> None:
        lane = self.board.lanes.get(lane_id)
        if lane is not None:
            lane.show_message(why)
            self._end_lane(lane_id)

    def _on_refused(self, lane_id: str, why: str) -> None:
        lane = self.board.lanes.get(lane_id)
        if lane is not None:
            lane.show_message(why)

    def _on_note(self, lane_id: str, text: str) -> None:
        lane = self.board.lanes.get(lane_id)
        if lane is not None:
            lane.add_note(text)

    def _on_done(self, stats: dict) -> None:
        self.stats = stats
        self._finish()

    def _on_event(self, lane_id: str, event: ev.Event) -> None:
        self._trace(lane_id, event)
        if isinstance(event, ev.StepEvent):
            if not self._received:
                self.statusChanged.emit("running", True)  # every lane is built: stepping begins
            self._received.setdefault(lane_id, []).append(event)
        self.board.push(lane_id, event)
        if isinstance(event, ev.SummaryEvent):
            self._end_lane(lane_id)

    def _on_batch(self, lane_id: str, batch: BatchStep | StreamsSummary) -> None:
        """A lane of N streams: its trace records every stream's step of each batch, its
        view the stream picked; stream 1's steps are kept for a summary should the engine
        die (the header's stream)."""
        self._trace(lane_id, batch)
        if isinstance(batch, BatchStep):
            self._received.setdefault(lane_id, []).extend(
                e for stream, e in batch.steps if stream == 0)
        if not self._running_said:
            self._running_said = True
            self.statusChanged.emit("running", True)
        self.board.push_batch(lane_id, batch)
        if isinstance(batch, StreamsSummary):
            self._end_lane(lane_id)

    def _on_died(self, line: str) -> None:
        """The engine process ended unasked: every lane still going says so, and its trace
        ends with what arrived and that line."""
        self.crash = line
        self._end_every_lane(line)

    def _end_every_lane(self, line: str) -> None:
        for lane_id in self._lane_ids:
            lane = self.board.lanes.get(lane_id)
            if lane is None or lane_id in self._ended:
                continue
            lane.show_message(line)
            self._trace(lane_id, ev.crashed_summary(lane.oracle_name(),
                                                    self._received.get(lane_id, []), line))
            self._end_lane(lane_id)
        self._finish()

    def _trace(self, lane_id: str, event: ev.Event | BatchStep | StreamsSummary) -> None:
        """The event into the lane's trace; a write that fails (the trace then keeps its
        whole records only) is said in the lane, which runs on untraced."""
        writer = self._writers.get(lane_id)
        if writer is None:
            return
        try:
            writer.write(event)
        except SpecvizError as exc:
            self._writers.pop(lane_id, None)
            lane = self.board.lanes.get(lane_id)
            if lane is not None:
                lane.show_message(str(exc))

    def _end_lane(self, lane_id: str) -> None:
        self._ended.add(lane_id)
        writer = self._writers.pop(lane_id, None)
        if writer is not None:
            writer.close()

    def _close_traces(self) -> None:
        for lane_id in list(self._writers):
            self._end_lane(lane_id)

    def _finish(self) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result(None)
