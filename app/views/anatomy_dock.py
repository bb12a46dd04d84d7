"""The Anatomy dock: the step of a clicked token taken apart in stages, beside the Step dock.

It reads what the board holds (the lane's steps, its prompt, the plain lane of the race for a
plain step's cost), so a replayed trace plays here as a live run does, with no model loaded.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDockWidget,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ...board.anatomy_stages import anatomy, context_pieces, plain_cost
from ...board.palette import DARK, THEMES, Theme
from ...widgets.anatomy import AnatomyView


class AnatomyDock(QDockWidget):
    """Made by the window (an app.main_window.MainWindow, passed in), tabbed with its Step
    dock, which stays in front: a click fills both."""

    def __init__(self, window: QMainWindow) -> None:
        super().__init__("Anatomy", window)
        self.setObjectName("dock-anatomy")
        self._window = window
        self._behind = False  # hidden for presentation mode while open behind the Step dock
        # Whether its tab is the one shown: a tab behind another stays "visible" off screen.
        self.in_front = False
        self.visibilityChanged.connect(self._set_in_front)
        self.view = AnatomyView(THEMES.get(window.settings.theme(), DARK))
        self.setWidget(self._body())
        window.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self)
        window.tabifyDockWidget(window.inspector_dock, self)
        window.inspector_dock.raise_()
        self.view.stageChanged.connect(self._show_where)
        self.view.playingChanged.connect(self._show_playing)

    def _body(self) -> QWidget:
        self.back_button = QToolButton(text="◀", toolTip="stage before (Left, PageUp)")
        self.play_button = QToolButton(text="⏵", toolTip="play or pause (Space)")
        self.forward_button = QToolButton(text="▶", toolTip="next stage (Right, PageDown)")
        self.where = QLabel("click a token")
        # The Step dock beside it is narrow: the label gives way rather than widen the window.
        self.where.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.back_button.clicked.connect(self.view.back)
        self.play_button.clicked.connect(self.view.toggle_play)
        self.forward_button.clicked.connect(self.view.forward)
        row = QHBoxLayout()
        for widget in (self.back_button, self.play_button, self.forward_button, self.where):
            row.addWidget(widget)
        row.addStretch(0)
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view, 1)
        layout.addLayout(row)
        return body

    def show_step(self, board, lane, step: int) -> None:
        """Step `step` of this lane (a LaneWidget of the window's LaneBoard)."""
        steps = board.state(lane.lane_id).steps
        if not 0 <= step < len(steps):
            return
        self.view.set_playing(False)
        self.view.set_anatomy(anatomy(steps[step], context_pieces(lane.user_prompt, steps[:step]),
                                      plain_cost(steps, self._baseline(board, lane))))

    def _baseline(self, board, lane) -> list:
        """The plain lane's steps in this race (none for the plain lane itself)."""
        baseline = board.model.baseline()
        if baseline is None or baseline == lane.lane_id:
            return []
        return board.state(baseline).steps

    def set_theme(self, theme: Theme) -> None:
        self.view.set_theme(theme)

    def before_presenting(self, on: bool) -> None:
        """Presentation mode hides the Step dock: the Anatomy, open behind it, would take its
        place on screen (and in every exported video of a race). It stays only where it was
        in front, as a talk about it wants."""
        if on and self.toggleViewAction().isChecked() and not self.in_front:
            self._behind = True
            self.hide()

    def after_presenting(self, on: bool) -> None:
        if not on and self._behind:
            self._behind = False
            self.show()
            self._window.inspector_dock.raise_()

    def _set_in_front(self, shown: bool) -> None:
        self.in_front = shown

    def _show_where(self, index: int) -> None:
        stage = self.view.stage
        self.where.setText("" if stage is None else
                           f"stage {index + 1}/{self.view.stage_count}: {stage.name}")

    def _show_playing(self, playing: bool) -> None:
        self.play_button.setText("⏸" if playing else "⏵")
