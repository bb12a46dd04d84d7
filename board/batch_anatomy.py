"""A batched step taken apart, as plain data: one row per stream of the pass, its guesses with
what verification made of each (kept, or refused) and the target's own token after them, so
a view shows every stream's share of the one pass."""

from __future__ import annotations

from dataclasses import dataclass

from ..engines.loop.streams import BatchStep
from .kinds import KIND_TARGET, proposal_kind


@dataclass(frozen=True)
class Piece:
    text: str
    kind: str  # a row of board/kinds.py: its colour; KIND_REJECTED for a refused guess
    kept: bool


@dataclass(frozen=True)
class StreamRow:
    stream: int  # 0-based
    guesses: tuple[Piece, ...]
    target: Piece  # the target's own token, after the kept guesses
    kept: int  # guesses kept
    positions: int  # positions it put in the pass: its pending token and its guesses
    left: str | None  # why it left the batch after this step, if it did


@dataclass(frozen=True)
class BatchRows:
    index: int
    width: int  # tokens the pass verified, every stream's together
    pass_ms: float
    step_ms: float
    rows: tuple[StreamRow, ...]

    @property
    def kept(self) -> int:
        return sum(r.kept for r in self.rows)

    @property
    def tokens(self) -> int:
        return sum(r.kept + 1 for r in self.rows)


def batch_rows(batch: BatchStep) -> BatchRows:
    left = dict(batch.left)
    rows = tuple(
        StreamRow(stream,
                  tuple(Piece(t.text, proposal_kind(t), t.accepted) for t in step.proposed),
                  Piece(step.target.text, KIND_TARGET, True), step.n_accepted,
                  len(step.proposed) + 1, left.get(stream))
        for stream, step in sorted(batch.steps, key=lambda s: s[0]))
    return BatchRows(batch.index, batch.width, batch.timing.verify_ms, batch.timing.total_ms,
                     rows)
