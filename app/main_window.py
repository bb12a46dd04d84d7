"""The window: prompt panel, lanes side by side, graphs below, the step inspector beside."""

from __future__ import annotations

import asyncio
import sys
import traceback
from pathlib import Path

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QAction, QActionGroup, QCloseEvent, QColor, QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QDoubleSpinBox,
    QFileDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QSplitter,
    QToolBar,
    QWidget,
)

from ..engines.cost.why_slower import loss_reason
from ..engines.errors import SpecvizError
from ..engines.host.run_spec import LaneSpec, ModelChoice, RunRequest
from ..widgets.graphs import LaneGraphs
from ..widgets.inspector import StepInspector
from ..widgets.palette import DARK, THEMES, Theme, high_contrast
from ..widgets.plot_style import TEXT_PT
from ..widgets.tree_view import TreeView
from . import exports
from .board import LaneBoard
from .board_model import BoardModel
from .checks import Checks
from .fetch import FetchDialog
from .key_dialog import ServerKeyDialog
from .lane_widget import LaneWidget, editor_range
from .live import LiveRunner
from .prompt_panel import PromptPanel, first_prompt
from .remote_engine import RemoteEngine
from .replay import ReplayPlayer
from .replay_control import ReplayControl
from .runs import DEFAULT_TARGET, MAX_LANES, profile_costs, traces_dir
from .settings import AppSettings
from .theme import apply_theme

CLOSE_TIMEOUT_S = 2.0
PRESENTATION_FONT_PT = 20.0
PRESENTATION_GRAPH_PT = 16
WINDOW_SPLIT = [450, 550]  # lanes, graphs: the six plots need the height more than text
PRESENTATION_SPLIT = [600, 400]
NORMAL_FONT_PT = 11.0


class MainWindow(QMainWindow):
    def __init__(self, settings: AppSettings | None = None, interactive: bool = True,
                 remote: RemoteEngine | None = None) -> None:
        super().__init__()
        self.setWindowTitle(f"specviz: engine at {remote.address}" if remote else "specviz")
        self.settings = settings or AppSettings()
        self.theme: Theme = THEMES.get(self.settings.theme(), DARK)
        recent = self.settings.recent_models()
        lanes = BoardModel()  # the lanes as plain data: the board, graphs and exports read it
        self.graphs = LaneGraphs(lanes, self.theme)
        self.board = LaneBoard(lanes, self.graphs, self.theme, recent)
        self.prompt = PromptPanel(recent)
        self.inspector = StepInspector(self.theme)
        self.tree_view = TreeView(self.theme)
        self._tree_pinned = False  # a clicked step stays in the Tree dock; else it follows
        self.runner = LiveRunner(self.board, self, interactive, remote,
                                 self.settings.server_key)
        self.replay = ReplayControl(self.board, self)
        self.run_task: asyncio.Future | None = None
        self._build_layout()
        self.checks = Checks(self.runner, self.board, self.busy, self.prompt.model_choice,
                             self.show_status, self._show_costs)
        self._build_actions()
        self._build_menus()
        self._connect()
        self._restore()
        self._set_mode()

    # ------------------------------------------------------------ construction

    def _build_layout(self) -> None:
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(self.board)
        self.splitter.addWidget(self.graphs)
        self.splitter.setSizes(WINDOW_SPLIT)
        self._split_before: list[int] = []
        self.setCentralWidget(self.splitter)
        self.prompt_dock = self._dock("Prompt", self.prompt, Qt.DockWidgetArea.LeftDockWidgetArea)
        self.inspector_dock = self._dock("Step", self.inspector,
                                         Qt.DockWidgetArea.RightDockWidgetArea)
        self.tree_dock = self._dock("Tree", self.tree_view, Qt.DockWidgetArea.RightDockWidgetArea)
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

    def _action(self, text: str, slot, shortcut=None, checkable: bool = False) -> QAction:
        action = QAction(text, self, checkable=checkable)
        if shortcut is not None:
            keys = shortcut if isinstance(shortcut, list) else [shortcut]
            action.setShortcuts([QKeySequence(k) for k in keys])
        action.triggered.connect(slot)
        self.addAction(action)  # shortcuts work with the menu bar hidden (presentation)
        return action

    def _build_actions(self) -> None:
        a = self._action
        self.run_action = a("Run", self.start_run, ["Ctrl+Return", "Ctrl+Enter"])
        self.stop_action = a("Stop", self.stop, "Esc")
        self.pause_action = a("Pause", self._on_pause, "Ctrl+P", checkable=True)
        self.add_lane_action = a("Add lane", lambda: self.add_lane(
            LaneSpec("prompt-lookup", auto_k=True)))
        self.add_plain_action = a("Add plain-decoding lane",
                                  lambda: self.add_lane(LaneSpec("none")))
        self.open_action = a("Open trace…", self._ask_open_traces, QKeySequence.StandardKey.Open)
        self.live_action = a("Back to live lanes", self.leave_replay)
        self.play_action = a("Play", self.replay.toggle, "Space", checkable=True)
        self.back_action = a("Step back", lambda: self.replay.step(-1), "Left")
        self.forward_action = a("Step forward", lambda: self.replay.step(+1), "Right")
        self.presentation_action = a("Presentation mode", self.set_presentation, "F11",
                                     checkable=True)
        self.rejected_action = a("Show rejected tokens", self._show_rejected, checkable=True)
        self.rejected_action.setChecked(True)
        self.speed = QDoubleSpinBox(minimum=0.1, maximum=1.0, singleStep=0.1, value=1.0,
                                    suffix="×", decimals=1, toolTip="replay speed")
        self.speed.valueChanged.connect(self.replay.set_speed)
        self.run_bar = self._toolbar("Run", [self.run_action, self.stop_action,
                                             self.pause_action, self.add_lane_action,
                                             self.add_plain_action])
        self.replay_bar = self._toolbar("Replay", [self.play_action, self.back_action,
                                                   self.forward_action, self.live_action])
        self.replay_bar.insertWidget(self.back_action, self.speed)

    def _toolbar(self, name: str, actions: list[QAction]) -> QToolBar:
        bar = self.addToolBar(name)
        bar.setObjectName(f"toolbar-{name.lower()}")
        bar.setIconSize(QSize(16, 16))
        bar.addActions(actions)
        return bar

    def _build_menus(self) -> None:
        menus = self.menuBar()
        file = menus.addMenu("&File")
        file.addAction(self.open_action)
        file.addAction(self._action("Save traces as JSONL…", self._save_traces, "Ctrl+S"))
        file.addAction(self._action("Add model folder…", self._ask_model_folder))
        file.addSeparator()
        file.addAction(self._action("Export window PNG…", self._export_window, "Ctrl+E"))
        graphs = file.addMenu("Export graph PNG")
        for name in self.graphs.plots:
            export = lambda _c=False, n=name: self._export_graph(n)  # noqa: E731
            graphs.addAction(self._action(f"{name.title()}…", export))
        file.addAction(self._action("Export figures CSV…", self._export_csv))
        file.addAction(self._action("Export video…", self._export_video))
        file.addAction(self._action("Export page…", self._export_page))
        file.addSeparator()
        file.addAction(self._action("Quit", self.close, QKeySequence.StandardKey.Quit))
        run = menus.addMenu("&Run")
        run.addActions([self.run_action, self.stop_action, self.pause_action,
                        self.add_lane_action, self.add_plain_action])
        run.addSeparator()
        run.addAction(self._action("Server API key…", self.ask_server_key))
        replay = menus.addMenu("Re&play")
        replay.addActions([self.play_action, self.back_action, self.forward_action,
                           self.live_action])
        view = menus.addMenu("&View")
        view.addAction(self.presentation_action)
        view.addAction(self.rejected_action)
        view.addSeparator()
        self.theme_actions = QActionGroup(self)
        for name in THEMES:
            action = self._action(f"{name.title()} theme",
                                  lambda _c=False, n=name: self.set_theme(n), checkable=True)
            action.setChecked(name == self.theme.name)
            self.theme_actions.addAction(action)
            view.addAction(action)
        view.addSeparator()
        view.addActions([self.prompt_dock.toggleViewAction(),
                         self.inspector_dock.toggleViewAction(),
                         self.tree_dock.toggleViewAction()])

    def _connect(self) -> None:
        self.board.hovered.connect(self._on_hover)
        self.board.clicked.connect(self._on_click)
        self.board.refreshed.connect(self._follow_tree)
        self.board.kChanged.connect(self.runner.set_k)
        self.board.autoChanged.connect(self.runner.set_auto)
        self.board.knobChanged.connect(self._on_knob)
        self.board.changed.connect(self._on_lanes_changed)
        self.runner.statusChanged.connect(self.show_status)
        self.runner.finished.connect(self._set_mode)
        self.replay.changed.connect(self._set_mode)
        self.prompt.model.browsed.connect(self._remember_model)
        self.prompt.model.currentIndexChanged.connect(self._show_costs)
        self.graphs.cost_curve.profileRequested.connect(self.checks.profile_machine)

    def _restore(self) -> None:
        s = self.settings
        self.prompt.set_model_choice(s.model(ModelChoice(DEFAULT_TARGET)))
        self.prompt.set_prompt(s.prompt() or first_prompt())
        self.prompt.temperature.setValue(s.temperature())
        self.prompt.max_tokens.setValue(s.max_tokens())
        self._add_lanes(s.lanes())
        if not s.restore_window(self):
            self.resize(1500, 950)
        apply_theme(self.theme)
        self._show_costs()

    # ------------------------------------------------------------ lanes and runs

    def add_lane(self, config: LaneSpec) -> LaneWidget | None:
        lane = self.board.add_lane(config)
        if lane is None:
            self.show_status(f"at most {MAX_LANES} lanes")
        else:
            self._style_lane(lane)
            lane.draft.browsed.connect(self._remember_model)
            lane.draft.picked.connect(lambda _name, lane=lane: self.checks.check_pair(lane))
        self._set_mode()
        return lane

    def _add_lanes(self, configs: list[LaneSpec]) -> None:
        for config in configs:
            self.add_lane(config)

    def request(self) -> RunRequest:
        p = self.prompt
        return RunRequest(prompt=p.prompt(), model=p.model_choice(),
                          max_tokens=p.max_tokens.value(), temperature=p.temperature.value())

    def start_run(self) -> asyncio.Future | None:
        """Run every lane; the task, or None when a run cannot start now."""
        if self.runner.running or self.replaying or not self.board.lanes:
            return None
        request = self.request()
        if not request.prompt.strip():
            self.show_status("type a prompt first")
            return None
        self._save_run_settings(request)
        self._show_costs()
        self._tree_pinned = False
        self.run_task = self.runner.start(request)
        self.run_task.add_done_callback(lambda task: self._run_ended(task, request.model))
        self._set_mode()
        return self.run_task

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
            why = loss_reason(lane.oracle_name(), self.board.model.figures(lane_id), costs)
            if why:
                lane.add_note(why)

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
        self._set_mode()

    def _on_pause(self, paused: bool) -> None:
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
        self.speed.setValue(speed)
        player = self.replay.open(paths, self.speed.value())
        for lane in self.board.lanes.values():
            self._style_lane(lane)
        self.prompt.set_prompt(next((lane.user_prompt for lane in self.board.lanes.values()), ""))
        return player

    def leave_replay(self) -> None:
        """Back to the lanes the person had set up, ready to run."""
        self.replay.leave()
        self.prompt.set_prompt(self.settings.prompt())
        self._add_lanes(self.settings.lanes())
        self._set_mode()

    # ------------------------------------------------------------ view

    def set_theme(self, name: str) -> None:
        self.theme = THEMES[name]
        self.settings.set_theme(name)
        self._show_theme()
        for action in self.theme_actions.actions():
            action.setChecked(action.text().lower().startswith(name))

    def set_presentation(self, on: bool, fullscreen: bool = True) -> None:
        """Big text, no controls: the lanes and the race fill the screen."""
        self.presentation_action.setChecked(on)
        for widget in (self.prompt_dock, self.inspector_dock, self.tree_dock, self.run_bar,
                       self.replay_bar, self.menuBar(), self.statusBar()):
            widget.setVisible(not on)
        for name, plot in self.graphs.plots.items():
            plot.setVisible(not on or name == "race")
        self.graphs.cost_curve.setVisible(not on)  # its what-if row too
        # Presenting, the lanes' text is what the room reads: it gets the larger share (and
        # the person's own split comes back after).
        if on and not self._split_before:
            self._split_before = self.splitter.sizes()
        self.splitter.setSizes(PRESENTATION_SPLIT if on else self._split_before or WINDOW_SPLIT)
        if not on:
            self._split_before = []
        self._show_theme()
        if on and fullscreen:
            self.showFullScreen()
        elif not on and self.isFullScreen():
            self.showNormal()
        if not on:
            self._set_mode()

    def _show_theme(self) -> None:
        """The chosen theme, or its high-contrast variant while presenting (not saved)."""
        shown = high_contrast(self.theme) if self.presenting else self.theme
        self.graphs.set_text_size(PRESENTATION_GRAPH_PT if self.presenting else TEXT_PT)
        self.board.set_theme(shown)
        self.inspector.set_theme(shown)
        self.tree_view.set_theme(shown)
        apply_theme(shown)
        for lane in self.board.lanes.values():
            self._style_lane(lane)

    @property
    def presenting(self) -> bool:
        return self.presentation_action.isChecked()

    def _style_lane(self, lane: LaneWidget) -> None:
        lane.set_controls_visible(not self.presenting)
        lane.view.set_font_size(PRESENTATION_FONT_PT if self.presenting else NORMAL_FONT_PT)
        lane.set_text_size(15 if self.presenting else 10)

    def _show_rejected(self, show: bool) -> None:
        for lane in self.board.lanes.values():
            lane.view.set_show_rejected(show)

    def show_status(self, message: str, busy: bool = False) -> None:
        self.status_text.setText(message)
        self.busy.setVisible(busy)

    def _set_mode(self) -> None:
        """Enable what makes sense now: idle, running, or replaying."""
        running, replay = self.runner.running, self.replaying
        self.run_action.setEnabled(not running and not replay and bool(self.board.lanes))
        self.stop_action.setEnabled(running or replay)
        self.pause_action.setEnabled(running)
        if not running:
            self.pause_action.setChecked(False)
        room = len(self.board.lanes) < MAX_LANES and not running and not replay
        self.add_lane_action.setEnabled(room)
        self.add_plain_action.setEnabled(room)
        self.prompt.set_editable(not running and not replay)
        self.replay_bar.setVisible(replay and not self.presenting)
        self.play_action.setChecked(self.replay.playing)
        for action in (self.play_action, self.back_action, self.forward_action,
                       self.live_action):
            action.setEnabled(replay)

    # ------------------------------------------------------------ hover and click

    def _on_hover(self, lane: LaneWidget, span) -> None:
        where = editor_range(span, lane.prompt_text, lane.user_prompt)
        if where is None or self.prompt.prompt() != lane.user_prompt:
            self.prompt.clear_highlight()
            return
        colour = QColor(self.theme.prompt)
        colour.setAlpha(110)
        self.prompt.highlight(*where, colour)

    def _on_knob(self, lane_id: str, name: str, value: int) -> None:
        self.runner.set_knob(lane_id, name, value)  # a refusal is shown in the lane

    def _on_click(self, lane: LaneWidget, step: int) -> None:
        steps = self.board.state(lane.lane_id).steps
        if 0 <= step < len(steps):
            self.inspector.show_step(steps[step])
            self.tree_view.show_step(steps[step])
            self._tree_pinned = True  # the Tree dock keeps this step until the next run

    def _follow_tree(self) -> None:
        """Until a token is clicked, the Tree dock shows the newest tree step as lanes run."""
        if self._tree_pinned or not self.tree_dock.isVisible():
            return
        for state in self.board.model.lanes.values():
            last = state.last_tree_step()
            if last is not None:
                if last is not self.tree_view.event:
                    self.tree_view.show_step(last)
                return

    # ------------------------------------------------------------ files

    def ask_server_key(self) -> ServerKeyDialog:
        """The API key of a server (the first server lane's, to begin with)."""
        url = next((c.server for c in self.board.configs() if c.server), "")
        dialog = ServerKeyDialog(self.settings, url, self)
        dialog.accepted.connect(lambda: self.show_status(
            f"key for {dialog.url.text().strip()} stored" if dialog.key.text().strip()
            else f"no key kept for {dialog.url.text().strip()}"))
        dialog.open()
        return dialog

    def _ask_open_traces(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Open traces", str(traces_dir()),
                                                "Traces (*.jsonl);;All files (*)")
        if not paths:
            return
        try:
            self.open_replay([Path(p) for p in paths[:MAX_LANES]])
        except SpecvizError as exc:  # traces of different prompts, a corrupt one
            QMessageBox.warning(self, "specviz", str(exc))

    def _save_traces(self) -> None:
        paths = [lane.trace_path for lane in self.board.lanes.values() if lane.trace_path]
        if not paths:
            self.show_status("no traces yet: run first")
            return
        folder = QFileDialog.getExistingDirectory(self, "Save traces into")
        if folder:
            self._report(lambda: exports.copy_traces(paths, folder), "saved {} traces")

    def _export_window(self) -> None:
        path = self._ask_save("Export window", "specviz.png", "PNG images (*.png)")
        if path:
            self._report(lambda: exports.save_png(self, path), "saved {}")

    def _export_graph(self, name: str) -> None:
        path = self._ask_save(f"Export {name} graph", f"specviz-{name}.png", "PNG images (*.png)")
        if path:  # the plot with the lanes' key above it
            self._report(lambda: exports.save_png(self.graphs.picture(name), path), "saved {}")

    def _export_csv(self) -> None:
        path = self._ask_save("Export figures", "specviz-figures.csv", "CSV files (*.csv)")
        if path:
            self._report(lambda: exports.write_figures_csv(path, self.figure_rows()), "saved {}")

    def _export_video(self) -> None:
        from .export.from_window import export_video_from  # it draws with a MainWindow

        export_video_from(self)

    def _export_page(self) -> None:
        from .export.from_window import export_page_from

        export_page_from(self)

    def figure_rows(self) -> list[dict]:
        rows = []
        for lane_id, lane in self.board.lanes.items():
            config = lane.config()
            rows.append({"lane": lane_id, "oracle": lane.oracle_name(), "k": config.k,
                         "trace": str(lane.trace_path or ""), **self.board.model.figures(lane_id)})
        return rows

    def _ask_save(self, title: str, name: str, kinds: str) -> str:
        path, _ = QFileDialog.getSaveFileName(self, title, name, kinds)
        return path

    def _report(self, action, done: str) -> None:
        try:
            result = action()
        except (OSError, SpecvizError) as exc:
            QMessageBox.warning(self, "specviz", str(exc))
            return
        self.show_status(done.format(len(result) if isinstance(result, list) else result))

    # ------------------------------------------------------------ settings and closing

    def _on_lanes_changed(self) -> None:
        if not self.replaying:  # replayed lanes are not the person's set-up
            self.settings.set_lanes(self.board.configs())
        self._set_mode()

    def _ask_model_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder of models")
        if folder:
            self.add_model_folder(folder)

    def add_model_folder(self, folder: str) -> None:
        """Search `folder` for models from now on; the pickers list what it holds."""
        from .model_combo import local_models

        self.settings.set_model_folders([*self.settings.model_folders(), folder])
        found = [m for m in local_models(refresh=True) if Path(m.path).is_relative_to(folder)]
        for combo in [self.prompt.model, *(lane.draft for lane in self.board.lanes.values())]:
            combo.reload()
        self.show_status(f"{folder}: {len(found)} model(s) found there")

    def _remember_model(self, path: str) -> None:
        self.settings.add_recent_model(path)

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
        self.settings.save_window(self)
        self.settings.sync()
        self.replay.close_player()
        for dialog in self.findChildren(FetchDialog):
            dialog.reject()  # cancels its download: the process would wait for it
        if not self.runner.shutdown(CLOSE_TIMEOUT_S):
            print("specviz: an engine process did not stop in time", file=sys.stderr)
        super().closeEvent(event)
