"""A speedup with its uncertainty: a lane against plain decoding, an interval, a verdict.

One pair of runs is not a measurement on a shared machine: the same work read 0.81-1.05x
against itself, run after run, when one ran after the other. So a lane and plain decoding
are measured so that the machine's drifts hit both alike (`specviz run` and the window step
them by turns; the bench alternates their order by round), and the interval comes from
repeats of the comparison:
- one round: stretches of the text. Each stretch of about STRETCH tokens is the time plain
  decoding took for those positions against the lane's steps that wrote them; the interval is
  Student's t on the stretches' log ratios (it holds the step-to-step noise and how the
  speedup varies along the text, so it is wider than the noise alone, never narrower);
- stalls (stalls.py): a target pass that took far longer than its neighbours' passes of its
  width was held up by other work; it is taken at its neighbours' pace, on either side alike,
  and counted. A few stalled steps on one side had carried whole runs of plain decoding against
  itself to "faster" (1.26x, 1.06-1.50) while load came and went;
- several rounds: each round's ratio of speeds, the interval Student's t on their logarithms
  (ratios multiply: a 2x and a 0.5x round average to 1x), never narrower than each round's
  own stretches allow (`from_rounds`).
The verdict calls a difference only where the interval excludes 1x and the difference is at
least RESOLUTION. The benchmark, `specviz run --baseline` and the window's lanes model all
judge a speedup here.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from . import events as ev
from .stalls import StepTime, of_events, unstalled

FASTER, SLOWER, NOISE = "faster", "slower", "within noise"
# The smallest difference called at all: plain decoding against itself, interleaved step by
# step on a 2-core machine, reads within 2% per round (docs/results/uncertainty.md); a
# difference below it is the machine's, whatever the interval says.
RESOLUTION = 0.02
# Student's t for a two-sided 95% interval, by degrees of freedom (rounds - 1).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086)
_T95_LARGE = 1.96


STRETCH = 8  # tokens a stretch of the text holds, for one round's interval
MIN_STRETCHES = 4  # fewer, and one round gives no interval


@dataclass(frozen=True)
class Speedup:
    """A lane's speed over plain decoding's, from `rounds` ratios or one round's stretches."""

    ratio: float
    low: float | None  # the 95% interval; None where there was too little to give one
    high: float | None
    rounds: int
    verdict: str
    ratios: tuple[float, ...] = ()
    stretches: int = 0  # one round's interval: stretches of the text it came from
    stalls: int = 0  # steps, both sides together, taken at their neighbours' pace

    def to_dict(self) -> dict:
        return {"speedup": round(self.ratio, 4),
                "interval": None if self.low is None else [round(self.low, 4),
                                                           round(self.high, 4)],
                "rounds": self.rounds, "stretches": self.stretches, "verdict": self.verdict,
                "round_ratios": [round(r, 4) for r in self.ratios], "stalls": self.stalls}

    def words(self) -> str:
        """"1.18x (1.09-1.27 over 3 rounds): faster"."""
        return words(self.to_dict())


def words(figures: dict) -> str:
    """A speedup in words from its `to_dict()` figures (a run's JSON holds them too):
    "1.18x (1.09-1.27 over 3 rounds, 2 stalled steps set aside): faster"."""
    if figures.get("interval") is None:
        return f"{figures['speedup']:.2f}x (too short for an interval)"
    low, high = figures["interval"]
    over = (f"{figures['rounds']} rounds" if figures["rounds"] > 1
            else f"{figures['stretches']} stretches of the text")
    return (f"{figures['speedup']:.2f}x ({low:.2f}-{high:.2f} over {over}"
            f"{stall_words(figures.get('stalls', 0))}): {figures['verdict']}")


def stall_words(stalls: int) -> str:
    """", 3 stalled steps set aside" where other work held steps up; "" where none did."""
    if not stalls:
        return ""
    return f", {stalls} stalled step{'s' if stalls > 1 else ''} set aside"


def t95(df: int) -> float:
    return _T95[df - 1] if df <= len(_T95) else _T95_LARGE


def from_ratios(ratios: Sequence[float], resolution: float = RESOLUTION,
                stalls: int = 0) -> Speedup:
    """The speedup of rounds whose lane/plain speed ratios are `ratios` (each > 0);
    `stalls`: the steps their ratios took at their neighbours' pace."""
    ratios = tuple(float(r) for r in ratios if r and r > 0)
    if not ratios:
        raise ValueError("no round with a speed to compare")
    logs = [math.log(r) for r in ratios]
    centre = statistics.fmean(logs)
    if len(logs) < 2:
        return Speedup(math.exp(centre), None, None, 1, NOISE, ratios, stalls=stalls)
    half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    low, high = math.exp(centre - half), math.exp(centre + half)
    return Speedup(math.exp(centre), low, high, len(ratios),
                   verdict(math.exp(centre), low, high, resolution), ratios, stalls=stalls)


def from_rounds(times: Sequence[tuple[Sequence[StepTime], Sequence[StepTime]]],
                resolution: float = RESOLUTION) -> Speedup:
    """Several rounds, each its lane's and plain decoding's steps: the rounds' ratios (stalls
    set aside) and Student's t over them, `widened` by each round's stretches."""
    ratios, stalls = zip(*(step_ratio(lane, plain) for lane, plain in times))
    return widened(from_ratios(ratios, resolution, sum(stalls)),
                   [_alone(lane, plain) for lane, plain in times], resolution)


def _alone(lane: Sequence[StepTime], plain: Sequence[StepTime]) -> Speedup | None:
    """One round's own speedup, None where it has none (a round that wrote nothing)."""
    try:
        return from_steps(lane, plain)
    except ValueError:
        return None


def widened(found: Speedup, rounds: Sequence[Speedup | None],
            resolution: float = RESOLUTION) -> Speedup:
    """A speedup over rounds (`from_ratios`) whose interval is never narrower than the
    rounds' own intervals (each from its stretches) say their mean can be known. Few rounds
    that agree by chance otherwise give an interval far narrower than the noise: two rounds
    of a draft that never drafted read 0.9755 and 0.9757, an interval 0.003 wide and
    "slower", where each round alone was good to about 2% and four rounds read 1.00
    (0.98-1.01). Unchanged where a round has no interval of its own."""
    if found.low is None or found.high is None:
        return found
    within = _pooled_half(rounds)
    centre = math.log(found.ratio)
    if within is None or within <= math.log(found.high) - centre:
        return found
    low, high = math.exp(centre - within), math.exp(centre + within)
    return replace(found, low=low, high=high,
                   verdict=verdict(found.ratio, low, high, resolution))


def _pooled_half(rounds: Sequence[Speedup | None]) -> float | None:
    """The 95% half-width, in logs, of the mean of rounds as their own intervals know it:
    each round's standard error from its stretches' t-interval, pooled."""
    errors, df = [], 0
    for one in rounds:
        if one is None or one.low is None or one.high is None or one.stretches < 2:
            return None
        errors.append(math.log(one.high / one.low) / (2 * t95(one.stretches - 1)))
        df += one.stretches - 1
    return t95(df) * math.sqrt(sum(e * e for e in errors)) / len(errors)


def from_steps(lane: Sequence[StepTime], plain: Sequence[StepTime],
               resolution: float = RESOLUTION) -> Speedup:
    """One round's speedup from both runs' steps, each side's stalls set aside."""
    lane_ms, lane_stalls = unstalled(lane)
    plain_ms, plain_stalls = unstalled(plain)
    try:
        found = from_stretches([(s.tokens, ms) for s, ms in zip(lane, lane_ms)],
                               _per_token(plain, plain_ms), resolution)
    except ValueError:  # shorter than a stretch: the whole runs' ratio, no interval
        ratio = round_ratio(sum(s.tokens for s in lane), sum(lane_ms),
                            sum(s.tokens for s in plain), sum(plain_ms))
        if ratio <= 0:
            raise
        found = Speedup(ratio, None, None, 1, NOISE, (ratio,))
    return replace(found, stalls=lane_stalls + plain_stalls)


def stretch_speedup(lane: list[ev.StepEvent], plain: list[ev.StepEvent]) -> Speedup:
    """One run of each, stepped by turns: the speedup over stretches of the text, each
    side's stalled steps set aside."""
    return from_steps(of_events(lane), of_events(plain))


def step_ratio(lane: Sequence[StepTime], plain: Sequence[StepTime]) -> tuple[float, int]:
    """One round's ratio of speeds with each side's stalls set aside, and how many."""
    lane_ms, lane_stalls = unstalled(lane)
    plain_ms, plain_stalls = unstalled(plain)
    ratio = round_ratio(sum(s.tokens for s in lane), sum(lane_ms),
                        sum(s.tokens for s in plain), sum(plain_ms))
    return ratio, lane_stalls + plain_stalls


def _per_token(steps: Sequence[StepTime], ms: Sequence[float]) -> list[float]:
    """Plain decoding's time for each position (a step of one token each; a longer step,
    where there is one, spread over what it wrote)."""
    out: list[float] = []
    for step, t in zip(steps, ms):
        n = max(step.tokens, 1)
        out.extend([t / n] * n)
    return out


def from_stretches(lane_ms: Sequence[tuple[int, float]], plain_ms: Sequence[float],
                   resolution: float = RESOLUTION) -> Speedup:
    """One round's speedup. `lane_ms`: each lane step's (tokens written, ms); `plain_ms`:
    each plain step's ms (one token each). Positions past the shorter run are left out."""
    lane_t, plain_t = _stretches(lane_ms, plain_ms)
    if not lane_t or sum(lane_t) <= 0:
        raise ValueError("no stretch of the text with a time to compare")
    ratio = sum(plain_t) / sum(lane_t)
    logs = [math.log(p / lane) for p, lane in zip(plain_t, lane_t) if p > 0 and lane > 0]
    if len(lane_t) < MIN_STRETCHES or len(logs) < 2:
        return Speedup(ratio, None, None, 1, NOISE, (ratio,), len(lane_t))
    # Student's t on the stretches' log ratios, about the whole text's ratio: a stretch
    # holding a preempted step is far off, and few stretches with such tails need t's width.
    half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    low, high = ratio * math.exp(-half), ratio * math.exp(half)
    return Speedup(ratio, low, high, 1, verdict(ratio, low, high, resolution), (ratio,),
                   len(lane_t))


def _stretches(lane_ms: Sequence[tuple[int, float]], plain_ms: Sequence[float]
               ) -> tuple[list[float], list[float]]:
    """Times of the lane and of plain decoding over the same stretches of positions: a
    stretch closes at the first lane step that reaches STRETCH tokens past its start."""
    lane_t, plain_t = [], []
    pos = start = 0
    acc = 0.0
    for tokens, ms in lane_ms:
        if pos + tokens > len(plain_ms):
            break
        pos += tokens
        acc += ms
        if pos - start >= STRETCH:
            lane_t.append(acc)
            plain_t.append(sum(plain_ms[start:pos]))
            start, acc = pos, 0.0
    return lane_t, plain_t


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
