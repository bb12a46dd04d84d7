"""Which step the window's docks show: a hovered token lights its source in the prompt, a
clicked one opens its step in the Step, Tree and Anatomy docks, and until a click the Tree
dock follows the newest tree step as lanes run."""

from __future__ import annotations

from PySide6.QtGui import QColor
from PySide6.QtWidgets import QMainWindow

from ...board.kinds import KIND_PROMPT
from .lane_widget import LaneWidget, editor_range


class StepFocus:
    """The docks' step for one window (an app.main_window.MainWindow: passed in, not imported,
    as it builds this), after its layout."""

    def __init__(self, window: QMainWindow) -> None:
        self.window = window
        self.pinned = False  # a clicked step stays in the Tree dock; else it follows
        window.board.hovered.connect(self.hover)
        window.board.clicked.connect(self.click)
        window.board.refreshed.connect(self.follow_tree)

    def hover(self, lane: LaneWidget, span) -> None:
        prompt = self.window.prompt
        where = editor_range(span, lane.prompt_text, lane.user_prompt)
        if where is None or prompt.shown() != lane.user_prompt:
            prompt.clear_highlight()
            return
        colour = QColor(self.window.theme.kind_colour(KIND_PROMPT))
        colour.setAlpha(110)
        prompt.highlight(*where, colour)

    def click(self, lane: LaneWidget, step: int) -> None:
        w = self.window
        steps = w.board.state(lane.lane_id).steps
        if 0 <= step < len(steps):
            w.inspector.show_step(steps[step])
            w.tree_view.show_step(steps[step])
            w.anatomy_dock.show_step(w.board, lane, step)
            self.pinned = True  # the Tree dock keeps this step until the next run

    def follow_tree(self) -> None:
        """Until a token is clicked, the Tree dock shows the newest tree step as lanes run."""
        w = self.window
        if self.pinned or not w.tree_dock.isVisible():
            return
        for state in w.board.model.lanes.values():
            last = state.last_tree_step()
            if last is not None:
                if last is not w.tree_view.event:
                    w.tree_view.show_step(last)
                return
