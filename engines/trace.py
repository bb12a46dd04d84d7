"""Traces: a run as JSON Lines, written as it goes, replayable without a model.

Line 1 is a header (models with checksums, backend, device, settings, machine, prompt);
every further line is one event (`events.to_json`). Each line is flushed when written, so a
crash loses at most the step in flight. Reading stops at the first bad line with an error
that names it, and everything before it stays available.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from . import events as ev
from .errors import TraceError

FORMAT = "specviz-trace"


class TraceWriter:
    """Append events to a trace file; use as a context manager."""

    def __init__(self, path: str | Path, header: dict[str, Any]) -> None:
        self.path = Path(path)
        self._file: TextIO | None = self.path.open("w", encoding="utf-8")
        self._line({"kind": "header", "format": FORMAT, "schema": ev.SCHEMA_VERSION, **header})

    def write(self, event: ev.Event) -> None:
        self._line(ev.to_dict(event))

    def _line(self, record: dict[str, Any]) -> None:
        if self._file is None:
            raise ValueError("trace is closed")
        self._file.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Trace:
    """A trace as read: its header, the events that parsed, and the first problem, if any."""

    path: Path
    header: dict[str, Any]
    events: list[ev.Event] = field(default_factory=list)
    problem: TraceError | None = None

    @property
    def steps(self) -> list[ev.StepEvent]:
        return [e for e in self.events if isinstance(e, ev.StepEvent)]

    @property
    def summary(self) -> ev.SummaryEvent | None:
        last = self.events[-1] if self.events else None
        return last if isinstance(last, ev.SummaryEvent) else None


def iter_trace(path: str | Path) -> Iterator[dict[str, Any] | ev.Event]:
    """Yield the header dict, then each event; raise TraceError at the first bad line."""
    path = Path(path)
    try:
        f = path.open(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"cannot open trace {path}: {exc.strerror}") from None
    empty, number = True, 0
    with f:
        try:
            for number, line in enumerate(f, start=1):
                empty = False
                yield _parse(path, number, line)
        except UnicodeDecodeError:
            raise TraceError(f"{path}, line {number + 1}: not UTF-8 text"
                             + (", not a specviz trace" if number == 0 else "")) from None
    if empty:
        raise TraceError(f"{path}: empty file, not a specviz trace")


def read_trace(path: str | Path) -> Trace:
    """Everything readable in a trace; a corrupt or truncated tail is reported in `problem`."""
    items = iter_trace(path)
    header = next(items)  # a bad header is a TraceError: nothing is readable then
    trace = Trace(Path(path), header)  # type: ignore[arg-type]
    try:
        for item in items:
            trace.events.append(item)  # type: ignore[arg-type]
    except TraceError as exc:
        trace.problem = exc
    return trace


def _parse(path: Path, number: int, line: str) -> dict[str, Any] | ev.Event:
    where = f"{path}, line {number}"
    if not line.endswith("\n"):
        raise TraceError(f"{where}: truncated (the run was cut off while writing)")
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(record, dict):
        raise TraceError(f"{where}: expected a JSON object")
    if number == 1:
        if record.get("format") != FORMAT:
            raise TraceError(f"{where}: not a specviz trace (no header)")
        if record.get("schema", 0) > ev.SCHEMA_VERSION:
            raise TraceError(f"{where}: written by a newer specviz (schema {record['schema']})")
        return record
    try:
        return ev.from_dict(record)
    except ValueError as exc:
        raise TraceError(f"{where}: {exc}") from None


def machine_info() -> dict[str, Any]:
    """Where a trace was recorded, so figures can be compared honestly."""
    import os

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
