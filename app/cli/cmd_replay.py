"""`specviz replay FILE...`: play recorded traces back, in the window or on the terminal."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ...board.one_prompt import check_one_prompt
from ...engines import events as ev
from ...engines.batch_events import StreamsSummary
from ...engines.errors import SpecvizError
from ...engines.trace import iter_trace, read_trace
from .console import EventPrinter, summary_line


def register(sub) -> None:
    p = sub.add_parser("replay", help="play back recorded traces (no model needed)")
    p.add_argument("files", nargs="+", type=Path, metavar="FILE")
    p.add_argument("--print", action="store_true", dest="print_",
                   help="print to the terminal instead of opening the window")
    p.add_argument("--show-rejected", action="store_true")
    p.add_argument("--stream", type=int, default=None, metavar="I",
                   help="of a trace of several streams, print stream I only (from 1; "
                        "default: each in turn)")
    p.add_argument("--speed", type=float, default=1.0,
                   help="playback speed in the window, 0.1 to 1 (default: recorded pace)")
    p.set_defaults(func=replay)


def replay(args: argparse.Namespace) -> int:
    if not args.print_:
        from .cmd_gui import open_window  # the window; imported late: it needs Qt

        check_one_prompt(_headers(args.files))  # the window races them side by side
        return open_window(replay=args.files, speed=args.speed)
    status = 0
    for path in args.files:
        status |= _print_trace(path, args.show_rejected, args.stream)
    return status


@dataclass(frozen=True)
class TraceHead:
    """A trace's path and header, all check_one_prompt reads before the window opens."""

    path: Path
    header: dict = field(default_factory=dict)


def _headers(paths: list[Path]) -> list[TraceHead]:
    """Each trace's path and header; a trace whose header cannot be read has none here (the
    window shows its problem in its lane)."""
    headers = []
    for path in paths:
        items = iter_trace(path)
        try:
            header = next(items)
        except SpecvizError:
            header = {}
        finally:
            items.close()
        headers.append(TraceHead(path, header))
    return headers


def _print_trace(path: Path, show_rejected: bool, stream: int | None = None) -> int:
    trace = read_trace(path)
    indices = range(trace.streams) if stream is None else [stream - 1]
    streams = [(i, trace.stream(i)) for i in indices]  # no such stream: one line, first
    head = trace.header
    print(f"# {path}: {head.get('oracle')} on {head.get('target', {}).get('name')} "
          f"({head.get('backend')}, {head.get('device')})", file=sys.stderr)
    for index, one in streams:
        if trace.streams > 1:
            print(f"--- stream {index + 1}")
        _print_events(one.events, show_rejected)
        if one.summary:
            print(summary_line(one.summary), file=sys.stderr)
    total = next((b for b in trace.batches if isinstance(b, StreamsSummary)), None)
    if total is not None and stream is None:
        print(f"{len(total.summaries)} streams: {total.tokens} tokens, "
              f"{total.tok_per_s:.1f} tokens/s in all", file=sys.stderr)
    if trace.problem:
        print(f"specviz: {trace.problem} (everything before it was shown)", file=sys.stderr)
        return 2
    return 0


def _print_events(events: list[ev.Event], show_rejected: bool) -> None:
    printer = EventPrinter(show_rejected=show_rejected)
    for event in events:
        if isinstance(event, ev.StepEvent):
            printer.step(event)
    print()
