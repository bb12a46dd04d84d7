"""A race of N streams as plain data (no Qt): each lane's batch of streams, which stream its
text view follows, every stream's tokens and pace, the batch's total throughput, and the
speedup against streams the window has measured so far beside the one the cost profile
predicts.

A lane of N streams receives BatchSteps (every live stream's step in one pass) and a
StreamsSummary; its text view shows one stream's steps, as a single lane's, so the lane's
other views (figures, graphs, inspector) read that stream as they read a lane. The speedup
at N divides a speculating lane's batch steps by the plain lane's of the same race, as
`specviz bench --streams` does (engines/bench/concurrency.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from psygnal import Signal

from ..engines import events as ev
from ..engines.bench.concurrency import Point as _Point
from ..engines.bench.concurrency import Prediction, measured_crossover, predict, step_times
from ..engines.loop.streams import BatchStep, StreamsSummary
from ..engines.oracles import is_plain
from ..engines.speedup import Speedup, from_ratios, from_steps

STREAM_COUNTS = tuple(range(1, 17))  # the N the predicted curve is drawn at
PRICED_WIDTHS = 33  # a stream's pass widths priced at N: 1..33 tokens, as the window's profile


@dataclass
class LaneStreams:
    """One lane's batch: what each stream wrote and when, and which one its view follows."""

    n: int
    oracle: str
    plain: bool
    prompts: list[str]
    prompt_texts: list[str]
    pass_ms: list[float] | None = None  # the profile's ms of a pass 1, 2, ... tokens wide
    widest: int | None = None  # the profile's widest measured pass
    picked: int = 0
    batches: list[BatchStep] = field(default_factory=list)
    events: list[list[ev.StepEvent]] = field(default_factory=list)
    batch_ms: list[float] = field(default_factory=list)  # per stream: its batch steps' ms
    summary: StreamsSummary | None = None
    # After each batch step: the batch's compute seconds and every stream's tokens so far
    # (kept as they come: the graphs read them at every refresh).
    seconds: list[float] = field(default_factory=list)
    written: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.events = [[] for _ in range(self.n)]
        self.batch_ms = [0.0] * self.n

    @property
    def tokens(self) -> int:
        return self.written[-1] if self.written else 0

    @property
    def compute_ms(self) -> float:
        return sum(b.timing.total_ms for b in self.batches)

    @property
    def tok_per_s(self) -> float:
        """Every stream's tokens over the batch's compute time: the lane's throughput."""
        ms = self.compute_ms
        return self.tokens / (ms / 1000) if ms > 0 else 0.0

    def pace(self, stream: int) -> float:
        """A stream's own tokens/s over the batch steps it was in."""
        ms, steps = self.batch_ms[stream], self.events[stream]
        tokens = steps[-1].totals.tokens if steps else 0
        return tokens / (ms / 1000) if ms > 0 else 0.0

    def figures(self) -> dict:
        """The lane's figures over every stream, read as a single lane's (the figures table,
        the cost curve's dot): its tokens and tokens/s, its acceptance, the tokens a stream
        writes a step and the guesses it verifies a step."""
        ends = [steps[-1].totals for steps in self.events if steps]
        steps = sum(t.steps for t in ends)
        proposed, accepted = sum(t.proposed for t in ends), sum(t.accepted for t in ends)
        return {"streams": self.n, "tokens": self.tokens, "tok_per_s": self.tok_per_s,
                "acceptance_rate": accepted / proposed if proposed else None,
                "mean_accepted_tokens": sum(t.tokens for t in ends) / steps if steps else 0.0,
                "proposed_per_step": proposed / steps if steps else 0.0}

    def race_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The batch's compute seconds and every stream's tokens after each batch step: the
        lane's race at N, as a single lane's counted rows."""
        return np.asarray(self.seconds), np.asarray(self.written, dtype=float)

    def cost_ms(self, width: int) -> float:
        """The profile's ms of a pass `width` tokens wide (its widest for wider; pass_ms)."""
        costs = self.pass_ms or []
        return costs[min(width, len(costs)) - 1]

    def relative_costs(self, widths: int = PRICED_WIDTHS) -> list[float] | None:
        """The profile's price of a pass of 1, 2, ... tokens a stream at this N over a plain
        pass (one token a stream): a single stream's relative costs, read at N streams. None
        without a stored profile."""
        if not self.pass_ms:
            return None
        return [self.cost_ms(self.n * w) / self.cost_ms(self.n) for w in range(1, widths + 1)]

    def per_stream_step(self) -> tuple[float, float]:
        """(tokens a stream writes per step, positions it verifies per step)."""
        steps = [e for stream in self.events for e in stream]
        if not steps:
            return 1.0, 1.0
        return (sum(len(e.emitted_ids) for e in steps) / len(steps),
                sum(len(e.proposed) + 1 for e in steps) / len(steps))

    def take(self, batch: BatchStep | StreamsSummary) -> list[ev.Event]:
        """Keep a batch event; what of it the view follows (the picked stream's step, or its
        summary at the end)."""
        if isinstance(batch, StreamsSummary):
            self.summary = batch
            return [batch.summaries[self.picked]] if self.picked < len(batch.summaries) else []
        self.batches.append(batch)
        self.seconds.append((self.seconds[-1] if self.seconds else 0.0)
                            + batch.timing.total_ms / 1000.0)
        self.written.append(self.tokens + batch.tokens)
        shown: list[ev.Event] = []
        for stream, step in batch.steps:
            self.events[stream].append(step)
            self.batch_ms[stream] += batch.timing.total_ms
            if stream == self.picked:
                shown.append(step)
        return shown

    def followed(self) -> list[ev.Event]:
        """Everything the picked stream has written so far, its summary last if it ended."""
        shown: list[ev.Event] = list(self.events[self.picked])
        if self.summary is not None and self.picked < len(self.summary.summaries):
            shown.append(self.summary.summaries[self.picked])
        return shown


def lane_streams(header: dict) -> LaneStreams | None:
    """A lane's batch from its trace header; None for a lane of one stream."""
    streams = header.get("streams")
    if not streams:
        return None
    oracle = str(header.get("oracle", "?"))
    return LaneStreams(int(streams["n"]), oracle, is_plain(oracle), list(streams["prompts"]),
                       list(streams["prompt_texts"]), streams.get("pass_ms"),
                       streams.get("widest"))


def kept_pick(picked: int, n: int) -> int:
    """The stream a new race of `n` streams follows for a person who picked `picked`: that
    one, or where the race has fewer, its last (the nearest to the pick, where stream 1 would
    throw it away; the pick itself is kept, so a race with enough streams comes back to it)."""
    return min(picked, n - 1)


@dataclass(frozen=True)
class Measured:
    """A speculating lane's speedup over the plain lane at N streams, batched alike."""

    n: int
    speedup: Speedup
    tok_per_s: float
    plain_tok_per_s: float


class StreamsRace:
    """The window's lanes of N streams, and the speedups measured at each N this session."""

    started = Signal(str)  # lane id: its batch began (or it left streams: forget it)
    batched = Signal(str)  # lane id: it took a batch event (totals and paces moved)
    picked = Signal(str, int)  # lane id, the stream its view now follows

    def __init__(self) -> None:
        self.lanes: dict[str, LaneStreams] = {}
        # lane id -> the stream the person last picked (kept between races, as they picked it)
        self.picks: dict[str, int] = {}
        # lane id -> N -> the latest race's speedup at N (kept between races)
        self.measured: dict[str, dict[int, Measured]] = {}
        # lane id -> (the baseline, its batch steps and the lane's, when its speedup was
        # taken; that speedup): the header, the graphs and the figures ask for it each refresh.
        self._speedups: dict[str, tuple[tuple, Speedup | None]] = {}
        # Batches came since the speedups were measured: measured when next asked for (the
        # graph asks at most every GRAPHS_S; a batch can come every few milliseconds).
        self._stale = False

    def start(self, lane_id: str, header: dict) -> LaneStreams | None:
        """A lane's run began: a batch of streams, or one stream (forgotten here)."""
        if self._stale:  # the race before, measured to its last batch before it goes
            self._measure()
        self._speedups.clear()  # a new batch, or the baseline moved
        lane = lane_streams(header)
        if lane is None:
            self.lanes.pop(lane_id, None)
        else:
            lane.picked = kept_pick(self.picks.get(lane_id, 0), lane.n)
            self.lanes[lane_id] = lane
        self.started.emit(lane_id)
        return lane

    def restart(self, lane_id: str) -> None:
        """A replay stepping back: the lane's batch kept from its first step again, the
        stream it follows kept (nothing for a lane of one stream)."""
        lane = self.lanes.get(lane_id)
        if lane is not None:
            self.lanes[lane_id] = replace(lane, batches=[], summary=None, seconds=[],
                                          written=[])  # each stream's steps: __post_init__
            self._stale = True

    def take(self, lane_id: str, batch: BatchStep | StreamsSummary) -> list[ev.Event]:
        """Keep a lane's batch event; what its view shows of it."""
        lane = self.lanes.get(lane_id)
        if lane is None:
            return []
        shown = lane.take(batch)
        self._stale = True
        self.batched.emit(lane_id)
        return shown

    def pick(self, lane_id: str, stream: int) -> list[ev.Event]:
        """The lane's view follows `stream` now: what that stream has written so far."""
        lane = self.lanes[lane_id]
        if not 0 <= stream < lane.n:
            raise ValueError(f"stream {stream + 1} of {lane.n}")
        lane.picked = self.picks[lane_id] = stream
        self.picked.emit(lane_id, stream)
        return lane.followed()

    def remove(self, lane_id: str) -> None:
        self._speedups.clear()
        self.lanes.pop(lane_id, None)
        self.picks.pop(lane_id, None)
        self.measured.pop(lane_id, None)

    # ------------------------------------------------------------ speedup against streams

    def baseline(self) -> str | None:
        """The first plain lane of the race: every speculating lane divides by it."""
        return next((lid for lid, lane in self.lanes.items() if lane.plain), None)

    def speedup(self, lane_id: str) -> Speedup | None:
        """The lane's batch against the plain lane's in this race: every stream's tokens over
        each batch's time (the Streams dock's dot at this N); None before both have tokens.
        A stream's pace against plain's same stream is not the lane's: its streams differ."""
        base = self.baseline()
        lane, plain = self._with_plain(lane_id)
        if lane is None or plain is None or not lane.batches or not plain.batches:
            return None
        if lane_id == base:
            return from_ratios([1.0])  # plain decoding against itself, as a single lane's
        key = (base, len(lane.batches), len(plain.batches))
        cached = self._speedups.get(lane_id)
        if cached is None or cached[0] != key:
            cached = self._speedups[lane_id] = (key, self._batch_speedup(lane, plain))
        return cached[1]

    @staticmethod
    def _batch_speedup(lane: LaneStreams, plain: LaneStreams) -> Speedup | None:
        try:
            return from_steps(step_times(lane.batches), step_times(plain.batches))
        except ValueError:
            return None  # no tokens yet on a side

    def figures(self, lane_id: str) -> dict | None:
        """A lane of N streams read as a single lane (LaneStreams.figures), its speedup the
        batch's ("speedup" its ratio, "batch_speedup" all of it); None for a lane of one."""
        lane = self.lanes.get(lane_id)
        if lane is None:
            return None
        speedup = self.speedup(lane_id)
        return {**lane.figures(), "speedup": None if speedup is None else speedup.ratio,
                "batch_speedup": speedup}

    def speedup_rows(self, lane_id: str) -> tuple[tuple[np.ndarray, np.ndarray],
                                                   tuple[np.ndarray, np.ndarray]] | None:
        """The lane's race rows and the plain lane's it divides by (its speedup over time);
        None for plain decoding itself or without a plain lane at the same N."""
        lane, plain = self._with_plain(lane_id)
        if lane is None or plain is None or lane_id == self.baseline():
            return None
        return lane.race_rows(), plain.race_rows()

    def _with_plain(self, lane_id: str) -> tuple[LaneStreams | None, LaneStreams | None]:
        """The lane and the plain lane it divides by, each None where there is none (the
        plain lane too where it decodes another number of streams)."""
        base = self.baseline()
        lane, plain = self.lanes.get(lane_id), self.lanes.get(base) if base else None
        if lane is None or plain is None or lane.n != plain.n:
            return lane, None
        return lane, plain

    def end_race(self) -> None:
        """A new run begins: every lane's batch goes until its next start (a lane that fails
        to start keeps no picker, speedup or baseline of the race before). The speedups
        measured at each N and the picks stay."""
        if self._stale:  # the race before, measured to its last batch before it goes
            self._measure()
        self._speedups.clear()
        for lane_id in list(self.lanes):
            del self.lanes[lane_id]
            self.started.emit(lane_id)  # it left streams: forget it

    def _measure(self) -> None:
        """The race's speedup at its N for each speculating lane, from both lanes' batch
        steps so far (replacing an earlier race's at the same N)."""
        self._stale = False
        base = self.baseline()
        if base is None:
            return
        plain = self.lanes[base]
        for lane_id, lane in self.lanes.items():
            speedup = None if lane.plain else self.speedup(lane_id)
            if speedup is not None:
                self.measured.setdefault(lane_id, {})[lane.n] = Measured(
                    lane.n, speedup, lane.tok_per_s, plain.tok_per_s)

    def points(self, lane_id: str) -> list[Measured]:
        if self._stale:
            self._measure()
        return sorted(self.measured.get(lane_id, {}).values(), key=lambda m: m.n)

    def crossover(self, lane_id: str) -> int | None:
        """The first N measured at which the lane no longer pays (its verdict)."""
        return measured_crossover([_Point(m.n, m.tok_per_s, m.plain_tok_per_s, 0.0, 0.0,
                                          m.speedup, 1.0, 1.0) for m in self.points(lane_id)])

    def prediction(self, lane_id: str) -> Prediction | None:
        """The cost profile's speedup at each N for this lane's acceptance so far: None
        without a stored profile, or before its first step."""
        lane = self.lanes.get(lane_id)
        if lane is None or lane.plain or not lane.pass_ms or not lane.batches:
            return None
        tokens, width = lane.per_stream_step()
        return predict(lane.cost_ms, lane.widest or len(lane.pass_ms), tokens, width,
                       STREAM_COUNTS)
