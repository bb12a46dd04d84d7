"""The run spec and the engine protocol: JSON both ways, versions refused, a real engine."""

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

SPEC = rs.RunSpec(
    rs.RunRequest("def add(a, b):\n    return a + b\n\ndef add(",
                  rs.ModelChoice("tiny", "transformers", "cpu", 1, 512), max_tokens=12,
                  temperature=0.7, top_p=0.9, seed=3, chat=False, stop=("\n\n",),
                  typical=(0.09, 0.3)),
    {"lane1": rs.LaneSpec("none"),
     "lane2": rs.LaneSpec("tree", 6, draft="d", settings={"split": 0.2, "budget": 16}),
     "lane3": rs.LaneSpec("prompt-lookup", 4, auto_k=True)})


def test_a_run_spec_survives_json():
    text = json.dumps(rs.to_dict(SPEC))
    assert rs.from_dict(json.loads(text)) == SPEC


def test_a_newer_senders_extra_fields_are_ignored():
    data = rs.to_dict(SPEC)
    data["request"]["future"] = 1
    data["lanes"]["lane1"]["colour"] = "red"
    assert rs.from_dict(data) == SPEC


def test_messages_round_trip_events_included():
    step = make_step(oracle="ngram", timing=ev.Timing(1.0, 2.0, 0.5))
    message = protocol.decode(protocol.encode("event", lane="lane2", event=step))
    assert message.kind == "event" and message["lane"] == "lane2" and message["event"] == step
    control = protocol.decode(protocol.encode("set_k", lane="lane2", k=9))
    assert control.kind == "set_k" and control["k"] == 9  # a field may be called k


@pytest.mark.parametrize("line, problem", [
    (b"not json\n", "not a message"),
    (b'{"v": 1}\n', "no kind"),
    (b'{"v": 99, "msg": "run"}\n', "protocol version 99"),
    (b'{"v": 1, "msg": "exec"}\n', "unknown message kind"),
    (b'{"v": 1, "msg": "event", "lane": "x", "event": {"kind": "step"}}\n', "bad event"),
])
def test_bad_lines_are_refused_in_one_line(line, problem):
    with pytest.raises(protocol.ProtocolError, match=problem):
        protocol.decode(line)


def test_the_engine_process_runs_a_spec_and_takes_controls(tiny_model_dir):
    """The real process: a run of two lanes, K changed before a lane is built, a bad line
    ignored, shutdown. What it writes on stdout is protocol only."""
    spec = rs.RunSpec(rs.RunRequest("def add(a, b):\n    return a + b\n\ndef add(",
                                    rs.ModelChoice(str(tiny_model_dir), "transformers", "cpu", 1),
                                    max_tokens=16, chat=False),
                      {"a": rs.LaneSpec("none"), "b": rs.LaneSpec("prompt-lookup", 4)})
    engine = subprocess.Popen([sys.executable, "-m", "specviz.engines.host.engine_process"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    engine.stdin.write(b"garbage\n" + protocol.encode("run", spec=rs.to_dict(spec))
                       + protocol.encode("set_k", lane="b", k=2))
    engine.stdin.flush()
    messages = []
    for line in engine.stdout:  # until the run is done
        messages.append(protocol.decode(line))
        if messages[-1].kind == "done":
            break
    _, err = engine.communicate(protocol.encode("shutdown"), timeout=60)
    kinds = [m.kind for m in messages]
    assert engine.returncode == 0, err.decode()
    assert kinds[0] == "hello" and "specviz engine: not a message" in err.decode()
    started = {m["lane"]: m["header"] for m in messages if m.kind == "started"}
    assert set(started) == {"a", "b"} and started["b"]["oracle"] == "prompt-lookup"
    assert "prompt_text" in started["a"] and "token_chars" in started["a"]
    steps = {lane: [m["event"] for m in messages if m.kind == "event" and m["lane"] == lane]
             for lane in ("a", "b")}
    assert all(isinstance(s[-1], ev.SummaryEvent) for s in steps.values())
    assert steps["a"][-1].text == steps["b"][-1].text  # lossless, as in-process
    assert {e.k for e in steps["b"][:-1] if e.totals.tokens + 2 < 16} == {2}


def test_controls_reach_a_lane_in_the_order_they_were_sent(tiny_gguf_path, tmp_path):
    """Auto K off (back to K = 3), then K = 6, sent to a built lane held before its first
    step: the lane runs at 6. (On the tiny GGUF: the order of controls is not the backend's,
    and the engine starts in a second, not the seconds torch takes to import.)"""
    import os

    spec = rs.RunSpec(rs.RunRequest("def add(a, b):\n    return a + b\n\ndef add(",
                                    rs.ModelChoice(str(tiny_gguf_path), "llama", "cpu", 1),
                                    max_tokens=24, chat=False),
                      {"b": rs.LaneSpec("prompt-lookup", 3, auto_k=True)})
    engine = subprocess.Popen([sys.executable, "-m", "specviz.engines.host.engine_process"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL,
                              env={**os.environ, "SPECVIZ_HOME": str(tmp_path)})
    engine.stdin.write(protocol.encode("run", spec=rs.to_dict(spec)) + protocol.encode("pause"))
    engine.stdin.flush()
    steps = []
    for line in engine.stdout:
        message = protocol.decode(line)
        if message.kind == "started":
            engine.stdin.write(protocol.encode("set_auto", lane="b", on=False, k=3)
                               + protocol.encode("set_k", lane="b", k=6)
                               + protocol.encode("resume"))
            engine.stdin.flush()
        if message.kind == "event" and isinstance(message["event"], ev.StepEvent):
            steps.append(message["event"])
        if message.kind == "done":
            break
    engine.communicate(protocol.encode("shutdown"), timeout=60)
    assert {e.k for e in steps if e.totals.tokens + 6 < 24} == {6}


def test_the_engine_measures_a_profile_and_checks_a_pair_between_runs(tiny_model_dir, tmp_path):
    """The window's two tasks: progress, then the result; a bad draft is one line and the
    engine goes on."""
    import os

    model = dataclasses.asdict(rs.ModelChoice(str(tiny_model_dir), "transformers", "cpu", 1))
    engine = subprocess.Popen([sys.executable, "-m", "specviz.engines.host.engine_process"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL,
                              # stored at once, however busy the machine is
                              env={**os.environ, "SPECVIZ_HOME": str(tmp_path)})
    engine.stdin.write(
        protocol.encode("profile", task="p1", model=model)
        + protocol.encode("pair", task="q1", model=model, draft="/nowhere/draft.gguf")
        + protocol.encode("pair", task="q2", model=model, draft=str(tiny_model_dir),
                          prompts=["def add(a, b):\n    return a + b\n"], max_tokens=10))
    engine.stdin.flush()
    messages, ended = [], set()
    for line in engine.stdout:
        message = protocol.decode(line)
        messages.append(message)
        if message.kind in ("finished", "task_failed"):
            ended.add(message["task"])
        if ended == {"p1", "q1", "q2"}:
            break
    engine.communicate(protocol.encode("shutdown"), timeout=60)
    progress = [m for m in messages if m.kind == "progress" and m["task"] == "p1"]
    assert progress and progress[-1]["done"] == progress[-1]["total"]
    results = {m["task"]: m for m in messages if m.kind in ("finished", "task_failed")}
    assert results["p1"].kind == "finished" and os.path.exists(results["p1"]["result"]["path"])
    assert results["q1"].kind == "task_failed" and "/nowhere/draft.gguf" in results["q1"]["message"]
    report = results["q2"]["result"]
    assert results["q2"].kind == "finished" and report["vocab"]["verdict"] == "draft"
    assert report["greedy_agreement"] == 1.0 and report["verdict"]
