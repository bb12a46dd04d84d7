"""The lanes of the window as plain data: what each lane is set to, what it has received, the
figures of each, which lane the speedups divide by and, over the races run, the rounds of each
lane's speedup (racing again adds one). No Qt (napari's way: a plain model
that views observe): the board, the lanes' figures, the graphs and the exports read it and
listen to its signals (psygnal, the Qt-free signals napari's models use), instead of keeping
numbers of their own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
from psygnal import Signal

from ..engines import events as ev
from ..engines.host.run_spec import LaneSpec
from ..engines.oracles import is_plain
from ..engines.speedup import (
    Speedup,
    from_ratios,
    round_ratio,
    step_ratio,
    stretch_speedup,
    widened,
)
from ..engines.stalls import of_events

TREE_LOOKBACK = 8  # the last steps of a run, short of room, may be plain ones

# Columns of a lane's per-step rows.
STEP, PROPOSED, ACCEPTED, SECONDS, TOKENS = range(5)

# What became of a lane's race against plain decoding (figures' "race"): one round more of
# its speedup, no round (its K or settings changed mid-race), or not (yet) a round.
JOINED, MIXED, OPEN = "joined", "mixed", "open"
# Races cut short: the lanes stopped at different points of their text, whose speeds differ.
CUT_SHORT = ("stopped", ev.REASON_CRASHED)
# What makes two races rounds of one measurement (with the lane's settings): the prompt, the
# target and how it ran, the lane's oracle. Not the machine or the prompt's tokens, which
# follow from these.
RACE_FIELDS = ("prompt", "target", "draft", "backend", "dtype", "compile", "oracle")


class Rows:
    """Float rows appended one at a time; capacity doubles, so appends are O(1) amortised."""

    def __init__(self, columns: int, capacity: int = 256) -> None:
        self._data = np.empty((capacity, columns))
        self.n = 0

    def append(self, row: tuple[float, ...]) -> None:
        if self.n == len(self._data):
            self._data = np.concatenate([self._data, np.empty_like(self._data)])
        self._data[self.n] = row
        self.n += 1

    def column(self, index: int) -> np.ndarray:
        return self._data[: self.n, index]

    def clear(self) -> None:
        self.n = 0


def bump(counts: np.ndarray, index: int, by: int = 1) -> np.ndarray:
    """counts[index] += by, growing the array (doubling) when index is past its end."""
    if index >= len(counts):
        counts = np.concatenate([counts, np.zeros(max(len(counts), index + 1), counts.dtype)])
    counts[index] += by
    return counts


@dataclass(eq=False)
class StepCounts:
    """What the graphs draw of a lane, counted as its steps arrive."""

    rows: Rows = field(default_factory=lambda: Rows(5))  # step, proposed, accepted, s, tokens
    position_proposed: np.ndarray = field(default_factory=lambda: np.zeros(8, np.int64))
    position_accepted: np.ndarray = field(default_factory=lambda: np.zeros(8, np.int64))
    histogram: np.ndarray = field(default_factory=lambda: np.zeros(8, np.int64))  # by accepted

    def add(self, event: ev.StepEvent) -> None:
        n_accepted = event.n_accepted
        self.rows.append((event.step, len(event.proposed), n_accepted,
                          event.totals.compute_ms / 1000.0, event.totals.tokens))
        for i, token in enumerate(event.proposed):
            self.position_proposed = bump(self.position_proposed, i)
            # Grown together with `position_proposed`, so the two always have one length.
            self.position_accepted = bump(self.position_accepted, i, int(token.accepted))
        if event.proposed:
            self.histogram = bump(self.histogram, n_accepted)

    def clear(self) -> None:
        self.rows.clear()
        for counts in (self.position_proposed, self.position_accepted, self.histogram):
            counts[:] = 0


@dataclass(eq=False)
class Race:
    """A lane's latest race against plain decoding, as a round of its speedup."""

    key: str | None = None  # which rounds it may join (race_key); None: no race began
    mixed: bool = False  # its K or settings changed mid-race: neither's round
    settled: bool = False  # judged once, so a replay stepping back over its end adds nothing
    joined: bool = False


def race_key(header: dict, config: LaneSpec) -> str:
    """A race's identity from its lane's trace header: races of one key are rounds of one
    speedup, so a new prompt, target, oracle, K or setting starts rounds of its own (a person
    tuning K sees each K's)."""
    fields = {name: header.get(name) for name in RACE_FIELDS}
    if header.get("backend") != "server":  # a server lane's device is its URL (below)
        fields["device"] = header.get("device")
    settings = dict(header.get("settings") or {})
    if settings.get("auto_k"):
        settings.pop("k", None)  # the K auto K starts from is its own, not the person's
    server = dict(header.get("server") or {})
    server.pop("url", None)  # a spawned server listens on a new port every race
    # A race of N streams (each lane a batch) is rounds of its own, apart from one stream's.
    fields["streams"] = (header.get("streams") or {}).get("n", 1)
    return json.dumps({**fields, "settings": settings, "server": server,
                       "inputs": config.inputs, "url": config.server and config.server.url},
                      sort_keys=True, default=str)


def tuning(config: LaneSpec) -> tuple:
    """What the person may change while a lane races: its K (unused under auto K), auto K on
    or off, its oracle's settings."""
    return (config.auto_k, None if config.auto_k else config.k, config.settings)


@dataclass(eq=False)
class LaneState:
    lane_id: str
    config: LaneSpec
    steps: list[ev.StepEvent] = field(default_factory=list)
    summary: ev.SummaryEvent | None = None
    counts: StepCounts = field(default_factory=StepCounts)
    max_tokens: int | None = None  # the run's budget: tells a K cut at the end from a change
    replay_oracle: str | None = None  # a replayed lane's oracle, from its trace
    declined: dict[str, int] = field(default_factory=dict)  # steps with nothing proposed, by why
    plain_server: bool = False  # a server lane whose server does not speculate (a baseline)
    # A server lane whose server does not say its K: a step's K is the longest draft seen,
    # which grows by itself and is never a change of the person's.
    k_from_drafts: bool = False
    race: Race = field(default_factory=Race)
    temperature: float | None = None  # its run's (trace header): only greedy texts compare

    @property
    def oracle(self) -> str:
        return self.replay_oracle or self.config.oracle

    @property
    def totals(self) -> ev.Totals | None:
        return self.steps[-1].totals if self.steps else None

    def clear(self) -> None:
        self.steps, self.summary, self.declined = [], None, {}
        self.counts.clear()

    def read_header(self, header: dict) -> None:
        """What a lane's trace header says about it (a server lane's server)."""
        server = header.get("server")
        self.plain_server = server is not None and server.get("speculation") is None
        self.k_from_drafts = server is not None and server.get("k") is None and not (
            server.get("k_per_request"))
        self.race = Race(race_key(header, self.config))  # a header begins every race
        self.temperature = (header.get("settings") or {}).get("temperature")

    def racing(self) -> bool:
        """Whether its race is under way: begun and not ended."""
        return self.race.key is not None and not self.race.settled and self.summary is None

    def append(self, event: ev.Event) -> bool:
        """Keep `event`; True when it is a step whose K the person changed."""
        if isinstance(event, ev.SummaryEvent):
            self.summary = event
            return False
        previous = self.steps[-1] if self.steps else None
        self.steps.append(event)
        self.counts.add(event)
        if event.declined:
            self.declined[event.declined] = self.declined.get(event.declined, 0) + 1
        changed = not self.k_from_drafts and k_changed(previous, event, self.max_tokens)
        self.race.mixed = self.race.mixed or changed
        return changed

    def last_tree_step(self) -> ev.StepEvent | None:
        """The newest step that verified a tree, a few steps back at most."""
        return next((e for e in reversed(self.steps[-TREE_LOOKBACK:]) if e.tree or e.lookahead),
                    None)


def k_changed(previous: ev.StepEvent | None, event: ev.StepEvent, max_tokens: int | None) -> bool:
    """Did the person change K before this step: another fixed K, or auto K on or off? The
    K auto K picks each step is not theirs, nor is the cut, near the end of a run, to the
    tokens left."""
    if previous is None:
        return False
    if event.auto_k != previous.auto_k:
        return True
    if event.auto_k or event.k == previous.k:
        return False
    room = None if max_tokens is None else max_tokens - previous.totals.tokens - 1
    return not (event.k < previous.k and event.k == room)


def k_label(event: ev.StepEvent) -> str:
    """How a step's K reads on the graphs' markers."""
    return "K auto" if event.auto_k else f"K={event.k}"


class BoardModel:
    """The lanes in the order they are shown, and what each has received."""

    added = Signal(str)  # lane id
    removed = Signal(str)
    stepped = Signal(str)  # a lane received steps (its figures and counts moved)
    k_marked = Signal(str, int, str)  # lane id, step, label: the person changed K there
    baseline_changed = Signal(object)  # the lane speedups divide by, or None
    cleared = Signal(object)  # a lane's id, or None for all: their steps are gone

    def __init__(self) -> None:
        self.lanes: dict[str, LaneState] = {}
        self._next_id = 1
        self._baseline: str | None = None
        # Each lane's rounds against plain decoding, by (lane id, race key): the ratios of its
        # races that joined them, kept across runs (racing again adds a round).
        self._rounds: dict[tuple[str, str], list[Round]] = {}

    def add(self, config: LaneSpec, lane_id: str | None = None) -> LaneState:
        if lane_id is None:
            lane_id, self._next_id = f"lane{self._next_id}", self._next_id + 1
        lane = LaneState(lane_id, config)
        self.lanes[lane_id] = lane
        self.added.emit(lane_id)
        self.update_baseline()
        return lane

    def remove(self, lane_id: str) -> None:
        if self.lanes.pop(lane_id, None) is not None:
            self._rounds = {key: ratios for key, ratios in self._rounds.items()
                            if key[0] != lane_id}
            self.removed.emit(lane_id)
            self.update_baseline()

    def reconfigure(self, lane_id: str, config: LaneSpec) -> None:
        lane = self.lanes[lane_id]
        if lane.racing() and tuning(config) != tuning(lane.config):
            lane.race.mixed = True  # settings no step records, and a K before its step
        lane.config = config
        self.update_baseline()

    def read_header(self, lane_id: str, header: dict) -> None:
        """A lane's trace header, live or replayed: a plain server becomes the baseline."""
        self.lanes[lane_id].read_header(header)
        self.update_baseline()

    def append(self, lane_id: str, events: list[ev.Event]) -> None:
        """Events that reached a lane; one `stepped` for them all."""
        lane = self.lanes.get(lane_id)
        if lane is None:
            return
        for event in events:
            if lane.append(event):
                self.k_marked.emit(lane_id, event.step, k_label(event))
        if lane.summary is not None:
            self._settle_races(lane_id)
        self.stepped.emit(lane_id)

    def clear(self, lane_id: str | None = None) -> None:
        for lane in self.lanes.values() if lane_id is None else [self.lanes[lane_id]]:
            lane.clear()
        self.cleared.emit(lane_id)

    # ------------------------------------------------------------ the race

    def baseline(self) -> str | None:
        """The lane speedups divide by: the first plain-decoding lane (a local one, or a server
        lane on a server that does not speculate)."""
        return next((lid for lid, lane in self.lanes.items()
                     if is_plain(lane.oracle) or lane.plain_server), None)

    def update_baseline(self) -> None:
        """Tell the views where the baseline moved (a lane added, removed or replayed)."""
        first = self.baseline()
        if first != self._baseline:
            self._baseline = first
            self.baseline_changed.emit(first)

    def figures(self, lane_id: str) -> dict:
        """A lane's headline numbers so far: its header line, the CSV export, the cost
        curve's operating point. "speedup" is this race's so far; once a race has begun,
        "rounds" is the speedup over its races (`rounds`) and "race" whether this one is among
        them (JOINED), changed its K mid-race (MIXED), or not yet or never (OPEN)."""
        totals = self.lanes[lane_id].totals
        if totals is None:
            figures = {"tokens": 0, "tok_per_s": 0.0, "acceptance_rate": None,
                       "mean_accepted_tokens": 0.0, "speedup": None, "decline_rate": None}
        else:
            figures = {"tokens": totals.tokens, "tok_per_s": totals.tok_per_s,
                       "acceptance_rate": totals.acceptance_rate,
                       "decline_rate": totals.decline_rate,
                       "mean_accepted_tokens": totals.mean_accepted_tokens,
                       "speedup": self._speedup(totals)}
        race = self.lanes[lane_id].race
        if race.key is not None:  # a lane that began no race has no rounds to speak of
            figures["rounds"] = self.rounds(lane_id)
            figures["race"] = JOINED if race.joined else MIXED if race.mixed else OPEN
        return figures

    def rounds(self, lane_id: str) -> Speedup | None:
        """The lane's speedup over plain decoding from its races of its latest race's key (the
        one under way included once it has joined); None before any."""
        lane = self.lanes[lane_id]
        rounds = self._rounds.get((lane_id, lane.race.key))
        if not rounds:
            return None
        if len(rounds) == 1 and lane.race.joined and rounds[0].alone is not None:
            return rounds[0].alone  # one race: stretches of its text
        return widened(from_ratios([r.ratio for r in rounds],
                                   stalls=sum(r.stalls for r in rounds)),
                       [r.alone for r in rounds])

    def declined(self, lane_id: str) -> dict[str, int] | None:
        """Steps with nothing proposed, by why; None where it cannot be said (plain decoding,
        or a trace recorded before declined steps were marked, which would read as 0%)."""
        lane = self.lanes[lane_id]
        if is_plain(lane.oracle) or not (lane.declined or lane.replay_oracle is None):
            return None
        return dict(lane.declined)

    def _settle_races(self, lane_id: str) -> None:
        """A lane ended: its race is a round once plain decoding's has ended too (the plain
        lane ending settles every other lane's)."""
        baseline = self.baseline()
        if baseline is None:
            return
        base = self.lanes[baseline]
        others = [lane for lid, lane in self.lanes.items() if lid != baseline]
        for lane in others if lane_id == baseline else [self.lanes[lane_id]]:
            self._settle(lane, base)

    def _settle(self, lane: LaneState, base: LaneState) -> None:
        race = lane.race
        if race.key is None or race.settled or lane.summary is None or base.summary is None:
            return
        race.settled = True
        if race.mixed or not (finished(lane.summary) and finished(base.summary)):
            return
        ratio, stalls = race_ratio(lane, base)
        if ratio > 0:
            self._rounds.setdefault((lane.lane_id, race.key), []).append(
                Round(ratio, stalls, _alone(lane, base)))
            race.joined = True

    def _speedup(self, totals: ev.Totals) -> float | None:
        baseline = self.baseline()
        base = self.lanes[baseline].totals if baseline else None
        if base is None or base.tok_per_s <= 0 or totals.tok_per_s <= 0:
            return None
        return totals.tok_per_s / base.tok_per_s


@dataclass(frozen=True)
class Round:
    """A race settled: its ratio of speeds, the stalled steps it set aside, and its speedup
    over stretches of its text (None where its steps carry no times), judged once."""

    ratio: float
    stalls: int
    alone: Speedup | None


def race_ratio(lane: LaneState, base: LaneState) -> tuple[float, int]:
    """A race's ratio of speeds and the stalled steps of either lane set aside, where their
    steps carry times (a server lane's may not: then its totals')."""
    ratio, stalls = (step_ratio(of_events(lane.steps), of_events(base.steps)) if lane.steps
                     else (0.0, 0))
    if ratio > 0:
        return ratio, stalls
    mine, plain = lane.summary.totals, base.summary.totals
    return round_ratio(mine.tokens, mine.compute_ms, plain.tokens, plain.compute_ms), 0


def _alone(lane: LaneState, base: LaneState) -> Speedup | None:
    try:
        return stretch_speedup(lane.steps, base.steps)
    except ValueError:  # nothing to pair (a server lane's steps without times)
        return None


def finished(summary: ev.SummaryEvent) -> bool:
    """Whether a run ended by itself (not stopped, crashed or failed)."""
    return summary.reason not in CUT_SHORT and not summary.error
