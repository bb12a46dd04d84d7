"""Server lanes against a real llama-server (built by tests/llama_server.py): smollm2-135m as
target, as its own draft model, with an n-gram drafter, and without speculation."""

from __future__ import annotations

import io
import json

import pytest
from llama_server import RunningServer, binary, cmake_flags

from specviz.engines import events as ev
from specviz.engines.host import protocol
from specviz.engines.host import run_spec as rs
from specviz.engines.host.engine_process import Engine
from specviz.engines.host.run_builder import build_lane
from specviz.engines.machine.hardware import CpuFacts
from specviz.engines.trace import TraceWriter, read_trace

PROMPT = ("def mean(values):\n    total = 0\n    for v in values:\n        total += v\n"
          "    return total / len(values)\n\n\ndef mean_of_squares(values):\n")
# The model explains the code in prose that repeats its names: n-grams to draft from.
COPYING = ("class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y"
           "\n\n\nclass Size:\n    def __init__(self, width, height):\n")
K = 4


def test_the_build_leaves_amx_out_only_where_the_cpu_has_it():
    amx = CpuFacts("Xeon", "x86_64", frozenset({"avx2", "fma", "avx512f", "amx_int8"}))
    plain = CpuFacts("EPYC", "x86_64", frozenset({"avx2", "fma"}))
    assert "-DGGML_NATIVE=ON" in cmake_flags(plain)
    flags = cmake_flags(amx)
    assert "-DGGML_NATIVE=OFF" in flags and "-DGGML_AMX_INT8=OFF" in flags
    assert "-DGGML_AVX512=ON" in flags and "-DGGML_F16C=OFF" in flags


@pytest.fixture(scope="module")
def servers(smollm2_path):
    path = binary()
    if path is None:
        pytest.skip("llama-server is not built here (python tests/llama_server.py --build)")
    model = smollm2_path
    started = {}
    try:
        started["draft"] = RunningServer(path, model, "-md", str(model), "--spec-type",
                                         "draft-simple", "--spec-draft-n-max", str(K),
                                         "--spec-draft-n-min", "0")
        started["ngram"] = RunningServer(path, model, "--spec-type", "ngram-simple",
                                         "--spec-ngram-simple-size-n", "3",
                                         "--spec-ngram-simple-size-m", str(K))
        started["plain"] = RunningServer(path, model)
        yield {name: server.url for name, server in started.items()}
    finally:
        for server in started.values():
            server.close()


def run(url: str, max_tokens: int = 48, prompt: str = PROMPT, **server):
    request = rs.RunRequest(prompt, rs.ModelChoice("smollm2-135m"), max_tokens=max_tokens,
                            chat=False)
    built = build_lane("lane1", rs.LaneSpec("server", server=rs.ServerSpec(url, **server)),
                       request, pool=None)
    events = list(built.steps())
    return built, [e for e in events if isinstance(e, ev.StepEvent)], events[-1]


@pytest.mark.model
def test_speculation_on_the_server_is_lossless_and_its_steps_add_up(servers):
    _, plain_steps, plain = run(servers["plain"])
    built, steps, summary = run(servers["draft"])
    assert summary.text == plain.text and summary.totals.tokens == plain.totals.tokens
    assert "".join(s.text for s in steps) == summary.text
    assert sum(s.n_accepted + 1 for s in steps) == summary.totals.tokens
    assert all(not s.proposed for s in plain_steps)  # the plain server never drafts
    # Its own model as the draft: the target agrees with nearly every draft.
    assert summary.totals.acceptance_rate > 0.8
    assert summary.totals.mean_accepted_tokens > 3.0
    assert max(len(s.proposed) for s in steps) == K
    assert built.header["server"]["engine"] == "llama.cpp"


@pytest.mark.model
def test_an_ngram_server_declines_where_nothing_matches(servers):
    _, steps, summary = run(servers["ngram"], prompt=COPYING, source="ngram")
    drafted = [s for s in steps if s.proposed]
    assert drafted and all(t.source == "ngram" for s in drafted for t in s.proposed)
    assert any(s.declined == ev.DECLINE_SERVER for s in steps)
    rejected = [t for s in drafted for t in s.rejected]
    assert all(t.reject_reason == ev.REJECT_NOT_EXPOSED for t in rejected)
    _, _, plain = run(servers["plain"], prompt=COPYING)
    assert summary.text == plain.text


@pytest.mark.model
def test_stop_midway_and_the_server_serves_the_next_request(servers):
    request = rs.RunRequest(PROMPT, rs.ModelChoice("smollm2-135m"), max_tokens=64, chat=False)
    built = build_lane("lane1", rs.LaneSpec("server", server=servers["draft"]), request, None)
    events = []
    for event in built.steps():
        events.append(event)
        if len(events) == 3:
            built.stop()
    assert events[-1].reason == "stopped" and events[-1].totals.steps == 3
    assert "draft length only when it starts" in built.control("set_k", {"k": 8})
    assert run(servers["draft"], max_tokens=8)[2].totals.tokens == 8


@pytest.mark.model
def test_the_engine_process_runs_a_server_lane_and_its_trace_replays(servers, tmp_path):
    out = io.BytesIO()
    engine = Engine(out)
    spec = rs.RunSpec(rs.RunRequest(PROMPT, rs.ModelChoice("smollm2-135m"), max_tokens=24,
                                    chat=False),
                      {"lane1": rs.LaneSpec("server", server=servers["draft"]),
                       "lane2": rs.LaneSpec("server", server="http://127.0.0.1:9")})
    engine.receive(protocol.Message("set_k", {"lane": "lane1", "k": 6}))
    engine.run(spec)
    messages = [protocol.decode(line) for line in out.getvalue().splitlines()]
    kinds = [(m.kind, m.fields.get("lane")) for m in messages]
    assert ("failed", "lane2") in kinds and ("started", "lane1") in kinds
    failed = next(m for m in messages if m.kind == "failed")
    assert "cannot reach http://127.0.0.1:9" in failed["message"]
    refused = next(m for m in messages if m.kind == "refused")
    assert "draft length only when it starts" in refused["message"]
    header = next(m for m in messages if m.kind == "started")["header"]
    events = [m["event"] for m in messages if m.kind == "event"]
    with TraceWriter(tmp_path / "server.jsonl", header) as writer:
        for event in events:
            writer.write(event)
    trace = read_trace(tmp_path / "server.jsonl")
    assert trace.problem is None and trace.events == events
    assert trace.summary.text == "".join(s.text for s in trace.steps)
    assert json.loads((tmp_path / "server.jsonl").read_text().splitlines()[0])["oracle"] \
        == "server"
