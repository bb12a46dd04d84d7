"""A batch of streams' records: one BatchStep per batched pass (every live stream's step
event), and a StreamsSummary at the run's end. The engine sends them to the window
(host/protocol.py) and a trace of N streams stores them (trace.py), as plain JSON data whose
streams' events are as events.to_dict writes them, so a reader takes one stream's steps as
it takes a lane's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import events as ev

KINDS = ("batch_step", "batch_summary")  # the records' `kind`, beside events' own
REASON_FAILED = "failed"  # the stream's oracle raised: it left the batch, the others went on


@dataclass(frozen=True)
class BatchStep:
    """One pass over every live stream: each stream's step, and the batch's times."""

    index: int
    steps: tuple[tuple[int, ev.StepEvent], ...]  # (stream, its step)
    width: int  # tokens the pass verified: every stream's pending token and guesses
    timing: ev.Timing  # every stream's guessing, the pass, verifying and bookkeeping
    left: tuple[tuple[int, str], ...] = ()  # streams that left after it, and why

    @property
    def tokens(self) -> int:
        return sum(len(e.emitted_ids) for _, e in self.steps)


@dataclass(frozen=True)
class StreamsSummary:
    """The batched run's end: each stream's summary and the batch's figures."""

    summaries: tuple[ev.SummaryEvent, ...]
    steps: int
    compute_ms: float  # the batch steps' time: guessing, passes, verifying
    prefill_ms: float
    wall_ms: float
    paces: tuple[float, ...]  # each stream's tokens/s over the steps it was in the batch

    @property
    def tokens(self) -> int:
        return sum(s.totals.tokens for s in self.summaries)

    @property
    def tok_per_s(self) -> float:
        """Every stream's tokens over the batch's compute time."""
        return self.tokens / (self.compute_ms / 1000) if self.compute_ms > 0 else 0.0

    @property
    def failures(self) -> tuple[tuple[int, str], ...]:
        return tuple((i, s.error or "") for i, s in enumerate(self.summaries)
                     if s.reason == REASON_FAILED)


BatchEvent = BatchStep | StreamsSummary


def to_dict(batch: BatchEvent) -> dict[str, Any]:
    if isinstance(batch, BatchStep):
        return {"kind": "batch_step", "index": batch.index, "width": batch.width,
                "steps": [[i, ev.to_dict(e)] for i, e in batch.steps],
                "timing": ev.to_dict(batch.timing), "left": [list(x) for x in batch.left]}
    return {"kind": "batch_summary", "steps": batch.steps, "compute_ms": batch.compute_ms,
            "prefill_ms": batch.prefill_ms, "wall_ms": batch.wall_ms,
            "paces": list(batch.paces), "summaries": [ev.to_dict(s) for s in batch.summaries]}


def from_dict(data: dict[str, Any]) -> BatchEvent:
    """The batch event `to_dict` wrote; ValueError where it is not one."""
    try:
        if data["kind"] == "batch_step":
            return BatchStep(int(data["index"]), tuple((int(i), _event(e, ev.StepEvent))
                                                       for i, e in data["steps"]),
                             int(data["width"]), ev.Timing(**data["timing"]),
                             tuple((int(i), str(r)) for i, r in data["left"]))
        if data["kind"] == "batch_summary":
            return StreamsSummary(tuple(_event(s, ev.SummaryEvent) for s in data["summaries"]),
                                  int(data["steps"]), float(data["compute_ms"]),
                                  float(data["prefill_ms"]), float(data["wall_ms"]),
                                  tuple(float(p) for p in data["paces"]))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed batch: {exc!r}") from None
    raise ValueError(f"unknown batch kind {data.get('kind')!r}")


def _event(data: dict, kind: type) -> Any:
    event = ev.from_dict(data)
    if not isinstance(event, kind):
        raise ValueError(f"a batch holds a {type(event).__name__} where a {kind.__name__} "
                         "belongs")
    return event


def stream_events(batches: list[BatchEvent], stream: int) -> list[ev.Event]:
    """One stream's events from a batch's records: its steps, then its summary."""
    out: list[ev.Event] = []
    for batch in batches:
        if isinstance(batch, BatchStep):
            out += [e for i, e in batch.steps if i == stream]
        elif stream < len(batch.summaries):
            out.append(batch.summaries[stream])
    return out
