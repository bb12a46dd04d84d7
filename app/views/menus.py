"""The window's actions, toolbars and menus: their words, keys and places, and which of them
make sense now. What an action does belongs to the window, its exports or its appearance."""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QDoubleSpinBox, QMainWindow, QMenu, QToolBar

from ...board.palette import THEMES
from ...engines.host.run_spec import LaneSpec
from ..state.run_setup import MAX_LANES


class WindowMenus:
    """Built once for a window (an app.main_window.MainWindow: passed in, not imported, as it
    builds this), after its layout, exports and appearance."""

    def __init__(self, window: QMainWindow) -> None:
        self.window = window
        self._build_actions()
        self._build_toolbars()
        self._build_menus()

    def _action(self, text: str, slot, shortcut=None, checkable: bool = False) -> QAction:
        action = QAction(text, self.window, checkable=checkable)
        if shortcut is not None:
            keys = shortcut if isinstance(shortcut, list) else [shortcut]
            action.setShortcuts([QKeySequence(k) for k in keys])
        action.triggered.connect(slot)
        self.window.addAction(action)  # shortcuts work with the menu bar hidden (presentation)
        return action

    def _build_actions(self) -> None:
        w, a = self.window, self._action
        self.run_action = a("Run", w.start_run, ["Ctrl+Return", "Ctrl+Enter"])
        self.stop_action = a("Stop", w.stop, "Esc")
        self.pause_action = a("Pause", w.pause, "Ctrl+P", checkable=True)
        self.add_lane_action = a("Add lane", lambda: w.add_lane(
            LaneSpec("prompt-lookup", auto_k=True)))
        self.add_plain_action = a("Add plain-decoding lane", lambda: w.add_lane(LaneSpec("none")))
        self.open_action = a("Open trace…", w.ask_open_traces, QKeySequence.StandardKey.Open)
        self.live_action = a("Back to live lanes", w.leave_replay)
        self.play_action = a("Play", w.replay.toggle, "Space", checkable=True)
        self.back_action = a("Step back", lambda: w.replay.step(-1), "Left")
        self.forward_action = a("Step forward", lambda: w.replay.step(+1), "Right")
        self.presentation_action = a("Presentation mode", w.set_presentation, "F11",
                                     checkable=True)
        self.rejected_action = a("Show rejected tokens", w.show_rejected, checkable=True)
        self.rejected_action.setChecked(True)
        self.speed = QDoubleSpinBox(minimum=0.1, maximum=1.0, singleStep=0.1, value=1.0,
                                    suffix="×", decimals=1, toolTip="replay speed")
        self.speed.valueChanged.connect(w.replay.set_speed)

    @property
    def _run_actions(self) -> list[QAction]:
        return [self.run_action, self.stop_action, self.pause_action, self.add_lane_action,
                self.add_plain_action]

    @property
    def _replay_actions(self) -> list[QAction]:
        return [self.play_action, self.back_action, self.forward_action, self.live_action]

    def _build_toolbars(self) -> None:
        self.run_bar = self._toolbar("Run", self._run_actions)
        self.replay_bar = self._toolbar("Replay", self._replay_actions)
        self.replay_bar.insertWidget(self.back_action, self.speed)

    def _toolbar(self, name: str, actions: list[QAction]) -> QToolBar:
        bar = self.window.addToolBar(name)
        bar.setObjectName(f"toolbar-{name.lower()}")
        bar.setIconSize(QSize(16, 16))
        bar.addActions(actions)
        return bar

    def _build_menus(self) -> None:
        menus = self.window.menuBar()
        self._file_menu(menus.addMenu("&File"))
        run = menus.addMenu("&Run")
        run.addActions(self._run_actions)
        run.addSeparator()
        run.addAction(self._action("Advise…", self.window.show_advice))
        run.addAction(self._action("Server API key…", self.window.dialogs.ask_server_key))
        menus.addMenu("Re&play").addActions(self._replay_actions)
        self._view_menu(menus.addMenu("&View"))

    def _file_menu(self, file: QMenu) -> None:
        w, a, exports = self.window, self._action, self.window.exports
        file.addAction(self.open_action)
        file.addAction(a("Save traces as JSONL…", exports.save_traces, "Ctrl+S"))
        file.addAction(a("Add model folder…", w.dialogs.ask_model_folder))
        file.addSeparator()
        file.addAction(a("Export window PNG…", exports.window_png, "Ctrl+E"))
        graphs = file.addMenu("Export graph PNG")
        for name in w.graphs.plots:
            graphs.addAction(a(f"{name.title()}…",
                               lambda _c=False, n=name: exports.graph_png(n)))
        file.addAction(a("Export figures CSV…", exports.figures_csv))
        file.addAction(a("Export video…", exports.video))
        file.addAction(a("Export page…", exports.page))
        file.addSeparator()
        file.addAction(a("Quit", w.close, QKeySequence.StandardKey.Quit))

    def _view_menu(self, view: QMenu) -> None:
        w = self.window
        view.addActions([self.presentation_action, self.rejected_action])
        view.addSeparator()
        self.theme_actions = QActionGroup(w)
        for name in THEMES:
            action = self._action(f"{name.title()} theme",
                                  lambda _c=False, n=name: w.set_theme(n), checkable=True)
            action.setChecked(name == w.theme.name)
            self.theme_actions.addAction(action)
            view.addAction(action)
        view.addSeparator()
        view.addActions([w.prompt_dock.toggleViewAction(), w.inspector_dock.toggleViewAction(),
                         w.tree_dock.toggleViewAction(), w.anatomy_dock.toggleViewAction()])

    def check_theme(self, name: str) -> None:
        for action in self.theme_actions.actions():
            action.setChecked(action.text().lower().startswith(name))

    def set_mode(self, running: bool, replay: bool, lanes: int) -> None:
        """Enable what makes sense now: idle, running, or replaying."""
        self.run_action.setEnabled(not running and not replay and lanes > 0)
        self.stop_action.setEnabled(running or replay)
        self.pause_action.setEnabled(running)
        if not running:
            self.pause_action.setChecked(False)
        room = lanes < MAX_LANES and not running and not replay
        self.add_lane_action.setEnabled(room)
        self.add_plain_action.setEnabled(room)
        self.replay_bar.setVisible(replay and not self.window.presenting)
        self.play_action.setChecked(self.window.replay.playing)
        for action in self._replay_actions:
            action.setEnabled(replay)
