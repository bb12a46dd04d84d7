"""A live run, orchestrated with asyncio on the Qt loop (qasync), computed on threads.

The coroutine finds the models (offering to fetch missing registry models), builds each lane's
session on an executor thread, hands the sessions to the device workers and waits for them.
A lane that cannot be built shows why and the others go on without it.
"""

from __future__ import annotations

import asyncio
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QWidget

from ..engines import models
from ..engines.errors import SpecvizError
from .fetch import fetch
from .lanes import LaneBoard
from .model_pool import ModelPool
from .runs import LaneConfig, LaneJob, RunRequest, build_job, model_keys
from .workers import WorkerPool


class LiveRunner(QObject):
    status = Signal(str, bool)  # message, busy
    finished = Signal()

    def __init__(self, board: LaneBoard, window: QWidget, interactive: bool = True) -> None:
        super().__init__(window)
        self.board = board
        self.window = window
        self.interactive = interactive  # may ask the person (fetching); not in `specviz shot`
        self.running = False
        self.pool = WorkerPool(self)
        self.pool.event.connect(board.push, Qt.ConnectionType.QueuedConnection)
        self.pool.failed.connect(self._on_failed, Qt.ConnectionType.QueuedConnection)
        self.pool.allDone.connect(self._on_all_done)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specviz-load")
        self.models = ModelPool()  # loaded models, shared by lanes and kept between runs
        self._stopping = False
        self._paused = False  # also holds a run that is still loading
        self._done: asyncio.Future | None = None

    def start(self, request: RunRequest) -> asyncio.Future:
        """Run every lane on the board; the task ends when all lanes have."""
        if self.running:
            raise RuntimeError("a run is already going")
        self.running, self._stopping, self._paused = True, False, False
        return asyncio.ensure_future(self._run(request))

    async def _run(self, request: RunRequest) -> None:
        lanes = dict(self.board.lanes)
        self.board.reset()
        for lane in lanes.values():
            lane.set_running(True)
        try:
            if await self._models_ready(request, lanes):
                await self._run_jobs(await self._build(request, lanes))
        finally:
            for lane in lanes.values():
                lane.set_running(False)
            self.running = False
            self.status.emit("stopped" if self._stopping else "ready", False)
            self.finished.emit()
            self.board.drain()  # the last events, already queued

    def set_k(self, lane_id: str, k: int) -> None:
        self.pool.set_k(lane_id, k)

    def set_knob(self, lane_id: str, name: str, value: int) -> str | None:
        """Change an oracle setting of a running lane; the reason if the oracle refuses."""
        return self.pool.set_knob(lane_id, name, value)

    def pause(self, paused: bool) -> None:
        self._paused = paused
        (self.pool.pause if paused else self.pool.resume)()

    def stop(self) -> None:
        self._stopping = True
        self.pool.stop()

    def shutdown(self, timeout: float) -> bool:
        """Stop everything and wait for the engine threads, at most `timeout` seconds."""
        self.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)
        done = self.pool.join(timeout)
        self.models.close()  # models still lent to a running lane are freed on its return
        return done

    # ------------------------------------------------------------ steps

    async def _models_ready(self, request: RunRequest, lanes: dict) -> bool:
        """Registry models that are not downloaded yet: fetch them, if the person agrees."""
        if not self.interactive:
            return True  # a missing model is then each lane's error
        registry = models.load_registry()
        wanted = {request.model.target, *(lane.config().draft for lane in lanes.values())}
        loop = asyncio.get_event_loop()
        for name in sorted(n for n in wanted if n in registry):
            self.status.emit(f"checking {name}…", True)
            if await loop.run_in_executor(self._executor, models.is_present, registry[name]):
                continue
            self.status.emit(f"fetching {name}…", True)
            try:
                if await fetch(self.window, name, self._executor) is None:
                    return False
            except SpecvizError as exc:
                self.status.emit(str(exc), False)
                return False
        return True

    async def _build(self, request: RunRequest, lanes: dict) -> list[LaneJob]:
        loop = asyncio.get_event_loop()
        configs = [lane.config() for lane in lanes.values()]
        await loop.run_in_executor(self._executor, self._keep_models, configs, request)
        jobs: list[LaneJob] = []
        for lane_id, lane in lanes.items():
            if self._stopping:
                break
            self.status.emit(f"loading {request.model.target} for {lane.oracle_name()}…", True)
            try:
                job = await loop.run_in_executor(self._executor, build_job, lane_id,
                                                 lane.config(), request, True, self.models)
            except SpecvizError as exc:
                lane.show_message(str(exc))
                continue
            except Exception as exc:  # a bug: keep the traceback, keep the other lanes
                traceback.print_exc(file=sys.stderr)
                lane.show_message(f"internal error: {exc!r}")
                continue
            lane.start_run(job.session.prompt_text, request.prompt)
            lane.trace_path = job.trace_path
            self.board.max_tokens[lane_id] = request.max_tokens
            jobs.append(job)
        return jobs

    def _keep_models(self, configs: list[LaneConfig], request: RunRequest) -> None:
        """Free the loaded models this run does not use (the settings changed)."""
        self.models.keep_only(model_keys(configs, request))

    async def _run_jobs(self, jobs: list[LaneJob]) -> None:
        if self._stopping or not jobs:
            for job in jobs:
                job.close()
            return
        self.status.emit("running", True)
        self._done = asyncio.get_event_loop().create_future()
        self.pool.start(jobs, paused=self._paused)
        await self._done

    def _on_failed(self, lane_id: str, message: str) -> None:
        lane = self.board.lanes.get(lane_id)
        if lane is not None:
            lane.show_message(message)

    def _on_all_done(self) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result(None)
