"""Speculation under concurrency: a batch of N streams against plain decoding of the same N
streams batched the same way, at each N, and where speculation stops paying.

The two batched runs are stepped by turns, one batch step each (rounds.py), so the machine's
drifts hit both alike; the speedup's interval comes from stretches of the text or from
rounds, as for one stream (speedup.py). The crossover is measured (the first N whose verdict
is no longer "faster") and predicted from the cost profile: at N streams a step of
speculation verifies N x (K+1) tokens in one pass and writes N x m tokens, where m is the
tokens a stream writes per step (its accepted guesses and the target's own), against a pass
of N tokens writing N; so it pays while m x cost(N) / cost(N x (K+1)) > 1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ..loop.streams import BatchEvent, BatchStep, StreamsSession, StreamsSummary
from ..speedup import FASTER, Speedup, from_rounds, from_steps
from ..stalls import StepTime
from .rounds import by_turns

MakeRun = Callable[[int], StreamsSession]  # a fresh batched run of n streams


def step_times(steps: Sequence[BatchStep]) -> list[StepTime]:
    """What a comparison needs of each batch step: every stream's tokens, the pass's width,
    the step's ms and its pass's ms."""
    return [StepTime(b.tokens, b.width, b.timing.total_ms, b.timing.verify_ms) for b in steps]


@dataclass
class Side:
    """One side's rounds at one N: each round's batch steps and summary."""

    steps: list[list[BatchStep]] = field(default_factory=list)
    summaries: list[StreamsSummary] = field(default_factory=list)

    @property
    def tok_per_s(self) -> float:
        ms = sum(s.compute_ms for s in self.summaries)
        return sum(s.tokens for s in self.summaries) / (ms / 1000) if ms > 0 else 0.0

    @property
    def pace(self) -> float:
        """A stream's tokens/s, the mean over streams and rounds."""
        paces = [p for s in self.summaries for p in s.paces]
        return sum(paces) / len(paces) if paces else 0.0

    def per_stream_step(self) -> tuple[float, float]:
        """(tokens a stream writes per step, positions it verifies per step)."""
        events = [e for round_ in self.steps for b in round_ for _, e in b.steps]
        if not events:
            return 1.0, 1.0
        tokens = sum(len(e.emitted_ids) for e in events) / len(events)
        return tokens, sum(len(e.proposed) + 1 for e in events) / len(events)


@dataclass(frozen=True)
class Point:
    """Speculation against plain decoding at N streams."""

    n: int
    tok_per_s: float  # every stream's tokens per compute second, speculating
    plain_tok_per_s: float
    pace: float  # a stream's own tokens/s, speculating
    plain_pace: float
    speedup: Speedup
    tokens_per_step: float  # a stream's, speculating: its accepted guesses and one
    width_per_step: float  # positions a stream verifies per step (its guesses and one)
    failures: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"streams": self.n, "tok_per_s": round(self.tok_per_s, 3),
                "plain_tok_per_s": round(self.plain_tok_per_s, 3),
                "pace": round(self.pace, 3), "plain_pace": round(self.plain_pace, 3),
                **self.speedup.to_dict(),
                "tokens_per_step": round(self.tokens_per_step, 4),
                "width_per_step": round(self.width_per_step, 4),
                "failures": list(self.failures)}


def one_round(lane: Iterator[BatchEvent], plain: Iterator[BatchEvent], lane_first: bool,
              sides: tuple[Side, Side]) -> None:
    """Both batched runs stepped by turns to their ends."""
    pair = (lane, plain) if lane_first else (plain, lane)
    steps: tuple[list[BatchStep], list[BatchStep]] = ([], [])
    for who, event in by_turns(*pair, ended=lambda e: isinstance(e, StreamsSummary)):
        side = 0 if (who == 0) == lane_first else 1
        if isinstance(event, StreamsSummary):
            sides[side].summaries.append(event)
        else:
            steps[side].append(event)
    for side, kept in zip(sides, steps):
        side.steps.append(kept)


def measure(n: int, make_lane: MakeRun, make_plain: MakeRun, rounds: int = 1) -> Point:
    """Speculation and plain decoding at `n` streams, `rounds` rounds by turns, the first
    to step alternating by round."""
    lane, plain = Side(), Side()
    for r in range(rounds):
        one_round(iter(make_lane(n)), iter(make_plain(n)), r % 2 == 0, (lane, plain))
    times = [(step_times(a), step_times(b)) for a, b in zip(lane.steps, plain.steps)]
    if rounds > 1:
        speedup = from_rounds(times)
    else:
        speedup = from_steps(*times[0])
    tokens, width = lane.per_stream_step()
    failures = tuple(line for s in lane.summaries + plain.summaries for _, line in s.failures)
    return Point(n, lane.tok_per_s, plain.tok_per_s, lane.pace, plain.pace, speedup, tokens,
                 width, failures)


def measured_crossover(points: Sequence[Point]) -> int | None:
    """The first N (ascending) at which speculation is no longer faster by the run's
    verdict; None where it paid at every N measured."""
    return next((p.n for p in sorted(points, key=lambda p: p.n)
                 if p.speedup.verdict != FASTER), None)


@dataclass(frozen=True)
class Prediction:
    """Speedup at each N from one stream's acceptance and the cost profile's widths."""

    speedups: dict[int, float]
    crossover: int | None  # the first N predicted not to pay; None: pays at every N
    widest_measured: int  # the profile's largest batch: wider passes are extrapolated
    extrapolated: tuple[int, ...]  # the N whose pass is wider than that

    def to_dict(self) -> dict:
        return {"speedups": {str(n): round(s, 4) for n, s in self.speedups.items()},
                "crossover": self.crossover, "widest_measured_pass": self.widest_measured,
                "extrapolated": list(self.extrapolated)}


def predict(cost_ms: Callable[[int], float], widest: int, tokens_per_step: float,
            width_per_step: float, ns: Sequence[int]) -> Prediction:
    """m x cost(N) / cost(N x w) at each N: `cost_ms(width)` a pass's price at the run's
    context (profile.cost_ms, extrapolated along its last segment past `widest`)."""
    speedups = {n: tokens_per_step * cost_ms(n) / cost_ms(max(1, round(n * width_per_step)))
                for n in ns}
    crossover = next((n for n in sorted(ns) if speedups[n] <= 1.0), None)
    wider = tuple(n for n in ns if round(n * width_per_step) > widest)
    return Prediction(speedups, crossover, widest, wider)
