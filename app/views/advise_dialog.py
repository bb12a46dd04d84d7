"""Run > Advise…: which oracle to run for the target here, as `specviz advise` ranks them, drawn
as a heatmap (candidates by prompt kind); a click on a cell adds that candidate as a lane.

The engine does the work (its `advise` task: the target's answers, every candidate predicted
from them); this dialog asks, shows the engine's progress lines and draws the result. It is
given the window's engine tasks rather than importing them (views sit below the run's
controllers).
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ...engines.advise.prompts import KINDS
from ...engines.host.run_spec import LaneSpec, ModelChoice
from ...engines.oracles.registry import HEADS, MODEL, ORACLE_INFO
from ...widgets.advice_map import AdviceMap

DEFAULT_KINDS = ("code", "prose")


def lane_for(candidate: dict) -> LaneSpec:
    """The lane that runs a candidate as it was predicted: its oracle with auto K, and its
    model or heads as that oracle's first model or heads input."""
    described = ORACLE_INFO[candidate["oracle"]]
    inputs = {}
    if candidate.get("model"):
        first = next((i for i in described.inputs if i.kind in (MODEL, HEADS)), None)
        if first is not None:
            inputs[first.name] = candidate["model"]
    return LaneSpec(candidate["oracle"], auto_k=True, inputs=inputs)


class AdviseDialog(QDialog):
    """Kinds to ask about, Advise, the engine's progress, the heatmap and the verdict."""

    def __init__(self, tasks, model: Callable[[], ModelChoice],
                 add_lane: Callable[[LaneSpec], object], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Advise: which oracle for this target, here")
        self.tasks, self.model, self.add_lane = tasks, model, add_lane
        self.task: str | None = None
        self.candidates: dict[str, dict] = {}
        self.kinds = {k: QCheckBox(k) for k in KINDS}
        for kind, box in self.kinds.items():
            box.setChecked(kind in DEFAULT_KINDS)
        self.start = QPushButton("Advise")
        self.start.clicked.connect(self.ask)
        self.status = QLabel("Predicts every oracle and draft found here from the target's "
                             "own answers, without racing them (a minute or two).")
        self.status.setWordWrap(True)
        self.map = AdviceMap(self)
        self.map.chosen.connect(self._chosen)
        self.verdict = QLabel("")
        self.verdict.setWordWrap(True)
        self._lay_out()
        tasks.progress.connect(self._on_progress)
        tasks.finished.connect(self._on_finished)
        tasks.failed.connect(self._on_failed)

    def _lay_out(self) -> None:
        row = QHBoxLayout()
        row.addWidget(QLabel("prompts:"))
        for box in self.kinds.values():
            row.addWidget(box)
        row.addStretch(1)
        row.addWidget(self.start)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.status)
        layout.addWidget(self.map, 1)
        layout.addWidget(self.verdict)
        self.resize(720, 420)

    def ask(self) -> None:
        kinds = [k for k, box in self.kinds.items() if box.isChecked()]
        if not kinds:
            self.status.setText("tick at least one kind of prompts")
            return
        self.task = self.tasks.advise(self.model(), kinds)
        if self.task:
            self.start.setEnabled(False)
            self.status.setText(f"asking the engine about {self.model().target}…")

    def show_result(self, advice: dict) -> None:
        self.candidates = {c["name"]: c for c in advice["candidates"]}
        self.map.show_advice(advice)
        self.verdict.setText(f"{advice['verdict']} · took {advice['seconds']:.0f} s · "
                             "click a cell to add that lane")
        self.status.setText("; ".join([advice["answers"], *advice.get("problems", [])]))

    def _on_progress(self, task: str, stage: str, _done: int, _total: int) -> None:
        if task == self.task:
            self.status.setText(stage)

    def _on_finished(self, task: str, result: dict) -> None:
        if task == self.task:
            self.task = None
            self.start.setEnabled(True)
            self.show_result(result)

    def _on_failed(self, task: str, message: str) -> None:
        if task in (self.task, "advise"):  # "advise": it could not be sent at all
            self.task = None
            self.start.setEnabled(True)
            self.status.setText(message)

    def _chosen(self, name: str, _kind: str) -> None:
        candidate = self.candidates.get(name)
        if candidate is not None and self.add_lane(lane_for(candidate)) is not None:
            self.verdict.setText(f"added a lane: {name}")
