"""Traces: a round trip replays the same events; damage is reported by line."""

from __future__ import annotations

import pytest

from specviz.engines import events as ev
from specviz.engines.errors import TraceError
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.oracles import make_oracle
from specviz.engines.trace import TraceWriter, read_trace


@pytest.fixture(scope="module")
def recorded(tiny_backend, tmp_path_factory):
    path = tmp_path_factory.mktemp("traces") / "run.jsonl"
    session = Session(tiny_backend, make_oracle("prompt-lookup"),
                      RunSettings("def f(x):\n    return x\n def f(", chat=False, k=4,
                                  max_tokens=30))
    with TraceWriter(path, {"oracle": "prompt-lookup", "prompt_text": session.prompt_text}) as w:
        events = []
        for event in session:
            w.write(event)
            events.append(event)
    return path, events


def test_round_trip_gives_the_same_events(recorded):
    path, events = recorded
    trace = read_trace(path)
    assert trace.problem is None
    assert trace.events == events
    assert trace.header["oracle"] == "prompt-lookup"
    assert isinstance(trace.summary, ev.SummaryEvent)


def test_truncated_trace_keeps_what_came_before(recorded, tmp_path):
    path, events = recorded
    data = path.read_bytes()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(data[: len(data) - 40])  # the run died while writing its last line
    trace = read_trace(cut)
    assert trace.events == events[:-1]
    assert "truncated" in str(trace.problem) and f"line {len(events) + 1}" in str(trace.problem)


def test_corrupt_line_is_named(recorded, tmp_path):
    path, events = recorded
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[3] = '{"kind": "step", "oops": 1}\n'
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(lines), encoding="utf-8")
    trace = read_trace(bad)
    assert trace.events == events[:2]
    assert "line 4" in str(trace.problem) and "malformed step" in str(trace.problem)
    lines[3] = "not json at all\n"
    bad.write_text("".join(lines), encoding="utf-8")
    assert "line 4: not valid JSON" in str(read_trace(bad).problem)


@pytest.mark.parametrize("content, message", [
    ("", "empty file"),
    ('{"hello": 1}\n', "not a specviz trace"),
])
def test_not_a_trace(tmp_path, content, message):
    path = tmp_path / "x.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(TraceError, match=message):
        read_trace(path)


def test_missing_trace_file(tmp_path):
    with pytest.raises(TraceError, match="cannot open"):
        read_trace(tmp_path / "nope.jsonl")
