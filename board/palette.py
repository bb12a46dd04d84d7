"""The window's themes: a dark and a light one, and a high-contrast variant of each for
presentation mode. A theme holds the colours around the tokens (background, text, the
alternate step shade, the graphs' grid, one colour a lane); the tokens' own colours are their
kinds' (kinds.py, one row a kind with its colour in every theme). Plain hex strings: no Qt
needed here.
"""

from __future__ import annotations

from dataclasses import dataclass

from .kinds import KINDS


@dataclass(frozen=True, slots=True)
class Theme:
    name: str
    background: str
    foreground: str
    shade: str  # background of every other step in the token view
    grid: str  # axis lines and ticks in the graphs
    lanes: tuple[str, str, str, str]

    def kind_colour(self, kind: str) -> str:
        return KINDS[kind].colour(self.name)

    def lane_colour(self, index: int) -> str:
        return self.lanes[index % len(self.lanes)]


# One row a theme: its name, background, text, step shade, grid and lane colours.
DARK = Theme("dark", "#1b1d23", "#e4e6eb", "#2b2f3a", "#8a8f99",
             ("#e69f00", "#56b4e9", "#009e73", "#cc79a7"))
LIGHT = Theme("light", "#ffffff", "#1f2328", "#e9edf3", "#57606a",
              ("#0072b2", "#d55e00", "#009e73", "#cc79a7"))
# For a projector: pure black or white behind the text, and every colour at 7:1 or more
# against both step shades (rejected tokens, still struck through, at 5:1).
DARK_CONTRAST = Theme("dark-contrast", "#000000", "#ffffff", "#1c1f26", "#c9ced6",
                      ("#ffb627", "#7fd0ff", "#3ee6b0", "#ffa3dc"))
LIGHT_CONTRAST = Theme("light-contrast", "#ffffff", "#000000", "#e8e8e8", "#333333",
                       ("#004b7a", "#8f3700", "#005c44", "#8f2466"))

THEMES: dict[str, Theme] = {"dark": DARK, "light": LIGHT}
HIGH_CONTRAST: dict[str, Theme] = {"dark": DARK_CONTRAST, "light": LIGHT_CONTRAST}


def high_contrast(theme: Theme) -> Theme:
    """The presentation-mode variant of a theme (itself if it is one already)."""
    return HIGH_CONTRAST.get(theme.name, theme)
