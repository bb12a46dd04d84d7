"""The lanes of the window as plain data: what each lane is set to, what it has received,
which lane the speedups divide by. No Qt: the board's widgets draw it, and the window, the
runner and the replay read it instead of reading a view's history.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engines import events as ev
from ..engines.host.run_spec import LaneSpec
from ..engines.oracles import is_plain

TREE_LOOKBACK = 8  # the last steps of a run, short of room, may be plain ones


@dataclass
class LaneState:
    lane_id: str
    config: LaneSpec
    steps: list[ev.StepEvent] = field(default_factory=list)
    summary: ev.SummaryEvent | None = None
    max_tokens: int | None = None  # the run's budget: tells a K cut at the end from a change
    replay_oracle: str | None = None  # a replayed lane's oracle, from its trace
    declined: dict[str, int] = field(default_factory=dict)  # steps with nothing proposed, by why
    plain_server: bool = False  # a server lane whose server does not speculate (a baseline)
    # A server lane whose server does not say its K: a step's K is the longest draft seen,
    # which grows by itself and is never a change of the person's.
    k_from_drafts: bool = False

    @property
    def oracle(self) -> str:
        return self.replay_oracle or self.config.oracle

    def clear(self) -> None:
        self.steps, self.summary, self.declined = [], None, {}

    def read_header(self, header: dict) -> None:
        """What a lane's trace header says about it (a server lane's server)."""
        server = header.get("server")
        self.plain_server = server is not None and server.get("speculation") is None
        self.k_from_drafts = server is not None and server.get("k") is None and not (
            server.get("k_per_request"))

    def append(self, event: ev.Event) -> bool:
        """Keep `event`; True when it is a step whose K the person changed."""
        if isinstance(event, ev.SummaryEvent):
            self.summary = event
            return False
        previous = self.steps[-1] if self.steps else None
        self.steps.append(event)
        if event.declined:
            self.declined[event.declined] = self.declined.get(event.declined, 0) + 1
        return not self.k_from_drafts and k_changed(previous, event, self.max_tokens)

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
    """The lanes in the order they are shown."""

    def __init__(self) -> None:
        self.lanes: dict[str, LaneState] = {}
        self._next_id = 1

    def add(self, config: LaneSpec) -> LaneState:
        lane = LaneState(f"lane{self._next_id}", config)
        self._next_id += 1
        self.lanes[lane.lane_id] = lane
        return lane

    def remove(self, lane_id: str) -> None:
        self.lanes.pop(lane_id, None)

    def clear(self) -> None:
        for lane in self.lanes.values():
            lane.clear()

    def baseline(self) -> str | None:
        """The lane speedups divide by: the first plain-decoding lane (a local one, or a server
        lane on a server that does not speculate)."""
        return next((lid for lid, lane in self.lanes.items()
                     if is_plain(lane.oracle) or lane.plain_server), None)
