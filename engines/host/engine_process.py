"""The engine process: hosts the models of one device and steps the window's lanes.

Run as `python -m specviz.engines.host.engine_process`; it speaks engines.host.protocol on stdin and
stdout. Lanes take turns one step at a time, so each lane's measured step time is its own and
the race is fair to watch; their models come from one pool, shared between lanes and kept
between runs. A native crash here ends this process only: the window says so and starts a
fresh one.

Controls arrive on a reader thread and reach the sessions at once (a session takes K, pause
and stop at its next step boundary, as it did from the GUI thread), or wait for the lane to
be built.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from queue import Empty, Queue
from typing import BinaryIO

from .. import events as ev
from ..errors import SpecvizError
from ..loop.streams import BatchStep, StreamsSummary
from . import protocol
from . import run_spec as rs
from .lanes import CONTROLS, Lane
from .model_pool import ModelPool
from .run_builder import build_lane, model_keys
from .server_lanes import remember_key
from .stream_lanes import build_streams_lane
from .tasks import TASKS, Task, run_task
from .young_profiles import IDLE_S, YoungProfiles

NICENESS = 5  # CPU weight about a third of the window's, when they compete for a core


class Engine:
    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._write = threading.Lock()
        self._lock = threading.Lock()  # the lanes and what waits for them
        self.pool = ModelPool()
        self.lanes: dict[str, Lane] = {}
        self.model: rs.ModelChoice | None = None
        self._pending: dict[str, list[protocol.Message]] = {}  # controls for unbuilt lanes
        self.paused = False
        self.stopping = False
        self.runs: Queue[rs.RunSpec | Task | None] = Queue()  # runs and tasks, in turn
        # Controls that run a model (auto K may measure a profile): applied between steps
        # on the stepping thread, never beside a step on the same backend.
        self._deferred: Queue[protocol.Message] = Queue()
        self.young = YoungProfiles()

    # ------------------------------------------------------------ messages

    def send(self, kind: str, **fields) -> None:
        data = protocol.encode(kind, **fields)
        with self._write:
            self._out.write(data)
            self._out.flush()

    def receive(self, message: protocol.Message) -> None:
        """On the reader thread: a run is queued, a control applied."""
        kind = message.kind
        if kind == "run":
            with self._lock:
                self.stopping = self.paused = False
            self.runs.put(rs.from_dict(message["spec"]))
        elif kind in TASKS:
            self.runs.put(Task(kind, str(message["task"]), message.fields))
        elif kind == "shutdown":
            self._all("stop")
            self.runs.put(None)
        elif kind in ("pause", "resume", "stop"):
            self._all(kind)
        elif kind == "secret":
            remember_key(message["name"], message["value"])
        elif kind in CONTROLS:
            self._control(message)

    def _all(self, kind: str) -> None:
        with self._lock:  # with the lanes held, a lane being published cannot miss it
            self.paused = {"pause": True, "resume": False}.get(kind, self.paused)
            self.stopping = self.stopping or kind == "stop"
            for lane in self.lanes.values():
                getattr(lane, kind)()  # pause, resume or stop (which wakes a paused lane)

    def _control(self, message: protocol.Message) -> None:
        """On the reader thread: applied now, in the order sent, unless it runs a model."""
        lane_id = message["lane"]
        with self._lock:
            lane = self.lanes.get(lane_id)
            if lane is None:
                self._pending.setdefault(lane_id, []).append(message)
                return
            if runs_a_model(message):
                self._deferred.put(message)
                return
            problem = lane.control(message.kind, message.fields)
        if problem:
            self.send("refused", lane=lane_id, message=problem)

    def _apply_deferred(self) -> None:
        """On the stepping thread, between steps: controls that run the lane's models."""
        while not self._deferred.empty():
            message = self._deferred.get()
            lane = self.lanes.get(message["lane"])
            if lane is None:
                continue
            problem = lane.control(message.kind, message.fields,
                                   say=lambda text: self.send("status", text=text))
            if problem:
                self.send("refused", lane=lane.lane_id, message=problem)

    # ------------------------------------------------------------ runs

    def serve(self) -> None:
        while (job := self._next_job()) is not None:
            if isinstance(job, Task):
                run_task(job, self.pool, self.send)
                continue
            try:
                self.run(job)
            finally:
                self.send("done", loads=self.pool.loads, idle=self.pool.idle_count)
        self.pool.close()

    def _next_job(self) -> rs.RunSpec | Task | None:
        """The next run or task; while none comes, a young profile grows in idle moments."""
        while True:
            try:
                return self.runs.get(timeout=IDLE_S) if self.young.profiles else self.runs.get()
            except Empty:
                self.young.grow(self.pool, busy=lambda: not self.runs.empty(),
                                say=lambda text: self.send("status", text=text))

    def run(self, spec: rs.RunSpec) -> None:
        self.model = spec.request.model
        self.pool.keep_only(model_keys(list(spec.lanes.values()), self.model))
        built = []
        for lane_id, lane in spec.lanes.items():
            if self.stopping:
                break
            ready = self._build(lane_id, lane, spec.request)
            if ready is not None:
                built.append(ready)
        self.young.note(built, self.model)
        steps = {lane.lane_id: lane.steps() for lane in built}
        while steps:
            for lane_id in list(steps):
                self._apply_deferred()
                if not self._advance(self.lanes[lane_id], steps[lane_id]):
                    del steps[lane_id]
        with self._lock:
            self.lanes.clear()
            self._pending.clear()
            while not self._deferred.empty():  # lane ids are reused by the next run
                self._deferred.get()

    def _build(self, lane_id: str, lane: rs.LaneSpec, request: rs.RunRequest) -> Lane | None:
        self.send("status", text=f"loading {request.model.target} for {lane.oracle}…")
        say = lambda text: self.send("status", text=text)  # noqa: E731
        try:
            ready = (build_lane(lane_id, lane, request, self.pool, say=say)
                     if request.streams == 1 else
                     build_streams_lane(lane_id, lane, request, self.pool, request.streams, say))
        except Exception as exc:
            self._failed(lane_id, exc)
            return None
        self.send("started", lane=lane_id, header=ready.header, build=ready.build)
        with self._lock:  # published with the run's state and the controls sent meanwhile
            self.lanes[lane_id] = ready
            if self.paused:
                ready.pause()
            if self.stopping:
                ready.stop()
            waiting = self._pending.pop(lane_id, [])
        for message in waiting:
            self._control(message)
        return ready

    def _failed(self, lane_id: str, exc: Exception) -> None:
        """The lane ends with this error; the other lanes go on."""
        self.send("failed", lane=lane_id, message=_describe_failure(exc))

    def _advance(self, lane: Lane, steps: Iterator[ev.Event]) -> bool:
        """One step of one lane; False once the lane is over (summary or error)."""
        try:
            event = next(steps)  # a session ends with its summary, never StopIteration
        except Exception as exc:
            self._failed(lane.lane_id, exc)
            lane.close(reusable=False)  # its cache may not hold what it says
            return False
        if isinstance(event, (BatchStep, StreamsSummary)):
            self.send("batch", lane=lane.lane_id, batch=event)
        else:
            self.send("event", lane=lane.lane_id, event=event)
        if isinstance(event, (ev.SummaryEvent, StreamsSummary)):
            notice = lane.notice()  # arose as the run ended: said now, not at the next build
            if notice:
                self.send("note", lane=lane.lane_id, text=notice)
            lane.close()
            return False
        return True


def _describe_failure(exc: Exception) -> str:
    """A user's error is its own line; anything else is a bug: its traceback goes to stderr."""
    if isinstance(exc, SpecvizError):
        return str(exc)
    traceback.print_exception(exc, file=sys.stderr)
    return f"internal error: {exc!r}"


def runs_a_model(message: protocol.Message) -> bool:
    """Auto K switched on may measure a cost profile on the lane's own backends."""
    return message.kind == "set_auto" and bool(message.fields.get("on"))


def _read(engine: Engine, stdin: BinaryIO) -> None:
    for line in stdin:
        if not line.strip():
            continue
        try:
            message = protocol.decode(line)
            protocol.check_request(message)
            if message.kind != "auth":  # the server's business, never the engine's
                engine.receive(message)
        except SpecvizError as exc:
            print(f"specviz engine: {exc}", file=sys.stderr)
        except (KeyError, TypeError, ValueError) as exc:  # a well-formed line of the wrong shape
            print(f"specviz engine: bad message ({exc!r})", file=sys.stderr)
    engine.receive(protocol.Message("shutdown"))  # the window is gone


def main() -> None:
    # The window ends this process (it sends shutdown, or its pipe closes); a Ctrl-C in the
    # terminal reaches the whole process group, and is the window's to act on.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The protocol owns the real stdout; anything a library prints goes to stderr instead.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        os.nice(NICENESS)
    except (AttributeError, OSError):
        pass
    engine = Engine(out)
    engine.send("hello", pid=os.getpid(), python=sys.version.split()[0],
                version=protocol.VERSION)
    threading.Thread(target=_read, args=(engine, sys.stdin.buffer), daemon=True,
                     name="specviz-engine-reader").start()
    engine.serve()
    out.flush()
    sys.stderr.flush()
    # Without interpreter teardown: the reader thread is blocked in stdin, and freeing the
    # models one by one only delays the window waiting for this process to end.
    os._exit(0)


if __name__ == "__main__":
    main()
