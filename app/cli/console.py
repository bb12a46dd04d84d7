"""Printing step events on a terminal: tokens coloured by what happened to them.

Each kind's terminal colour is declared in its row (board/kinds.py): accepted tokens of a
draft model in green, copied from the prompt in cyan, from an n-gram cache in yellow, other
oracles' and earlier runs' in magenta, the target's own tokens plain; rejected drafts struck
through and dim. Colour follows the terminal's conventions (`wants_colour`).
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from ...board import kinds
from ...engines import events as ev
from ...engines import speedup

RESET = "\x1b[0m"
REJECTED = kinds.TERMINAL_REJECTED
# The kinds the terminal's legend names, each in its colour.
LEGEND = (kinds.KIND_DRAFT, kinds.KIND_PROMPT, kinds.KIND_NGRAM)


def wants_colour(out: TextIO) -> bool:
    """Whether to write colour codes to `out`: NO_COLOR set to anything says never
    (no-color.org, and it wins); FORCE_COLOR set to anything says always, into a pipe too
    (force-color.org); else on a terminal, unless it says it is a dumb one (TERM=dumb)."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("TERM") == "dumb":
        return False
    try:
        return out.isatty()
    except (AttributeError, ValueError):  # no file behind it, or a closed one
        return False


class EventPrinter:
    """Writes each step's text as it arrives; colours as `wants_colour` says."""

    def __init__(self, out: TextIO | None = None, colour: bool | None = None,
                 show_rejected: bool = False) -> None:
        self.out = out or sys.stdout  # looked up now: tests and pagers swap sys.stdout
        self.colour = wants_colour(self.out) if colour is None else colour
        self.show_rejected = show_rejected
        self.ended_line = False  # the streamed text's line was ended before the footer

    def step(self, event: ev.StepEvent) -> None:
        self.out.write(self.render(event))
        self.out.flush()

    def render(self, event: ev.StepEvent) -> str:
        if not self.colour:
            return event.text
        parts = [_paint(t.text, kinds.terminal_colour(t.source)) for t in event.accepted]
        if self.show_rejected:
            parts += [_paint(t.text, REJECTED) for t in event.rejected]
        parts.append(event.target.text)
        return "".join(parts)

    def legend(self) -> str:
        if not self.colour:
            return ""
        items = [_paint(kinds.words(kind), kinds.KINDS[kind].terminal) for kind in LEGEND]
        items.append(kinds.words(kinds.KIND_TARGET))
        if self.show_rejected:
            items.append(_paint(kinds.words(kinds.KIND_REJECTED), REJECTED))
        return "legend: " + " ".join(items)


def _paint(text: str, code: str) -> str:
    return f"{code}{text}{RESET}" if text else ""


def summary_line(summary: ev.SummaryEvent) -> str:
    t = summary.totals
    line = (f"{t.tokens} tokens in {t.compute_ms / 1000:.2f} s, {summary.tok_per_s:.1f} tokens/s"
            f" ({summary.reason}; prompt {summary.prefill_ms / 1000:.2f} s)")
    if t.proposed:
        line += (f"; {t.steps} steps, acceptance {t.acceptance_rate:.0%}, "
                 f"{t.mean_accepted_tokens:.2f} tokens/step")
    if t.declined:
        line += f", nothing proposed in {t.decline_rate:.0%} of steps"
    return line


def speedup_words(result: dict) -> str:
    """"1.18x (1.09-1.27 over 3 rounds): faster", from the JSON's fields."""
    words = speedup.words(result)
    if result.get("drafted") is False:
        words += ", proposed nothing"
    return words
