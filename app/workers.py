"""Engine threads: one per device, its lanes taking turns one step at a time.

Lanes on one device never compute at the same moment, so each lane's measured step time is
its own (the session times itself) and the lanes advance together, which is what makes the
race fair to watch. Results cross to the GUI thread as queued Qt signals; the GUI buffers
them and draws at most ~60 times a second.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Iterator

from PySide6.QtCore import QObject, Qt, Signal

from ..engines import events as ev
from ..engines.errors import SpecvizError
from ..engines.session import warm_up
from .runs import LaneJob


class _Lane:
    """One lane on a worker: its job and the iterator that is its compute."""

    def __init__(self, job: LaneJob) -> None:
        self.job = job
        self.steps = _steps(job)


def _steps(job: LaneJob) -> Iterator[ev.Event]:
    # Warming up inside the iterator: a failure there is that lane's error, like any step's.
    warm_up(job.session.target, job.session.prompt_ids)
    yield from job.session


class DeviceWorker:
    """A thread that steps its lanes round-robin until each has yielded its summary."""

    def __init__(self, device: str, jobs: list[LaneJob], pool: WorkerPool) -> None:
        self.device = device
        self.jobs = jobs
        self._pool = pool
        self._thread = threading.Thread(target=self._run, name=f"specviz-engine-{device}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        yield_to_gui()
        lanes = [_Lane(job) for job in self.jobs]
        try:
            while lanes:
                lanes = [lane for lane in lanes if self._advance(lane)]
        finally:
            self._pool.workerDone.emit(self.device)

    def _advance(self, lane: _Lane) -> bool:
        """One step of one lane; False once the lane is over (summary, error or stop)."""
        job = lane.job
        try:
            event = next(lane.steps)  # the session ends with its summary, never StopIteration
        except SpecvizError as exc:
            self._pool.failed.emit(job.lane_id, str(exc))
            return self._close(job, reusable=False)
        except Exception as exc:  # a bug: keep the traceback, keep the other lanes going
            traceback.print_exc(file=sys.stderr)
            self._pool.failed.emit(job.lane_id, f"internal error: {exc!r}")
            return self._close(job, reusable=False)
        if job.writer:
            job.writer.write(event)
        self._pool.event.emit(job.lane_id, event)
        return isinstance(event, ev.StepEvent) or self._close(job)

    @staticmethod
    def _close(job: LaneJob, reusable: bool = True) -> bool:
        job.close(reusable)  # its models go back to the pool for the next run
        return False


ENGINE_NICENESS = 5  # CPU weight about a third of the GUI thread's, when they compete


def yield_to_gui() -> None:
    """Lower the calling engine thread's priority (Linux: niceness is per thread, and the
    compute threads llama.cpp starts from it inherit it). On a machine with busy cores the
    GUI thread then gets a core first when it wakes to draw; with idle cores nothing changes.
    """
    if sys.platform != "linux":
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + ENGINE_NICENESS)
    except OSError:  # not allowed here: the engine keeps the GUI's priority
        pass


class WorkerPool(QObject):
    """The running lanes, grouped into one DeviceWorker per device; control from the GUI."""

    # Emitted on worker threads: connect them queued, so that slots run on the GUI thread.
    event = Signal(str, object)  # lane id, StepEvent or SummaryEvent
    failed = Signal(str, str)  # lane id, user-facing message
    workerDone = Signal(str)
    allDone = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._workers: list[DeviceWorker] = []
        self._jobs: dict[str, LaneJob] = {}
        self._pending = 0
        # Worker threads emit; queued delivery runs the slots on the GUI thread.
        self.workerDone.connect(self._on_worker_done, Qt.ConnectionType.QueuedConnection)

    @property
    def running(self) -> bool:
        return self._pending > 0

    def start(self, jobs: list[LaneJob], paused: bool = False) -> None:
        """Start the threads; `paused` holds every session before its first step."""
        if self.running:
            raise RuntimeError("a run is already going")
        self._jobs = {job.lane_id: job for job in jobs}
        if paused:
            self.pause()
        by_device: dict[str, list[LaneJob]] = {}
        for job in jobs:
            by_device.setdefault(job.device, []).append(job)
        self._workers = [DeviceWorker(dev, group, self) for dev, group in by_device.items()]
        self._pending = len(self._workers)
        for worker in self._workers:
            worker.start()
        if not self._workers:
            self.allDone.emit()

    def session(self, lane_id: str):
        job = self._jobs.get(lane_id)
        return job.session if job else None

    def trace_path(self, lane_id: str):
        job = self._jobs.get(lane_id)
        return job.trace_path if job else None

    def set_k(self, lane_id: str, k: int) -> None:
        session = self.session(lane_id)
        if session is not None and session.oracle.name != "none":
            session.set_k(k)

    def set_knob(self, lane_id: str, name: str, value: int) -> str | None:
        """An oracle setting, taken at the oracle's next proposal; the reason if refused."""
        session = self.session(lane_id)
        if session is None or name not in session.oracle.knobs():
            return None
        try:
            session.oracle.set_knob(name, value)
        except SpecvizError as exc:
            return str(exc)
        return None

    def pause(self) -> None:
        for job in self._jobs.values():
            job.session.pause()

    def resume(self) -> None:
        for job in self._jobs.values():
            job.session.resume()

    def stop(self) -> None:
        """Each session ends at its next step boundary and yields a 'stopped' summary."""
        for job in self._jobs.values():
            job.session.stop()

    def join(self, timeout: float) -> bool:
        """Wait for the threads to end, `timeout` seconds for all together."""
        end = time.monotonic() + timeout
        return all(w.join(max(0.0, end - time.monotonic())) for w in self._workers)

    def _on_worker_done(self, _device: str) -> None:
        self._pending -= 1
        if self._pending == 0:
            self.allDone.emit()
