"""A speedup with its uncertainty: rounds of a lane against plain decoding, an interval, a verdict.

One pair of runs is not a measurement on a shared machine: the same work read 0.81-1.05x
against itself, run after run. So a lane and plain decoding are timed in rounds, each round
giving one ratio of their speeds, measured so that the machine's drifts hit both alike
(`specviz run` interleaves them step by step; the bench alternates their order by round).
The speedup is the geometric mean of the rounds' ratios, its interval Student's t on their
logarithms (ratios multiply; a 2x and a 0.5x round average to 1x), and the verdict calls a
difference only where the interval excludes 1x and the difference is at least RESOLUTION.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

FASTER, SLOWER, NOISE = "faster", "slower", "within noise"
# The smallest difference called at all: plain decoding against itself, interleaved step by
# step on a 2-core machine, reads within 2% per round (docs/results/uncertainty.md); a
# difference below it is the machine's, whatever the interval says.
RESOLUTION = 0.02
# Student's t for a two-sided 95% interval, by degrees of freedom (rounds - 1).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086)
_T95_LARGE = 1.96


@dataclass(frozen=True)
class Speedup:
    """A lane's speed over plain decoding's, from `rounds` ratios."""

    ratio: float
    low: float | None  # the 95% interval; None with a single round
    high: float | None
    rounds: int
    verdict: str
    ratios: tuple[float, ...] = ()

    def to_dict(self) -> dict:
        return {"speedup": round(self.ratio, 4),
                "interval": None if self.low is None else [round(self.low, 4),
                                                           round(self.high, 4)],
                "rounds": self.rounds, "verdict": self.verdict,
                "round_ratios": [round(r, 4) for r in self.ratios]}

    def words(self) -> str:
        """"1.18x (1.09-1.27 over 3 rounds): faster"."""
        if self.low is None:
            return f"{self.ratio:.2f}x (one round: no interval)"
        return (f"{self.ratio:.2f}x ({self.low:.2f}-{self.high:.2f} over {self.rounds} "
                f"rounds): {self.verdict}")


def t95(df: int) -> float:
    return _T95[df - 1] if df <= len(_T95) else _T95_LARGE


def from_ratios(ratios: Sequence[float], resolution: float = RESOLUTION) -> Speedup:
    """The speedup of rounds whose lane/plain speed ratios are `ratios` (each > 0)."""
    ratios = tuple(float(r) for r in ratios if r and r > 0)
    if not ratios:
        raise ValueError("no round with a speed to compare")
    logs = [math.log(r) for r in ratios]
    centre = statistics.fmean(logs)
    if len(logs) < 2:
        return Speedup(math.exp(centre), None, None, 1, NOISE, ratios)
    half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    low, high = math.exp(centre - half), math.exp(centre + half)
    return Speedup(math.exp(centre), low, high, len(ratios),
                   verdict(math.exp(centre), low, high, resolution), ratios)


def verdict(ratio: float, low: float, high: float, resolution: float = RESOLUTION) -> str:
    if low > 1.0 and ratio >= 1.0 + resolution:
        return FASTER
    if high < 1.0 and ratio <= 1.0 - resolution:
        return SLOWER
    return NOISE


def round_ratio(lane_tokens: int, lane_ms: float, plain_tokens: int, plain_ms: float) -> float:
    """One round's ratio of speeds (tokens per compute second)."""
    if lane_ms <= 0 or plain_ms <= 0 or not plain_tokens:
        return 0.0
    return (lane_tokens / lane_ms) / (plain_tokens / plain_ms)
