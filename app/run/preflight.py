"""The window's checks before a run: this machine's cost profile (one click on the cost
plot, its progress in the status line, the curves redrawn when done) and a draft model
checked against the target when a lane picks it (the verdict in the lane)."""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QProgressBar

from ...engines.cost.profile import time_left
from ...engines.host.run_spec import ModelChoice
from ...engines.oracles import DRAFT_ORACLES
from ...engines.pair.text import render
from ..views.board import LaneBoard
from ..views.lane_widget import LaneWidget
from .engine_tasks import EngineTasks
from .live import LiveRunner

STAGES = {"answers": "the target answers", "profile": "profiling this machine",
          "estimate": "estimating acceptance"}


class Checks(QObject):
    def __init__(self, runner: LiveRunner, board: LaneBoard, progress_bar: QProgressBar,
                 model: Callable[[], ModelChoice], say: Callable[[str, bool], None],
                 profiled: Callable[[], None]) -> None:
        super().__init__(runner)
        self.tasks = EngineTasks(runner)
        self.board, self.bar, self.model, self.say = board, progress_bar, model, say
        self.profiled = profiled  # redraw the curves with the new profile
        self._lanes: dict[str, str] = {}  # pair task -> lane id
        self._began: dict[tuple[str, str], float] = {}  # (task, stage) -> when it began
        self.tasks.progress.connect(self._on_progress)
        self.tasks.finished.connect(self._on_finished)
        self.tasks.failed.connect(self._on_failed)

    def profile_machine(self) -> None:
        if self.tasks.busy("profile"):
            return
        model = self.model()
        if self.tasks.profile(model):
            self.say(f"profiling {model.target} on this machine…", True)

    def check_pair(self, lane: LaneWidget) -> None:
        """Check the lane's draft model against the target, if the lane drafts with one."""
        config = lane.config()
        if config.oracle not in DRAFT_ORACLES or not config.draft_model:
            return
        task = self.tasks.pair(self.model(), config.draft_model)
        if task:
            self._lanes[task] = lane.lane_id
            lane.show_message(f"checking {config.draft_model} as a draft…", error=False)

    def _on_progress(self, task: str, stage: str, done: int, total: int) -> None:
        self.bar.setRange(0, max(total, 1))
        self.bar.setValue(done)
        self.bar.setVisible(True)
        began = self._began.setdefault((task, stage), time.monotonic())
        left = time_left(time.monotonic() - began, done, total)
        self.say(f"{STAGES.get(stage, stage)} {done}/{total}{left}", True)

    def _on_finished(self, task: str, result: dict) -> None:
        self._idle()
        lane = self.board.lanes.get(self._lanes.pop(task, ""))
        if task.startswith("profile"):
            self.say("this machine's cost profile is measured", False)
            self.profiled()
        elif lane is not None:
            lane.show_message(pair_line(result), error=result["vocab"]["verdict"] == "unusable",
                              details=render(result))
            self.say("pair checked", False)

    def _on_failed(self, task: str, message: str) -> None:
        self._idle()
        lane = self.board.lanes.get(self._lanes.pop(task, ""))
        if lane is not None:
            lane.show_message(message)
        self.say(message, False)

    def _idle(self) -> None:
        self._began.clear()
        self.bar.setRange(0, 0)  # back to the busy indicator the runs use


def pair_line(report: dict) -> str:
    """A pair report in one line for the lane: tokenizers, acceptance, the verdict."""
    vocab = report["vocab"]
    if vocab["verdict"] == "unusable":
        return f"not usable as a draft: {vocab['reason']}"
    parts = [f"tokenizers: {vocab['verdict']}"]
    if report.get("greedy_agreement") is not None:
        parts.append(f"guesses right {report['greedy_agreement']:.0%} (estimated)")
    parts.append(report["verdict"])
    return " · ".join(parts)
