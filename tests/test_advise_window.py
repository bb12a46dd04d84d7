"""Run > Advise…: the heatmap of `specviz advise`'s answer, the dialog that asks the engine
for it and adds a clicked candidate as a lane, and the engine's advise task."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import QObject, Signal

from specviz.app.views.advise_dialog import AdviseDialog, lane_for
from specviz.engines.advise.report import ALL, Advice, Candidate, Cell
from specviz.engines.host.run_spec import LaneSpec, ModelChoice
from specviz.engines.host.tasks import Task, run_task
from specviz.widgets.advice_map import AdviceMap


def cell(speedup: float, acceptance: float | None = 0.5) -> Cell:
    return Cell(speedup=speedup, policy="auto", best_k=4, auto_speedup=speedup,
                fixed_speedup=speedup, acceptance=acceptance, tokens_per_step=1.5,
                break_even=0.3, tokens=100)


def advice() -> dict:
    """An answer in the form the engine sends (Advice.to_dict), not one written by hand."""
    lookup = Candidate("prompt lookup", "prompt-lookup",
                       cells={"code": cell(1.4), "prose": cell(0.8), ALL: cell(1.1)})
    draft = Candidate("draft qwen2.5-coder-0.5b", "draft", model="qwen2.5-coder-0.5b",
                      cells={"code": cell(1.2), "prose": cell(1.05), ALL: cell(1.12)})
    skipped = Candidate("eagle", "eagle", obtain="training", skipped="no EAGLE head here")
    return Advice("smollm2-135m", "llama", ["code", "prose", ALL],
                  [draft, lookup, skipped], answers="6 answers").to_dict()


@pytest.fixture
def heatmap(qtbot) -> AdviceMap:
    widget = AdviceMap()
    qtbot.addWidget(widget)
    widget.show_advice(advice())
    return widget


def test_cells_are_coloured_by_speedup_around_break_even(heatmap):
    assert heatmap.rowCount() == 3 and heatmap.columnCount() == 3
    faster = heatmap.item(1, 0).background().color()  # prompt lookup on code, 1.4x
    slower = heatmap.item(1, 1).background().color()  # prompt lookup on prose, 0.8x
    assert heatmap.item(1, 0).text() == "1.40x" and heatmap.item(1, 1).text() == "0.80x"
    assert faster.green() > faster.red() and slower.red() > slower.green()
    assert "K=4 pays from 30% acceptance" in heatmap.item(1, 0).toolTip()
    assert heatmap.item(2, 0).text() == "-" and heatmap.item(2, 0).toolTip() == \
        "no EAGLE head here"


def test_a_click_on_a_predicted_cell_picks_its_candidate(heatmap, qtbot):
    picked = []
    heatmap.chosen.connect(lambda name, kind: picked.append((name, kind)))
    heatmap.cellClicked.emit(0, 1)
    heatmap.cellClicked.emit(2, 0)  # a skipped candidate: nothing to add
    assert picked == [("draft qwen2.5-coder-0.5b", "prose")]


def test_a_candidate_becomes_the_lane_it_was_predicted_as():
    assert lane_for({"oracle": "draft", "model": "qwen2.5-coder-0.5b"}) == LaneSpec(
        "draft", auto_k=True, inputs={"draft": "qwen2.5-coder-0.5b"})
    assert lane_for({"oracle": "eagle", "model": "/heads/eagle"}).inputs == {
        "eagle_head": "/heads/eagle"}
    assert lane_for({"oracle": "prompt-lookup", "model": None}) == LaneSpec(
        "prompt-lookup", auto_k=True)


class FakeTasks(QObject):
    """The window's engine tasks as the dialog sees them: it asks, then hears signals."""

    progress = Signal(str, str, int, int)
    finished = Signal(str, dict)
    failed = Signal(str, str)

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[ModelChoice, list[str]]] = []

    def advise(self, model: ModelChoice, kinds: list[str]) -> str:
        self.asked.append((model, kinds))
        return "advise-1"


def test_the_dialog_asks_shows_progress_and_adds_the_clicked_lane(qtbot):
    tasks, added = FakeTasks(), []
    dialog = AdviseDialog(tasks, lambda: ModelChoice("smollm2-135m"),
                          lambda lane: added.append(lane) or lane)
    qtbot.addWidget(dialog)
    dialog.ask()
    assert tasks.asked == [(ModelChoice("smollm2-135m"), ["code", "prose"])]
    assert not dialog.start.isEnabled()
    tasks.progress.emit("advise-1", "replaying prompt-lookup (auto K and fixed K)", 0, 0)
    assert dialog.status.text().startswith("replaying prompt-lookup")
    tasks.finished.emit("advise-9", advice())  # another dialog's answer: not ours
    assert dialog.map.rowCount() == 0
    tasks.finished.emit("advise-1", advice())
    assert dialog.map.rowCount() == 3 and dialog.start.isEnabled()
    assert "draft qwen2.5-coder-0.5b" in dialog.verdict.text()
    dialog.map.cellClicked.emit(0, 0)
    assert added == [LaneSpec("draft", auto_k=True, inputs={"draft": "qwen2.5-coder-0.5b"})]


def test_an_advise_the_engine_cannot_do_is_one_line(qtbot):
    tasks = FakeTasks()
    dialog = AdviseDialog(tasks, lambda: ModelChoice("smollm2-135m"), lambda lane: lane)
    qtbot.addWidget(dialog)
    dialog.ask()
    tasks.failed.emit("advise-1", "the target cannot load: no such model")
    assert dialog.status.text() == "the target cannot load: no such model"
    assert dialog.start.isEnabled()


def test_the_engine_refuses_a_kind_of_prompts_it_does_not_have_before_loading():
    sent = []
    task = Task("advise", "advise-1", {"model": {"target": "no-such-model"},
                                       "kinds": ["poetry"]})
    run_task(task, pool=None, send=lambda kind, **fields: sent.append((kind, fields)))
    (kind, fields), = sent
    assert kind == "task_failed" and "poetry" in fields["message"]
    assert "\n" not in fields["message"]
