"""A lane and plain decoding timed against each other, stepped by turns, in one round or more.

Within a round the two sessions take turns one step at a time, as the window's lanes do, so
a burst of other work lands on both; the first to step alternates by round, so neither
always meets a cold cache or a waking core first. Every round starts from what the lane knew
before the first (its K policy's estimates, an oracle's memory of earlier runs): later
rounds do not gain from having seen the prompt's answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .. import events as ev
from ..loop.session import Session
from ..speedup import Speedup, from_rounds, stretch_speedup
from ..stalls import StepTime, of_events

OnEvent = Callable[[ev.Event], None]


@dataclass(frozen=True)
class Start:
    """What a lane knew before its first round."""

    policy: object = None
    oracle: object = None

    @classmethod
    def of(cls, session: Session) -> Start:
        policy = session.k_policy.snapshot() if session.k_policy else None
        snapshot = getattr(session.oracle, "snapshot", None)
        return cls(policy, snapshot() if snapshot else None)


def again(session: Session, start: Start) -> Session:
    """A fresh session of the same lane, knowing what it knew at `start`."""
    if session.k_policy is not None and start.policy is not None:
        session.k_policy.restore(start.policy)
    if start.oracle is not None:
        session.oracle.restore(start.oracle)
    return Session(session.target, session.oracle, session.settings, session.k_policy)


def by_turns(first: Iterator, second: Iterator,
             ended: Callable[[object], bool] = lambda e: isinstance(e, ev.SummaryEvent)
             ) -> Iterator[tuple[int, ev.Event]]:
    """Events of two runs, one step of each in turn: (0 for `first`, 1 for `second`, event)
    until both have sent their summary (what `ended` says ends a run)."""
    running = {0: first, 1: second}
    while running:
        for who in list(running):
            event = next(running[who])
            yield who, event
            if ended(event):
                del running[who]


@dataclass
class Rounds:
    """Every round's lane and plain summaries, and the first round's steps."""

    lane: list[ev.SummaryEvent] = field(default_factory=list)
    plain: list[ev.SummaryEvent] = field(default_factory=list)
    lane_steps: list[ev.StepEvent] = field(default_factory=list)
    plain_steps: list[ev.StepEvent] = field(default_factory=list)
    # Every round's step times, lane and plain: each round's ratio with its stalls set aside.
    times: list[tuple[list[StepTime], list[StepTime]]] = field(default_factory=list)

    def speedup(self) -> Speedup:
        """Several rounds: their ratios; one: the stretches of its text."""
        if len(self.lane) > 1:
            return from_rounds(self.times)
        return stretch_speedup(self.lane_steps, self.plain_steps)


def one_round(lane: Iterator[ev.Event], plain: Iterator[ev.Event], lane_first: bool,
              rounds: Rounds, on_lane_event: OnEvent | None = None) -> None:
    """Step the two runs by turns to their ends; their summaries join `rounds`."""
    pair = (lane, plain) if lane_first else (plain, lane)
    keep = not rounds.lane  # the first round's steps: the printed text, the comparison
    steps: tuple[list[ev.StepEvent], list[ev.StepEvent]] = ([], [])
    for who, event in by_turns(*pair):
        is_lane = (who == 0) == lane_first
        if isinstance(event, ev.SummaryEvent):
            (rounds.lane if is_lane else rounds.plain).append(event)
        else:
            steps[0 if is_lane else 1].append(event)
        if is_lane and on_lane_event:
            on_lane_event(event)
    if keep:
        rounds.lane_steps, rounds.plain_steps = steps
    rounds.times.append((of_events(steps[0]), of_events(steps[1])))


def run_rounds(lane: Iterator[ev.Event], plain: Iterator[ev.Event], lane_session: Session,
               plain_session: Session, count: int, on_lane_event: OnEvent | None = None,
               on_round: Callable[[int], None] | None = None) -> Rounds:
    """`count` rounds: the first on the given iterators (the lanes as built, warmed up,
    the lane's events passed on), the rest on fresh sessions from the same start."""
    start = Start.of(lane_session)
    rounds = Rounds()
    one_round(lane, plain, True, rounds, on_lane_event)
    for n in range(1, count):
        if on_round:
            on_round(n)
        again_lane = again(lane_session, start)
        again_plain = again(plain_session, Start())
        one_round(iter(again_lane), iter(again_plain), n % 2 == 0, rounds)
    return rounds
