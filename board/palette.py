"""Colours for token kinds and lanes, in a dark and a light theme.

Hues follow the Okabe-Ito colour-blind-safe set; each theme darkens or lightens them so token
text keeps at least 4.5:1 contrast against the background and the alternate step shade
(rejected tokens, deliberately faded, keep 3:1). Plain hex strings: no Qt needed here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engines.events import ProposedToken
from ..engines.sources import (  # noqa: F401  (the kinds are the views' names for them)
    KIND_DRAFT,
    KIND_EARLIER,
    KIND_NGRAM,
    KIND_OTHER,
    KIND_PROMPT,
    KIND_REJECTED,
    KIND_TARGET,
    KIND_WORDS,
    KINDS,
)
from ..engines.sources import kind_of as source_kind  # an accepted token's kind by its source

# The token kinds the views colour and their legend words: engines/sources.py, where each
# proposal source names its kind.
KIND_LABELS = KIND_WORDS


def proposal_kind(token: ProposedToken) -> str:
    """The colour kind of a proposed token: rejected, else by its source."""
    if not token.accepted:
        return KIND_REJECTED
    return source_kind(token.source)


@dataclass(frozen=True, slots=True)
class Theme:
    name: str
    background: str
    foreground: str
    shade: str  # background of every other step in the token view
    grid: str  # axis lines and ticks in the graphs
    draft: str
    prompt: str
    ngram: str
    other: str
    earlier: str
    target: str
    rejected: str  # faded; the view also strikes it through
    lanes: tuple[str, str, str, str]

    def kind_colour(self, kind: str) -> str:
        return getattr(self, kind)

    def lane_colour(self, index: int) -> str:
        return self.lanes[index % len(self.lanes)]


DARK = Theme(
    name="dark",
    background="#1b1d23",
    foreground="#e4e6eb",
    shade="#2b2f3a",
    grid="#8a8f99",
    draft="#56b4e9",
    prompt="#e69f00",
    ngram="#2fc99a",
    other="#e38cc0",
    earlier="#f0e442",
    target="#e4e6eb",
    rejected="#b2766a",
    lanes=("#e69f00", "#56b4e9", "#009e73", "#cc79a7"),
)

LIGHT = Theme(
    name="light",
    background="#ffffff",
    foreground="#1f2328",
    shade="#e9edf3",
    grid="#57606a",
    draft="#0067a3",
    prompt="#9c5700",
    ngram="#00775a",
    other="#a8347a",
    earlier="#7a6a00",
    target="#1f2328",
    rejected="#a2766e",
    lanes=("#0072b2", "#d55e00", "#009e73", "#cc79a7"),
)

THEMES: dict[str, Theme] = {"dark": DARK, "light": LIGHT}

# For a projector: pure black or white behind the text, and every colour at 7:1 or more
# against both step shades (rejected tokens, still struck through, at 5:1).
DARK_CONTRAST = Theme(
    name="dark-contrast",
    background="#000000",
    foreground="#ffffff",
    shade="#1c1f26",
    grid="#c9ced6",
    draft="#7fd0ff",
    prompt="#ffb627",
    ngram="#3ee6b0",
    other="#ffa3dc",
    earlier="#fff275",
    target="#ffffff",
    rejected="#d9968a",
    lanes=("#ffb627", "#7fd0ff", "#3ee6b0", "#ffa3dc"),
)

LIGHT_CONTRAST = Theme(
    name="light-contrast",
    background="#ffffff",
    foreground="#000000",
    shade="#e8e8e8",
    grid="#333333",
    draft="#004b7a",
    prompt="#6e3c00",
    ngram="#00563f",
    other="#7f1a57",
    earlier="#4d4300",
    target="#000000",
    rejected="#8a4f44",
    lanes=("#004b7a", "#8f3700", "#005c44", "#8f2466"),
)

HIGH_CONTRAST: dict[str, Theme] = {"dark": DARK_CONTRAST, "light": LIGHT_CONTRAST}


def high_contrast(theme: Theme) -> Theme:
    """The presentation-mode variant of a theme (itself if it is one already)."""
    return HIGH_CONTRAST.get(theme.name, theme)
