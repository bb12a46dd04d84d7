"""The window: prompt panel, lanes side by side, graphs below, the step inspector beside.

The window lays these out and wires them; its menus (views.menus), its exports
(export.window_exports), its appearance (views.appearance), the step its docks show
(views.step_focus) and its questions about model folders and server keys
(views.window_dialogs) are objects of their own."""

from __future__ import annotations

import asyncio
import sys
import traceback
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QSplitter,
    QWidget,
)

from ..board.lanes_model import BoardModel
from ..board.palette import DARK, THEMES, Theme
from ..board.parting import PartingWatch
from ..board.streams_race import StreamsRace
from ..engines.cost.why_slower import loss_reason
from ..engines.errors import SpecvizError
from ..engines.host.run_spec import LaneSpec, ModelChoice, RunRequest
from ..engines.speedup import SLOWER
from ..widgets.graphs import LaneGraphs
from ..widgets.inspector import StepInspector
from ..widgets.tree_view import TreeView
from .export.window_exports import WindowExports
from .run.engine_tasks import EngineTasks
from .run.live import LiveRunner
from .run.model_fetch import FetchDialog
from .run.preflight import Checks
from .run.remote_engine import RemoteEngine
from .run.replay_mode import ReplayControl
from .run.trace_player import ReplayPlayer
from .state.run_setup import DEFAULT_TARGET, MAX_LANES, lane_problem, profile_costs, traces_dir
from .state.settings import AppSettings
from .views.advise_dialog import AdviseDialog
from .views.anatomy_dock import AnatomyDock
from .views.appearance import WINDOW_SPLIT, Appearance, apply_theme
from .views.board import LaneBoard
from .views.lane_widget import LaneWidget
from .views.menus import WindowMenus
from .views.prompt_panel import PromptPanel, first_prompt
from .views.step_focus import StepFocus
from .views.streams_dock import StreamsDock
from .views.window_dialogs import WindowDialogs

CLOSE_TIMEOUT_S = 2.0


class MainWindow(QMainWindow):
    def __init__(self, settings: AppSettings | None = None, interactive: bool = True,
                 remote: RemoteEngine | None = None) -> None:
        super().__init__()
        self.setWindowTitle(f"specviz: engine at {remote.address}" if remote else "specviz")
        self.settings = settings or AppSettings()
        theme: Theme = THEMES.get(self.settings.theme(), DARK)
        recent = self.settings.recent_models()
        lanes = BoardModel()  # the lanes as plain data: the board, graphs and exports read it
        streams = StreamsRace()  # its lanes of N streams: the graphs draw a batch's speedup
        self.graphs = LaneGraphs(lanes, theme, streams=streams)
        self.board = LaneBoard(lanes, self.graphs, theme, recent, streams=streams)
        self.prompt = PromptPanel(recent)
        self.inspector = StepInspector(theme)
        self.tree_view = TreeView(theme)
        self.runner = LiveRunner(self.board, self, interactive, remote,
                                 self.settings.server_key)
        self.replay = ReplayControl(self.board, self)
        self.partings = PartingWatch(lanes, lambda lid, p: self.board.lanes[lid].show_parting(p))
        self.run_task: asyncio.Future | None = None
        self._build_layout()
        self.focus = StepFocus(self)  # which step the docks show
        self.dialogs = WindowDialogs(self)
        self._advice: AdviseDialog | None = None  # Run > Advise…, made when first asked
        self.checks = Checks(self.runner, self.board, self.busy, self.prompt.model_choice,
                             self.show_status, self._show_costs)
        self.exports = WindowExports(self)
        self.appearance = Appearance(self, theme)
        self.menus = WindowMenus(self)
        self._connect()
        self._restore()
        self.set_mode()

    # ------------------------------------------------------------ construction

    def _build_layout(self) -> None:
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(self.board)
        self.splitter.addWidget(self.graphs)
        self.splitter.setSizes(WINDOW_SPLIT)
        self.setCentralWidget(self.splitter)
        self.prompt_dock = self._dock("Prompt", self.prompt, Qt.DockWidgetArea.LeftDockWidgetArea)
        self.inspector_dock = self._dock("Step", self.inspector,
                                         Qt.DockWidgetArea.RightDockWidgetArea)
        self.tree_dock = self._dock("Tree", self.tree_view, Qt.DockWidgetArea.RightDockWidgetArea)
        self.anatomy_dock = AnatomyDock(self)  # tabbed behind the Step dock
        self.streams_dock = StreamsDock(self, self.board.streams)  # and so is this one
        self.busy = QProgressBar(maximumWidth=160, visible=False)
        self.busy.setRange(0, 0)
        self.status_text = QLabel("ready")
        self.statusBar().addWidget(self.status_text, 1)
        self.statusBar().addPermanentWidget(self.busy)

    def _dock(self, title: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(f"dock-{title.lower()}")
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    def _connect(self) -> None:
        self.board.kChanged.connect(self.runner.set_k)
        self.board.autoChanged.connect(self.runner.set_auto)
        self.board.knobChanged.connect(self.runner.set_knob)  # a refusal shows in the lane
        self.board.changed.connect(self._on_lanes_changed)
        self.board.refreshed.connect(lambda: self.streams_dock.refresh(
            {lid: lane.colour for lid, lane in self.board.lanes.items()}))
        self.board.clicked.connect(lambda lane, step: self.streams_dock.show_step(
            lane.lane_id, step))
        self.board.streamFollowed.connect(self.prompt.show_stream)  # its copies link into it
        self.runner.statusChanged.connect(self.show_status)
        self.runner.finished.connect(self.set_mode)
        self.replay.changed.connect(self.set_mode)
        self.prompt.model.browsed.connect(self.dialogs.remember_model)
        self.prompt.model.currentIndexChanged.connect(self._show_costs)
        self.graphs.cost_curve.profileRequested.connect(self.checks.profile_machine)

    def _restore(self) -> None:
        s = self.settings
        self.prompt.set_model_choice(s.model(ModelChoice(DEFAULT_TARGET)))
        self.prompt.set_prompt(s.prompt() or first_prompt())
        self.prompt.temperature.setValue(s.temperature())
        self.prompt.max_tokens.setValue(s.max_tokens())
        self._add_lanes(s.lanes())
        geometry, state = s.window_layout()
        for saved, restore in ((geometry, self.restoreGeometry), (state, self.restoreState)):
            if saved is not None:
                restore(saved)
        if geometry is None:
            self.resize(1500, 950)
        apply_theme(self.theme)
        self._show_costs()

    # ------------------------------------------------------------ lanes and runs

    def add_lane(self, config: LaneSpec) -> LaneWidget | None:
        lane = self.board.add_lane(config)
        if lane is None:
            self.show_status(f"at most {MAX_LANES} lanes")
        else:
            self.appearance.style_lane(lane)
            lane.draft.browsed.connect(self.dialogs.remember_model)
            lane.draft.picked.connect(lambda _name, lane=lane: self.checks.check_pair(lane))
        self.set_mode()
        return lane

    def _add_lanes(self, configs: list[LaneSpec]) -> None:
        for config in configs:
            self.add_lane(config)

    def request(self) -> RunRequest:
        p = self.prompt
        return RunRequest(prompt=p.prompt(), model=p.model_choice(),
                          max_tokens=p.max_tokens.value(), temperature=p.temperature.value(),
                          streams=p.streams.value())

    def start_run(self) -> asyncio.Future | None:
        """Run every lane; the task, or None when a run cannot start now."""
        if self.runner.running or self.replaying or not self.board.lanes:
            return None
        request = self.request()
        if not request.prompt.strip():
            self.show_status("type a prompt first")
            return None
        if self._lanes_refused():
            return None
        self._save_run_settings(request)
        self.prompt.show_own()  # a race starts on it; a lane following another stream says so
        self._show_costs()
        self.focus.pinned = False
        self.run_task = self.runner.start(request)
        self.run_task.add_done_callback(lambda task: self._run_ended(task, request.model))
        self.set_mode()
        return self.run_task

    def _lanes_refused(self) -> bool:
        """Each lane that cannot start says why in its line (and the status line); then no
        lane starts."""
        refused = False
        for lane in self.board.lanes.values():
            problem = lane_problem(lane.config())
            if problem:
                lane.show_message(problem)
                self.show_status(problem)
                refused = True
        return refused

    def _run_ended(self, task: asyncio.Future, model: ModelChoice) -> None:
        # An auto-K lane measures a missing profile during the run: price the curves with it.
        self._show_costs(model)
        self._explain_losses(model)
        if not task.cancelled() and task.exception() is not None:  # a bug: say so, keep going
            error = task.exception()
            traceback.print_exception(error, file=sys.stderr)
            self.show_status(f"internal error: {error!r}")

    def _explain_losses(self, model: ModelChoice) -> None:
        """A lane slower than plain decoding says why, from this machine's cost profile."""
        costs, _label, _profiled = profile_costs(model)
        for lane_id, lane in self.board.lanes.items():
            if lane.view.token_count == 0:
                continue
            why = (self._batch_loss(lane_id) if lane_id in self.board.streams.lanes
                   else self._lane_loss(lane_id, costs))
            if why:
                lane.add_note(why)

    def _lane_loss(self, lane_id: str, costs: list[float] | None) -> str:
        figures = self.board.model.figures(lane_id)
        if getattr(figures.get("rounds"), "verdict", None) != SLOWER:
            return ""  # a loss within the machine's noise has no cause to explain
        return loss_reason(self.board.lanes[lane_id].oracle_name(), figures, costs)

    def _batch_loss(self, lane_id: str) -> str:
        """A lane of N streams is judged as its header judges it, by its batch's speedup (its
        followed stream against plain's same stream is not the lane's), and explained by the
        profile's prices at its N."""
        streams = self.board.streams
        figures, batch = streams.figures(lane_id), streams.lanes[lane_id]
        if getattr(figures["batch_speedup"], "verdict", None) != SLOWER:
            return ""
        return loss_reason(self.board.lanes[lane_id].oracle_name(), figures,
                           batch.relative_costs(), batch.n)

    def _show_costs(self, model: ModelChoice | None = None) -> None:
        """Price the theoretical curves with the target's stored profile, if there is one."""
        if not isinstance(model, ModelChoice):  # a signal's index
            model = self.prompt.model_choice()
        self.graphs.set_costs(*profile_costs(model))

    def stop(self) -> None:
        if self.runner.running:
            self.runner.stop()
        elif self.replaying:
            self.replay.pause()
        self.set_mode()

    def pause(self, paused: bool) -> None:
        self.runner.pause(paused)
        self.show_status("paused" if paused else "running", not paused)

    # ------------------------------------------------------------ replay

    @property
    def replaying(self) -> bool:
        return self.replay.replaying

    @property
    def player(self) -> ReplayPlayer | None:
        return self.replay.player

    def open_replay(self, paths: list[Path], speed: float = 1.0) -> ReplayPlayer | None:
        if self.runner.running:
            self.show_status("stop the run before opening traces")
            return None
        self.menus.speed.setValue(speed)
        player = self.replay.open(paths, self.menus.speed.value())
        for lane in self.board.lanes.values():
            self.appearance.style_lane(lane)
        self.prompt.set_prompt(next((lane.user_prompt for lane in self.board.lanes.values()), ""))
        return player

    def ask_open_traces(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Open traces", str(traces_dir()),
                                                "Traces (*.jsonl);;All files (*)")
        if not paths:
            return
        try:
            self.open_replay([Path(p) for p in paths[:MAX_LANES]])
        except SpecvizError as exc:  # traces of different prompts, a corrupt one
            QMessageBox.warning(self, "specviz", str(exc))

    def leave_replay(self) -> None:
        """Back to the lanes the person had set up, ready to run."""
        self.replay.leave()
        self.prompt.set_prompt(self.settings.prompt())
        self._add_lanes(self.settings.lanes())
        self.set_mode()

    # ------------------------------------------------------------ view

    @property
    def theme(self) -> Theme:
        return self.appearance.theme

    @property
    def presenting(self) -> bool:
        return self.appearance.presenting

    def set_theme(self, name: str) -> None:
        self.appearance.set_theme(name)

    def set_presentation(self, on: bool, fullscreen: bool = True) -> None:
        """Big text, no controls: the lanes and the race fill the screen."""
        self.appearance.set_presentation(on, fullscreen)

    def show_rejected(self, show: bool) -> None:
        for lane in self.board.lanes.values():
            lane.view.set_show_rejected(show)

    def show_status(self, message: str, busy: bool = False) -> None:
        self.status_text.setText(message)
        self.busy.setVisible(busy)

    def set_mode(self) -> None:
        """Enable what makes sense now: idle, running, or replaying."""
        running, replay = self.runner.running, self.replaying
        self.menus.set_mode(running, replay, len(self.board.lanes))
        self.prompt.set_editable(not running and not replay)

    # ------------------------------------------------------------ settings and closing

    def show_advice(self) -> AdviseDialog:
        """Run > Advise…: one dialog, kept open between asks, on the window's engine."""
        if self._advice is None:
            self._advice = AdviseDialog(EngineTasks(self.runner), self.prompt.model_choice,
                                        self.add_lane, self)
        self._advice.show()
        self._advice.raise_()
        return self._advice

    def _on_lanes_changed(self) -> None:
        if not self.replaying:  # replayed lanes are not the person's set-up
            self.settings.set_lanes(self.board.configs())
        self.set_mode()

    def _save_run_settings(self, request: RunRequest) -> None:
        s = self.settings
        s.set_prompt(request.prompt)
        s.set_model(request.model)
        s.set_temperature(request.temperature)
        s.set_max_tokens(request.max_tokens)

    def closeEvent(self, event: QCloseEvent) -> None:
        if self.presenting:
            self.set_presentation(False)
        if not self.replaying:
            self._save_run_settings(self.request())
        self.settings.set_window_layout(self.saveGeometry(), self.saveState())
        self.settings.sync()
        self.replay.close_player()
        for dialog in self.findChildren(FetchDialog):
            dialog.reject()  # cancels its download: the process would wait for it
        if not self.runner.shutdown(CLOSE_TIMEOUT_S):
            print("specviz: an engine process did not stop in time", file=sys.stderr)
        super().closeEvent(event)
