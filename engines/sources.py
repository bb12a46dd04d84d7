"""Where a proposed token came from (its source) and how each source is shown, declared once.

The step events name sources (events.SOURCES); the window paints a source with its colour
kind (board/palette.py) and names the kind in its legends (board/legend_kinds.py, the
exported page); `specviz run` colours it on a terminal (app/cli/console.py); a server lane
may colour its accepted drafts as any source a serving engine drafts with
(engines/host/server_lanes.py). A new source is one row below.
"""

from __future__ import annotations

from dataclasses import dataclass

# The colour kinds the views paint tokens with; each names a colour of board.palette.Theme.
KIND_DRAFT = "draft"
KIND_PROMPT = "prompt"
KIND_NGRAM = "ngram"
KIND_OTHER = "other"
KIND_EARLIER = "earlier"  # remembered from an earlier run (suffix decoding's memory)
KIND_TARGET = "target"
KIND_REJECTED = "rejected"

# What a legend calls each kind (the window, the exported page, the terminal).
KIND_WORDS = {
    KIND_DRAFT: "draft model",
    KIND_PROMPT: "prompt copy",
    KIND_NGRAM: "n-gram",
    KIND_OTHER: "other oracle",
    KIND_EARLIER: "earlier run",
    KIND_TARGET: "target",
    KIND_REJECTED: "rejected",
}
KINDS = tuple(KIND_WORDS)

# ANSI colours of `specviz run`'s stream on a terminal.
GREEN, CYAN, YELLOW, MAGENTA = "\x1b[32m", "\x1b[36m", "\x1b[33m", "\x1b[35m"
TERMINAL_REJECTED = "\x1b[2;9m"  # dim + strike-through


@dataclass(frozen=True)
class Source:
    name: str  # what StepEvent's proposed tokens carry
    kind: str  # the colour kind the window paints it with
    terminal: str = MAGENTA  # its colour on a terminal
    served: bool = False  # a serving engine drafts this way (`--server-drafts` offers it)


SOURCE_TABLE = (
    Source("draft", KIND_DRAFT, GREEN, served=True),
    Source("prompt", KIND_PROMPT, CYAN, served=True),
    Source("ngram", KIND_NGRAM, YELLOW, served=True),
    Source("rule", KIND_OTHER),
    Source("lookahead", KIND_OTHER),
    Source("medusa", KIND_OTHER, served=True),
    Source("early-exit", KIND_OTHER),
    Source("tree", KIND_DRAFT),
    Source("eagle", KIND_OTHER, served=True),
    Source("suffix", KIND_PROMPT),  # suffix decoding: this run's text
    Source("memory", KIND_EARLIER),  # suffix decoding: an earlier run's output
)
SOURCES = tuple(s.name for s in SOURCE_TABLE)
SERVED = tuple(s.name for s in SOURCE_TABLE if s.served)

_BY_NAME = {s.name: s for s in SOURCE_TABLE}


def kind_of(source: str) -> str:
    """The colour kind of an accepted token from `source` (one this version does not know,
    from a newer trace: other)."""
    known = _BY_NAME.get(source)
    return known.kind if known else KIND_OTHER


def terminal_colour(source: str) -> str:
    known = _BY_NAME.get(source)
    return known.terminal if known else MAGENTA
