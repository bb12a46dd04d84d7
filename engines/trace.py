"""Traces: a run as JSON Lines, written as it goes, replayable without a model.

Line 1 is a header (models with checksums, backend, device, settings, machine, prompt);
every further line is one event (`events.to_json`). A run of N streams (its header's
`streams`: every stream's prompt) stores a line per batched pass instead, every stream's step
in it, and the batch's summary (`batch_events.to_dict`); read, its `events` are stream 1's,
and `stream(i)` is the trace of stream i + 1. Each line goes to the file in one write,
whole, so a crash loses at most the step in flight; a write that fails (a full disk) is cut
back to the last whole line and ends the trace with one line saying how many steps it keeps.
Reading stops at the first bad line with an error that names it, and everything before it
stays available; a header whose fields are not of the types its readers use is refused.
"""

from __future__ import annotations

import json
import platform
import stat
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from . import batch_events as batches
from . import events as ev
from .atomic import cannot_write
from .backends.stream_cache import MAX_STREAMS
from .bounded_json import JSONProblem, loads
from .errors import SpecvizError, TraceError

FORMAT = "specviz-trace"
MAX_LINE = 64 << 20  # bytes: a step whose token is megabytes long fits many times over
BATCH_RECORDS = (batches.BatchStep, batches.StreamsSummary)  # a run of N streams' lines


class TraceWriter:
    """Append events to a trace file; use as a context manager. A file that cannot be made
    or written is a SpecvizError naming it."""

    def __init__(self, path: str | Path, header: dict[str, Any]) -> None:
        self.path = Path(path)
        self.steps = 0  # steps written whole
        self._size = 0  # bytes written whole
        try:
            self._file: BinaryIO | None = self.path.open("wb", buffering=0)
        except OSError as exc:
            raise cannot_write(self.path, exc) from None
        self._line({"kind": "header", "format": FORMAT, "schema": ev.SCHEMA_VERSION, **header})

    def write(self, event: ev.Event | batches.BatchEvent) -> None:
        if isinstance(event, BATCH_RECORDS):
            self._line(batches.to_dict(event))
        else:
            self._line(ev.to_dict(event))
        if isinstance(event, ev.StepEvent | batches.BatchStep):
            self.steps += 1

    def _line(self, record: dict[str, Any]) -> None:
        if self._file is None:
            raise ValueError("trace is closed")
        data = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        try:
            rest = memoryview(data)
            while rest:  # more than one write only where the first was cut short
                rest = rest[self._file.write(rest):]
        except OSError as exc:
            raise self._failed(exc) from None
        self._size += len(data)

    def _failed(self, exc: OSError) -> SpecvizError:
        """The file cut back to its last whole line and closed: the one line to say."""
        file, self._file = self._file, None
        with file, suppress(OSError):  # a shorter file asks for no space
            file.truncate(self._size)
        if not self._size:  # not even the header: nothing worth keeping
            self.path.unlink(missing_ok=True)
            return cannot_write(self.path, exc)
        kept = ("no step" if not self.steps else "its first step" if self.steps == 1
                else f"its first {self.steps} steps")
        return SpecvizError(f"{cannot_write(self.path, exc)} (the trace keeps {kept})")

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
    """A trace as read: its header, the events that parsed (of a run of N streams, stream
    1's, or the stream `shown`), every record in the order written, and the first problem,
    if any."""

    path: Path
    header: dict[str, Any]
    events: list[ev.Event] = field(default_factory=list)
    problem: TraceError | None = None
    records: list[ev.Event | batches.BatchEvent] = field(default_factory=list)  # as written
    shown: int = 0  # of a run of N streams, the stream whose events these are (0: stream 1)

    @property
    def batches(self) -> list[batches.BatchEvent]:
        """The batch's records, where the run decoded N streams at once."""
        return [r for r in self.records if isinstance(r, BATCH_RECORDS)]

    @property
    def steps(self) -> list[ev.StepEvent]:
        return [e for e in self.events if isinstance(e, ev.StepEvent)]

    @property
    def summary(self) -> ev.SummaryEvent | None:
        last = self.events[-1] if self.events else None
        return last if isinstance(last, ev.SummaryEvent) else None

    @property
    def streams(self) -> int:
        """How many streams the run decoded at once (1: a single run)."""
        return len(self.header.get("streams", {}).get("prompts", [])) or 1

    def stream(self, index: int) -> Trace:
        """Stream `index + 1` as a trace of its own: its prompt in the header, its events."""
        if not 0 <= index < self.streams:
            raise TraceError(f"{self.path} holds {self.streams} stream(s), not a stream "
                             f"{index + 1}")
        if index == 0:
            return self
        of = self.header["streams"]
        header = {**self.header, "prompt": of["prompts"][index],
                  "prompt_text": _nth(of, "prompt_texts", index, of["prompts"][index]),
                  "token_chars": _nth(of, "token_chars", index, []), "prompt_ids": []}
        return Trace(self.path, header, batches.stream_events(self.batches, index),
                     self.problem, self.records, index)


def _nth(streams: dict[str, Any], name: str, index: int, default: Any) -> Any:
    values = streams.get(name, [])
    return values[index] if index < len(values) else default


def iter_trace(path: str | Path) -> Iterator[dict[str, Any] | ev.Event]:
    """Yield the header dict, then each event; raise TraceError at the first bad line."""
    path = Path(path)
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a FIFO's open waits, /dev/zero never ends
            raise TraceError(f"{path} is not a regular file, not a specviz trace")
        f = path.open("rb")
    except OSError as exc:
        raise TraceError(f"cannot open trace {path}: {exc.strerror}") from None
    with f:
        for number, line in enumerate(_lines(f), start=1):
            yield _parse(path, number, line)
        if f.tell() == 0:
            raise TraceError(f"{path}: empty file, not a specviz trace")


def _lines(f: BinaryIO) -> Iterator[bytes]:
    """The file's lines, each of at most MAX_LINE bytes and one past it (said by _parse):
    a line is never read whole into memory when it is longer."""
    while line := f.readline(MAX_LINE + 1):
        yield line
        if len(line) > MAX_LINE:
            return


def read_trace(path: str | Path) -> Trace:
    """Everything readable in a trace; a corrupt or truncated tail is reported in `problem`."""
    items = iter_trace(path)
    header = next(items)  # a bad header is a TraceError: nothing is readable then
    trace = Trace(Path(path), header)  # type: ignore[arg-type]
    try:
        for item in items:
            trace.records.append(item)  # type: ignore[arg-type]
            if not isinstance(item, BATCH_RECORDS):
                trace.events.append(item)  # type: ignore[arg-type]
    except TraceError as exc:
        trace.problem = exc
    if found := trace.batches:  # stream 1's, then what the window ended it with (the engine died)
        trace.events = batches.stream_events(found, 0) + trace.events
    return trace


def _parse(path: Path, number: int, line: bytes
           ) -> dict[str, Any] | ev.Event | batches.BatchEvent:
    where = f"{path}, line {number}"
    if len(line) > MAX_LINE:
        raise TraceError(f"{where}: longer than {MAX_LINE:,} bytes, not a line of a trace")
    if not line.endswith(b"\n"):
        raise TraceError(f"{where}: truncated (the run was cut off while writing)")
    try:
        record = loads(line)
    except JSONProblem as exc:
        raise TraceError(f"{where}: {exc}" + (", not a specviz trace" if number == 1 else "")
                         ) from None
    if not isinstance(record, dict):
        raise TraceError(f"{where}: expected a JSON object")
    if number == 1:
        return _header(where, record)
    try:
        if record.get("kind") in batches.KINDS:
            return batches.from_dict(record)
        return ev.from_dict(record)
    except ValueError as exc:
        raise TraceError(f"{where}: {exc}") from None


NoneType = type(None)
# The header's fields its readers use (replay, shot, export, the window), by type: a field
# may be missing (an older trace), never of another type.
HEADER_TYPES: dict[str, tuple[type, ...]] = {
    "schema": (int,), "prompt": (str,), "prompt_text": (str,), "oracle": (str,),
    "backend": (str, NoneType), "device": (str, NoneType), "dtype": (str, NoneType),
    "compile": (str, NoneType),
    "target": (dict,), "draft": (dict, NoneType), "server": (dict, NoneType),
    "settings": (dict,), "machine": (dict,), "prompt_ids": (list,), "token_chars": (list,),
    "streams": (dict,),
}
STREAMS_TYPES: dict[str, tuple[type, ...]] = {
    "n": (int,), "prompts": (list,), "prompt_texts": (list,), "token_chars": (list,),
}
SETTINGS_TYPES: dict[str, tuple[type, ...]] = {
    "k": (int, NoneType), "max_tokens": (int, NoneType), "auto_k": (bool,),
}


def _header(where: str, record: dict[str, Any]) -> dict[str, Any]:
    """Line 1, checked: a specviz trace this specviz can read, its fields of their types."""
    if record.get("format") != FORMAT:
        raise TraceError(f"{where}: not a specviz trace (no header)")
    _check_types(where, record, HEADER_TYPES, "")
    _check_types(where, record.get("settings", {}), SETTINGS_TYPES, "settings.")
    _check_streams(where, record.get("streams"))
    if record.get("schema", 0) > ev.SCHEMA_VERSION:
        raise TraceError(f"{where}: written by a newer specviz (schema {record['schema']})")
    return record


def _check_streams(where: str, streams: dict[str, Any] | None) -> None:
    """A run of N streams: each stream's prompt a string, its texts and characters lists."""
    if streams is None:
        return
    _check_types(where, streams, STREAMS_TYPES, "streams.")
    if len(streams.get("prompts", [])) > MAX_STREAMS:  # every reader walks each stream
        raise TraceError(f"{where}: the header's streams name {len(streams['prompts'])} "
                         f"prompts, more than the {MAX_STREAMS} a run decodes")
    for name, kind in (("prompts", str), ("prompt_texts", str), ("token_chars", list)):
        if not all(isinstance(v, kind) for v in streams.get(name, [])):
            raise TraceError(f"{where}: the header's streams.{name} holds other than "
                             f"{kind.__name__}s")


def _check_types(where: str, record: dict[str, Any], types: dict[str, tuple[type, ...]],
                 prefix: str) -> None:
    for name, allowed in types.items():
        if name in record and not _is(record[name], allowed):
            names = " or ".join("null" if t is NoneType else t.__name__ for t in allowed)
            raise TraceError(f"{where}: the header's {prefix}{name} is "
                             f"{_shown(record[name])}, not {names}")


def _is(value: Any, allowed: tuple[type, ...]) -> bool:
    if isinstance(value, bool):  # JSON's true is no number here
        return bool in allowed
    return isinstance(value, allowed)


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else f"{text[:37]}..."


def machine_info() -> dict[str, Any]:
    """Where a trace was recorded, so figures can be compared honestly."""
    import os

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
