"""Stalled steps: target passes that other work on the machine held up, found and set aside.

When load comes and goes on a small machine, a few passes take several times their price:
a process waking on a core that a decoding thread was spinning on, the thread count not yet
following the free cores. They land on one side of a comparison or the other by chance, and a
stretch holding one weighs several times its share of the run: plain decoding against itself
read 1.26x (1.06-1.50) and 1.21x (1.01-1.44) "faster" in 2 of 6 such runs.

So each side's passes are priced by their width (the median of that side's passes of the
same width: a pass costs what its width costs, whatever its guesses) and read against the
machine's pace around them (the median of the nearest passes' time over their price). A pass
that took more than STALL times what that pace gives is a stall: its time is taken at the
pace, and the step's guessing and bookkeeping are left as they were. A load that comes and
stays slows every pass after it, moves the pace with it and is no stall; it is the comparison
by turns that shares such load fairly between the two sides.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# A pass this many times its neighbours' pace is a stall. On a 2-core EPYC, smollm2's one-token
# passes came within 1.4x of their neighbours' median in 99 of 100 (never 2x in 10,240) quiet
# and beside a steady busy process; with a busy process starting or stopping mid-run, 8 of
# 5,120 took 2-8.5x (benchmarks/stall_verdicts.py's kept steps, 2026-12-02).
STALL = 2.0
NEIGHBOURS = 8  # passes on each side of a pass that set the pace it is read against
SAME_WIDTH = 3  # passes of a width it takes to price that width (others: between them)


@dataclass(frozen=True, slots=True)
class StepTime:
    """What a comparison needs of a step: tokens written, positions its target pass verified,
    the step's whole compute ms and its pass's ms."""

    tokens: int
    width: int
    ms: float
    pass_ms: float


def unstalled(steps: Sequence[StepTime]) -> tuple[list[float], int]:
    """Each step's ms with a stalled pass taken at its neighbours' pace, and how many were."""
    prices = _prices(steps)
    price = [_price(prices, s.width) if s.pass_ms > 0 else None for s in steps]
    pace = [s.pass_ms / p if p else None for s, p in zip(steps, price)]
    out, stalls = [], 0
    for i, step in enumerate(steps):
        expected = _expected(pace, i, price[i])
        if expected is not None and step.pass_ms > STALL * expected:
            out.append(step.ms - step.pass_ms + expected)
            stalls += 1
        else:
            out.append(step.ms)
    return out, stalls


def _prices(steps: Sequence[StepTime]) -> dict[int, float]:
    """The median pass of every width seen SAME_WIDTH times or more, with time to it."""
    by_width: dict[int, list[float]] = {}
    for step in steps:
        if step.pass_ms > 0:
            by_width.setdefault(step.width, []).append(step.pass_ms)
    return {w: statistics.median(t) for w, t in by_width.items() if len(t) >= SAME_WIDTH}


def _price(prices: dict[int, float], width: int) -> float | None:
    """A pass's price by its width: its width's median, else on the line between the nearest
    priced widths around it, else above the widest as far again as it is wider (a pass costs
    less than in proportion to its width on every machine seen, so this prices it dear and
    calls it a stall only the more surely). A speculating lane's passes spread over many
    widths; priced only where a width came often, its stalls stayed in while plain
    decoding's were set aside. None below the narrowest priced width."""
    if width in prices:
        return prices[width]
    below = max((w for w in prices if w < width), default=None)
    above = min((w for w in prices if w > width), default=None)
    if below is None:
        return None
    if above is None:
        return prices[below] * width / below
    share = (width - below) / (above - below)
    return prices[below] + (prices[above] - prices[below]) * share


def _expected(pace: Sequence[float | None], i: int, price: float | None) -> float | None:
    """What pass i would have taken at the pace of the passes around it (None: unpriced)."""
    if price is None or pace[i] is None:
        return None
    near = [p for p in pace[max(0, i - NEIGHBOURS): i + NEIGHBOURS + 1] if p is not None]
    return statistics.median(near) * price


def of_events(steps) -> list[StepTime]:
    """StepTimes of StepEvents, their ms the totals' differences (what tokens/s divides by)."""
    out, before = [], 0.0
    for step in steps:
        ms = step.totals.compute_ms - before
        before = step.totals.compute_ms
        width = len(step.tree) + 1 if step.tree else len(step.proposed) + 1
        out.append(StepTime(len(step.emitted_ids), width, ms, step.timing.verify_ms))
    return out
