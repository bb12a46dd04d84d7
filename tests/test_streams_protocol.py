"""A race of N streams across the engine protocol: batch events survive a line both ways, and
the real engine process runs every lane of a streams race as a batch, plain decoding too."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
from step_factory import make_step

from specviz.engines import events as ev
from specviz.engines.host import protocol
from specviz.engines.host import run_spec as rs
from specviz.engines.loop.streams import BatchStep, StreamsSummary


def test_a_batch_step_and_a_batch_summary_survive_a_line():
    step = BatchStep(3, ((0, make_step(3, timing=ev.Timing(1.0, 2.0, 0.5))),
                         (2, make_step(3, text="b", timing=ev.Timing(0.5, 2.0, 0.5)))),
                     width=7, timing=ev.Timing(1.5, 2.0, 0.25), left=((2, "max-tokens"),))
    summary = StreamsSummary((ev.SummaryEvent("none", "eos", "ab", step.steps[0][1].totals,
                                             3.0, 20.0),),
                             steps=4, compute_ms=12.5, prefill_ms=3.0, wall_ms=20.0,
                             paces=(80.0,))
    for batch in (step, summary):
        message = protocol.decode(protocol.encode("batch", lane="lane2", batch=batch))
        assert message.kind == "batch" and message["lane"] == "lane2"
        assert message["batch"] == batch


def test_a_malformed_batch_is_refused_in_one_line():
    line = b'{"v": 1, "msg": "batch", "lane": "x", "batch": {"kind": "batch_step"}}\n'
    with pytest.raises(protocol.ProtocolError, match="bad batch"):
        protocol.decode(line)


def test_one_stream_is_the_spec_as_written_before_streams_and_n_travels():
    spec = rs.RunSpec(rs.RunRequest("hi", rs.ModelChoice("tiny")), {"a": rs.LaneSpec("none")})
    data = rs.to_dict(spec)
    assert "streams" not in data["request"]  # an older engine reads it as it always did
    assert rs.from_dict(data).request.streams == 1
    four = dataclasses.replace(spec, request=dataclasses.replace(spec.request, streams=4))
    assert rs.from_dict(json.loads(json.dumps(rs.to_dict(four)))) == four


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    from tiny_gguf import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("streams-race") / "tiny.gguf")


def test_the_engine_races_two_batched_lanes_by_turns(tiny_gguf, tmp_path):
    """Plain decoding and prompt lookup, 3 streams each: a header naming every stream's
    prompt, batch steps from both lanes in turn, then each lane's summary of 3 streams."""
    import os

    spec = rs.RunSpec(rs.RunRequest("def add(a, b):\n    return a + b\n\ndef add(",
                                    rs.ModelChoice(str(tiny_gguf), "llama", "cpu", 1, 2048),
                                    max_tokens=12, chat=False, streams=3),
                      {"a": rs.LaneSpec("none"), "b": rs.LaneSpec("prompt-lookup", 3)})
    engine = subprocess.Popen([sys.executable, "-m", "specviz.engines.host.engine_process"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE,
                              env={**os.environ, "SPECVIZ_HOME": str(tmp_path)})
    engine.stdin.write(protocol.encode("run", spec=rs.to_dict(spec)))
    engine.stdin.flush()
    messages = []
    for line in engine.stdout:
        messages.append(protocol.decode(line))
        if messages[-1].kind == "done":
            break
    _, err = engine.communicate(protocol.encode("shutdown"), timeout=60)
    assert engine.returncode == 0, err.decode()
    assert not [m for m in messages if m.kind == "failed"], messages
    started = {m["lane"]: m["header"] for m in messages if m.kind == "started"}
    assert [len(h["streams"]["prompts"]) for h in started.values()] == [3, 3]
    assert started["a"]["streams"]["prompts"][0] == spec.request.prompt
    batches = [(m["lane"], m["batch"]) for m in messages if m.kind == "batch"]
    assert not [m for m in messages if m.kind == "event"]  # a streams race sends batches only
    assert [lane for lane, _ in batches[:2]] == ["a", "b"]  # by turns
    ends = {lane: b for lane, b in batches if isinstance(b, StreamsSummary)}
    assert set(ends) == {"a", "b"} and all(len(s.summaries) == 3 for s in ends.values())
    first = next(b for lane, b in batches if lane == "a" and isinstance(b, BatchStep))
    assert sorted(i for i, _ in first.steps) == [0, 1, 2]


def test_a_batch_of_streams_takes_k_for_every_stream_and_refuses_the_rest():
    from types import SimpleNamespace

    from specviz.engines.host.stream_lanes import StreamsLane

    streams = [SimpleNamespace(k=4), SimpleNamespace(k=4)]
    lane = StreamsLane("b", SimpleNamespace(streams=streams, batch_k=None), {}, builder=None)
    assert lane.control("set_k", {"lane": "b", "k": 2}) is None
    assert [s.k for s in streams] == [2, 2]
    assert "keeps" in lane.control("set_auto", {"lane": "b", "on": True, "k": 2})
    assert "between 0 and" in lane.control("set_k", {"lane": "b", "k": 99})
    plain = StreamsLane("a", SimpleNamespace(streams=[SimpleNamespace(k=0)], batch_k=None), {},
                        builder=None)
    assert "no K" in plain.control("set_k", {"lane": "a", "k": 3})
    auto = StreamsLane("c", SimpleNamespace(streams=streams, batch_k=object()), {},
                       builder=None)
    assert "auto K chooses" in auto.control("set_k", {"lane": "c", "k": 3})
    assert [s.k for s in streams] == [2, 2]  # unchanged
