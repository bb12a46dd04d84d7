"""The window's appearance: its theme (saved), presentation mode (big text, no controls, the
theme's high-contrast variant; not saved), and the window's own colours, which follow the
token theme so the chrome matches the lanes."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QMainWindow

from ...board.palette import THEMES, Theme, high_contrast
from ...widgets.plot_style import TEXT_PT
from .lane_widget import LaneWidget

PRESENTATION_FONT_PT = 20.0
PRESENTATION_GRAPH_PT = 16
NORMAL_FONT_PT = 11.0
WINDOW_SPLIT = [450, 550]  # lanes, graphs: the six plots need the height more than text
PRESENTATION_SPLIT = [600, 400]


class Appearance:
    """The theme and presentation mode of one window (an app.main_window.MainWindow: passed
    in, not imported, as it builds this)."""

    def __init__(self, window: QMainWindow, theme: Theme) -> None:
        self.window = window
        self.theme = theme
        self.presenting = False
        self._split_before: list[int] = []

    def set_theme(self, name: str) -> None:
        self.theme = THEMES[name]
        self.window.settings.set_theme(name)
        self.show_theme()
        self.window.menus.check_theme(name)

    def set_presentation(self, on: bool, fullscreen: bool = True) -> None:
        """Big text, no controls: the lanes and the race fill the screen."""
        w = self.window
        self.presenting = on
        w.menus.presentation_action.setChecked(on)
        w.anatomy_dock.before_presenting(on)
        for widget in (w.prompt_dock, w.inspector_dock, w.tree_dock, w.menus.run_bar,
                       w.menus.replay_bar, w.menuBar(), w.statusBar()):
            widget.setVisible(not on)
        w.anatomy_dock.after_presenting(on)
        for name, plot in w.graphs.plots.items():
            plot.setVisible(not on or name == "race")
        w.graphs.cost_curve.setVisible(not on)  # its what-if row too
        self._split(on)
        self.show_theme()
        if on and fullscreen:
            w.showFullScreen()
        elif not on and w.isFullScreen():
            w.showNormal()
        if not on:
            w.set_mode()

    def _split(self, on: bool) -> None:
        """Presenting, the lanes' text is what the room reads: it gets the larger share (and
        the person's own split comes back after)."""
        splitter = self.window.splitter
        if on and not self._split_before:
            self._split_before = splitter.sizes()
        splitter.setSizes(PRESENTATION_SPLIT if on else self._split_before or WINDOW_SPLIT)
        if not on:
            self._split_before = []

    def show_theme(self) -> None:
        """The chosen theme, or its high-contrast variant while presenting (not saved)."""
        w = self.window
        shown = high_contrast(self.theme) if self.presenting else self.theme
        w.graphs.set_text_size(PRESENTATION_GRAPH_PT if self.presenting else TEXT_PT)
        for part in (w.board, w.inspector, w.tree_view, w.anatomy_dock, w.streams_dock):
            part.set_theme(shown)
        apply_theme(shown)
        for lane in w.board.lanes.values():
            self.style_lane(lane)

    def style_lane(self, lane: LaneWidget) -> None:
        lane.set_controls_visible(not self.presenting)
        lane.view.set_font_size(PRESENTATION_FONT_PT if self.presenting else NORMAL_FONT_PT)
        lane.set_text_size(15 if self.presenting else 10)


def apply_theme(theme: Theme) -> None:
    """A Fusion palette from the theme's background and foreground."""
    app = QApplication.instance()
    if app is None:
        return
    if app.style().name().lower() != "fusion":  # a new style object per call otherwise
        app.setStyle("Fusion")
    bg, fg, shade = QColor(theme.background), QColor(theme.foreground), QColor(theme.shade)
    palette = QPalette()
    role = QPalette.ColorRole
    for r, colour in ((role.Window, shade), (role.Base, bg), (role.AlternateBase, shade),
                      (role.Button, shade), (role.WindowText, fg), (role.Text, fg),
                      (role.ButtonText, fg), (role.ToolTipBase, bg), (role.ToolTipText, fg),
                      (role.PlaceholderText, QColor(theme.grid)), (role.Mid, QColor(theme.grid)),
                      (role.Highlight, QColor(theme.lanes[1])), (role.HighlightedText, bg)):
        palette.setColor(r, colour)
    palette.setColor(QPalette.ColorGroup.Disabled, role.Text, QColor(theme.grid))
    palette.setColor(QPalette.ColorGroup.Disabled, role.ButtonText, QColor(theme.grid))
    palette.setColor(QPalette.ColorGroup.Disabled, role.WindowText, QColor(theme.grid))
    app.setPalette(palette)
