"""Where a greedy lane's text parted from plain decoding's, and why (#73).

Greedy speculative decoding is lossless in exact arithmetic, but a backend's batched
verification rounds differently from its one-token step, so where plain decoding's top two
logits nearly tie the two runs can choose differently and the texts part (engines/bench/
compare.py). Side by side in the window that reads as the method changing the text, so the
token where a lane parted is marked with plain decoding's margin there and what it means.

The window has no model to measure the backend's batched-vs-single noise with (`specviz run
--baseline` does), so the words say what is known: below compare.NEAR_TIE a margin is a tie
on any backend; up to NOISE_SEEN it is within what batched and one-token passes have been
measured to differ by on some backend; above that it is not a near-tie. No Qt: the lanes
model answers `parting`, and `PartingWatch` tells the window once per race.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engines import events as ev
from ..engines.bench.compare import NEAR_TIE, emitted

if TYPE_CHECKING:
    from .lanes_model import BoardModel, LaneState

# The largest batched-vs-single logit difference measured on a backend here (llama.cpp on a
# GPU, 1.5-3.0: docs/results/gpu.md): a smaller margin may be rounding on some backend.
NOISE_SEEN = 3.0

TIE, WITHIN_NOISE, NOT_A_TIE, UNKNOWN = "tie", "within-noise", "not-a-tie", "unknown"
HERE = "parted from plain decoding here"
NUMERICS = "batched and one-token passes round differently (backend numerics, not the method)"


@dataclass(frozen=True)
class Parting:
    """The first generated token at which a lane's text differs from plain decoding's."""

    index: int  # into the generated tokens of both
    step: int  # the lane's step that emitted it
    token: int  # within that step, as the token view counts: proposal index, or the target's
    margin: float | None  # plain decoding's top-1/top-2 logit margin there

    @property
    def kind(self) -> str:
        if self.margin is None:
            return UNKNOWN  # a server baseline does not say its logits
        if self.margin < NEAR_TIE:
            return TIE
        return WITHIN_NOISE if self.margin < NOISE_SEEN else NOT_A_TIE

    def tooltip(self) -> str:
        """The marked token's words, before its step's own."""
        apart = f"plain decoding's top two choices were {logits(self.margin)} logits apart"
        return {
            TIE: f"{HERE}: {apart}, a near-tie that {NUMERICS}",
            WITHIN_NOISE: (f"{HERE}: {apart}, less than the {NOISE_SEEN:g} by which batched "
                           "and one-token passes were measured to differ on some backends: "
                           "likely a near-tie rounded the other way (backend numerics, not the "
                           "method); `specviz run --baseline` measures this backend's"),
            NOT_A_TIE: f"{HERE} with a margin of {logits(self.margin)}: not a near-tie",
            UNKNOWN: f"{HERE}; plain decoding's margin there is not known",
        }[self.kind]

    def note(self) -> str:
        """The lane's one line about it."""
        where = f"text parted from plain decoding's at token {self.index}"
        margin = logits(self.margin)
        return {
            TIE: f"{where}, a near-tie ({margin} logits apart): backend numerics, not the method",
            WITHIN_NOISE: (f"{where}, {margin} logits apart: within backends' batched-vs-"
                           "single rounding, likely numerics, not the method"),
            NOT_A_TIE: f"{where} with a margin of {margin}: not a near-tie",
            UNKNOWN: f"{where} (plain decoding's margin there not known)",
        }[self.kind]


def logits(margin: float | None) -> str:
    """Two significant figures: 0.07, 2.3, 0.0042."""
    return "?" if margin is None else f"{margin:.2g}"


def greedy(lane: LaneState) -> bool:
    """Only greedy runs have one right text; a sampled one may differ anywhere."""
    return lane.temperature is not None and lane.temperature <= 0


def lane_parting(model: BoardModel, lane_id: str) -> Parting | None:
    """Where a greedy lane's text first parted from plain decoding's (the model's baseline),
    with plain decoding's margin there; None while they agree."""
    baseline = model.baseline()
    if baseline is None or baseline == lane_id:
        return None
    return find_parting(model.lanes[lane_id], model.lanes[baseline])


def find_parting(lane: LaneState, plain: LaneState) -> Parting | None:
    """Where `lane` first emitted another token than `plain`, over what both have emitted."""
    if not (greedy(lane) and greedy(plain) and lane.steps and plain.steps):
        return None
    mine, theirs = emitted(lane.steps), emitted(plain.steps)
    index = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
    if index is None:
        return None
    step, token = locate(lane.steps, index)
    # Plain decoding emits one token a step, so its step `index` chose the token.
    return Parting(index, step, token, plain.steps[index].target.margin)


def locate(steps: Sequence[ev.StepEvent], index: int) -> tuple[int, int]:
    """(step, token) of generated token `index`: a step emits its accepted proposals, then the
    target's own token (the token view's index for it is len(proposed))."""
    for step, event in enumerate(steps):
        accepted = [i for i, token in enumerate(event.proposed) if token.accepted]
        if index <= len(accepted):
            return step, accepted[index] if index < len(accepted) else len(event.proposed)
        index -= len(accepted) + 1
    raise IndexError("past the lane's tokens")


class PartingWatch:
    """Calls `show(lane_id, parting)` once per race for each greedy lane whose text parts from
    the baseline's, as their steps arrive, live or replayed."""

    def __init__(self, model: BoardModel, show: Callable[[str, Parting], None]) -> None:
        self._model, self._show = model, show
        self._shown: set[str] = set()  # lanes already marked this race
        model.stepped.connect(self._stepped)
        model.cleared.connect(self._cleared)
        model.removed.connect(self._cleared)

    def _stepped(self, lane_id: str) -> None:
        # Plain decoding's steps can reveal a parting in any lane that ran ahead of it.
        baseline = self._model.baseline()
        for other in self._model.lanes if lane_id == baseline else [lane_id]:
            if other in self._shown:
                continue
            parting = lane_parting(self._model, other)
            if parting is not None:
                self._shown.add(other)
                self._show(other, parting)

    def _cleared(self, lane_id: str | None) -> None:
        # An emptied or removed lane (a new race, a replay stepping back) is marked again
        # when it parts.
        if lane_id is None:
            self._shown.clear()
        else:
            self._shown.discard(lane_id)
