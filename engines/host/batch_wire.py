"""A batch of streams' events as the protocol carries them (`batch {lane, batch}`): a
BatchStep or a StreamsSummary as plain JSON data, each stream's events as events.to_dict
writes them, so the window reads one stream's steps as it reads a lane's."""

from __future__ import annotations

from typing import Any

from .. import events as ev
from ..loop.streams import BatchEvent, BatchStep, StreamsSummary


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
