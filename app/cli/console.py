"""Printing step events on a terminal: tokens coloured by what happened to them.

Each source's terminal colour is declared with it (engines/sources.py): accepted draft tokens
in green, prompt-copied tokens in cyan, n-gram tokens in yellow, other oracles' in magenta,
the target's own tokens plain; rejected drafts struck through and dim.
"""

from __future__ import annotations

import sys
from typing import TextIO

from ...engines import events as ev
from ...engines import sources

RESET = "\x1b[0m"
REJECTED = sources.TERMINAL_REJECTED
# The kinds the terminal's legend names, each in the colour of the source of its name.
LEGEND = (sources.KIND_DRAFT, sources.KIND_PROMPT, sources.KIND_NGRAM)


class EventPrinter:
    """Writes each step's text as it arrives; colours only on a terminal."""

    def __init__(self, out: TextIO | None = None, colour: bool | None = None,
                 show_rejected: bool = False) -> None:
        self.out = out or sys.stdout  # looked up now: tests and pagers swap sys.stdout
        self.colour = self.out.isatty() if colour is None else colour
        self.show_rejected = show_rejected
        self.ended_line = False  # the streamed text's line was ended before the footer

    def step(self, event: ev.StepEvent) -> None:
        self.out.write(self.render(event))
        self.out.flush()

    def render(self, event: ev.StepEvent) -> str:
        if not self.colour:
            return event.text
        parts = [_paint(t.text, sources.terminal_colour(t.source)) for t in event.accepted]
        if self.show_rejected:
            parts += [_paint(t.text, REJECTED) for t in event.rejected]
        parts.append(event.target.text)
        return "".join(parts)

    def legend(self) -> str:
        if not self.colour:
            return ""
        items = [_paint(sources.KIND_WORDS[kind], sources.terminal_colour(kind))
                 for kind in LEGEND]
        items.append(sources.KIND_WORDS[sources.KIND_TARGET])
        if self.show_rejected:
            items.append(_paint(sources.KIND_WORDS[sources.KIND_REJECTED], REJECTED))
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
