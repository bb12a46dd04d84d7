"""The colour kinds a token is painted with, one row each: its legend words, the sources it
paints, its colour in each theme and on a terminal.

A proposed token names its source (the registry's `OracleInfo.sources`); the window, the
exported page, the video and `specviz run`'s terminal paint it by its source's kind, and a
lane's legend names the kinds of its oracle's sources (legend_kinds.py). A new kind of token
with a colour of its own is one row below; the themes (palette.py), the page's colour rules
(app/export/page.py) and the legends read it from here.

Hues follow the Okabe-Ito colour-blind-safe set; each theme darkens or lightens them so token
text keeps at least 4.5:1 contrast against the background and the alternate step shade
(rejected tokens, deliberately faded, keep 3:1); the high-contrast themes, for a projector,
7:1 (rejected 5:1).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engines.events import ProposedToken

# ANSI colours of `specviz run`'s stream on a terminal.
GREEN, CYAN, YELLOW, MAGENTA = "\x1b[32m", "\x1b[36m", "\x1b[33m", "\x1b[35m"
PLAIN = ""  # the terminal's own colour
TERMINAL_REJECTED = "\x1b[2;9m"  # dim + strike-through


@dataclass(frozen=True)
class Kind:
    name: str  # the views' name for it (the page's CSS class k-NAME)
    words: str  # what a legend calls it
    sources: tuple[str, ...]  # the sources of accepted tokens painted with it
    dark: str
    light: str
    dark_contrast: str
    light_contrast: str
    terminal: str = MAGENTA

    def colour(self, theme: str) -> str:
        """Its colour in the theme named `theme` ("dark", "light-contrast"...)."""
        return getattr(self, theme.replace("-", "_"))


KIND_DRAFT = "draft"
KIND_PROMPT = "prompt"
KIND_NGRAM = "ngram"
KIND_OTHER = "other"
KIND_EARLIER = "earlier"
KIND_TARGET = "target"
KIND_REJECTED = "rejected"

# Every kind, by its name, in the order legends list them.
KINDS: dict[str, Kind] = {kind.name: kind for kind in (
    Kind(KIND_DRAFT, "draft model", ("draft", "tree"),
         "#56b4e9", "#0067a3", "#7fd0ff", "#004b7a", GREEN),
    Kind(KIND_PROMPT, "prompt copy", ("prompt", "suffix"),  # suffix decoding: this run's text
         "#e69f00", "#9c5700", "#ffb627", "#6e3c00", CYAN),
    Kind(KIND_NGRAM, "n-gram", ("ngram",),
         "#2fc99a", "#00775a", "#3ee6b0", "#00563f", YELLOW),
    Kind(KIND_OTHER, "other oracle", ("rule", "lookahead", "medusa", "early-exit", "eagle"),
         "#e38cc0", "#a8347a", "#ffa3dc", "#7f1a57"),
    # remembered from an earlier run (suffix decoding's memory)
    Kind(KIND_EARLIER, "earlier run", ("memory",),
         "#f0e442", "#7a6a00", "#fff275", "#4d4300"),
    # the target's own tokens: each theme's text colour
    Kind(KIND_TARGET, "target", (), "#e4e6eb", "#1f2328", "#ffffff", "#000000", PLAIN),
    # faded; the views also strike it through
    Kind(KIND_REJECTED, "rejected", (), "#b2766a", "#a2766e", "#d9968a", "#8a4f44",
         TERMINAL_REJECTED),
)}


def words(kind: str) -> str:
    """What a legend calls `kind`."""
    return KINDS[kind].words


def kind_of(source: str) -> str:
    """The colour kind of an accepted token from `source` (one no row names, from a newer
    trace or an oracle without a colour of its own: other)."""
    return next((kind.name for kind in KINDS.values() if source in kind.sources), KIND_OTHER)


def proposal_kind(token: ProposedToken) -> str:
    """The colour kind of a proposed token: rejected, else by its source."""
    if not token.accepted:
        return KIND_REJECTED
    return kind_of(token.source)


def terminal_colour(source: str) -> str:
    """The terminal colour of an accepted token from `source` (its kind's)."""
    return KINDS[kind_of(source)].terminal
