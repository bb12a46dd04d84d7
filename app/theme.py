"""The window's own colours follow the token theme, so the chrome matches the lanes."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

from ..widgets.palette import Theme


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
