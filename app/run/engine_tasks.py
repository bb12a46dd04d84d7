"""Work the window asks of an engine process besides runs: measuring this machine's cost
profile, checking a draft model for the target, advising which oracle to run. Sent to the
engine of the run's device (the models loaded for runs serve here too); progress and results
come back as signals.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict

from PySide6.QtCore import QObject, Signal

from ...engines.errors import SpecvizError
from ...engines.host.run_spec import ModelChoice
from ..state.run_setup import gui_threads
from .engine_client import EngineLink
from .live import LiveRunner


class EngineTasks(QObject):
    progress = Signal(str, str, int, int)  # task, stage, done, total
    finished = Signal(str, dict)  # task, result
    failed = Signal(str, str)  # task, one line

    def __init__(self, runner: LiveRunner) -> None:
        super().__init__(runner)
        self.runner = runner
        self.pending: dict[str, str] = {}  # task -> kind
        self._names = itertools.count(1)
        self._heard: set[int] = set()  # engine clients whose messages reach us

    def profile(self, model: ModelChoice) -> str | None:
        """Measure the target's cost profile; the task's name, or None if it cannot start."""
        return self._send("profile", model)

    def pair(self, model: ModelChoice, draft: str, max_tokens: int = 48) -> str | None:
        """Check `draft` against the target (tokenizers, acceptance, speedup by K)."""
        return self._send("pair", model, draft=draft, max_tokens=max_tokens)

    def advise(self, model: ModelChoice, kinds: list[str]) -> str | None:
        """Rank every oracle and draft found for the target on these kinds of prompts."""
        return self._send("advise", model, kinds=kinds)

    def busy(self, kind: str) -> bool:
        return kind in self.pending.values()

    def _send(self, kind: str, model: ModelChoice, **fields) -> str | None:
        model = ModelChoice(model.target, model.backend, model.device,
                            model.threads or gui_threads(), model.n_ctx)
        device, current = model.device or "auto", self.runner.engine
        try:
            if self.runner.running and current is not None and current.device != device:
                raise SpecvizError(f"a run on {current.device} is going; try when it ends")
            engine = self.runner.engine_for(device)
        except SpecvizError as exc:
            self.failed.emit(kind, str(exc))
            return None
        self._listen(engine)
        task = f"{kind}-{next(self._names)}"
        self.pending[task] = kind
        engine.send(kind, task=task, model=asdict(model), **fields)
        return task

    def _listen(self, engine: EngineLink) -> None:
        if id(engine) not in self._heard:
            self._heard.add(id(engine))
            engine.taskProgress.connect(self._on_progress)
            engine.taskFinished.connect(self._on_finished)
            engine.taskFailed.connect(self._on_failed)
            engine.died.connect(self._on_died)

    def _on_progress(self, task: str, stage: str, done: int, total: int) -> None:
        if task in self.pending:
            self.progress.emit(task, stage, done, total)

    def _on_finished(self, task: str, result) -> None:
        if self.pending.pop(task, None) is not None:
            self.finished.emit(task, result)

    def _on_failed(self, task: str, why: str) -> None:
        if self.pending.pop(task, None) is not None:
            self.failed.emit(task, why)

    def _on_died(self, line: str) -> None:
        for task in list(self.pending):
            del self.pending[task]
            self.failed.emit(task, line)
