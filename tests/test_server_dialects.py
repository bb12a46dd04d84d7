"""Server lanes against local HTTP servers speaking vLLM's, SGLang's and a plain
OpenAI-compatible server's dialects (tests/dialect_servers.py): which engine each is taken for,
and a lane's tokens through vllm.py, sglang.py and generic.py, equal to what the server sent;
a dropped connection and a malformed chunk each end the lane with one line."""

from __future__ import annotations

import math

import pytest
from dialect_servers import (
    SCRIPT,
    Engine,
    Step,
    malformed,
    played_steps,
    sent_text,
    step_text,
)
from fake_server import FakeServer

from specviz.engines import events as ev
from specviz.engines.host import run_spec as rs
from specviz.engines.host.run_builder import build_lane
from specviz.engines.loop.session import RunSettings
from specviz.engines.servers import connect, generic, sglang, vllm
from specviz.engines.servers.server_session import ServerSession
from specviz.engines.servers.sse import Endpoint, ServerError

PROMPT = "def mean(values):"
SPEAKS = {  # dialect: (the module that reads it, the engine's name, its build line)
    "vllm": (vllm, "vLLM", "vLLM 0.11.0"),
    "sglang": (sglang, "SGLang", "SGLang 0.5.4"),
    "openai": (generic, "OpenAI-compatible server", "OpenAI-compatible server"),
}
ASKED = {  # what each is asked before a lane starts (an owner naming no engine: /props too)
    "vllm": ["/v1/models", "/version"],
    "sglang": ["/v1/models", "/get_server_info"],
    "openai": ["/v1/models", "/props"],
}


def engine(dialect: str, script=SCRIPT) -> Engine:
    return Engine(dialect, script, version=SPEAKS[dialect][2].split()[-1])


def run_lane(url: str, max_tokens: int = 64):
    spec = rs.LaneSpec("server", server=url)
    request = rs.RunRequest(PROMPT, rs.ModelChoice("smollm2-135m"), max_tokens=max_tokens,
                            chat=False)
    built = build_lane("lane1", spec, request, pool=None)
    events = list(built.steps())
    steps = [e for e in events if isinstance(e, ev.StepEvent)]
    return built, steps, events[-1]


@pytest.mark.parametrize("dialect", SPEAKS)
def test_each_engine_is_told_by_what_it_says_of_itself(dialect):
    served = engine(dialect)
    with FakeServer(served.routes()) as server:
        module, info = connect(Endpoint(server.url))
    reader, name, build = SPEAKS[dialect]
    assert module is reader and (info.engine, info.build) == (name, build)
    assert info.model == served.model
    assert [path for path, _body, _headers in server.requests] == ASKED[dialect]


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_a_named_engine_is_taken_at_its_word(dialect):
    with FakeServer(engine(dialect).routes()) as server:
        module, info = connect(Endpoint(server.url), dialect)
    assert module is SPEAKS[dialect][0] and info.engine == SPEAKS[dialect][1]


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_a_lane_on_a_step_streaming_engine_has_the_servers_steps_and_tokens(dialect):
    """One chunk a verification step: each step's text, token ids and log-probabilities are
    the chunk's, its accepted drafts all but its last token, and the run's drafts the total
    the engine gives at its end."""
    with FakeServer(engine(dialect).routes()) as server:
        built, steps, summary = run_lane(server.url)
    played = played_steps(SCRIPT, 64)
    assert [s.text for s in steps] == [step_text(p) for p in played]
    assert [[t.id for t in s.accepted] + [s.target.id] for s in steps] == [
        [i for i, _t, _lp in p.tokens] for p in played]
    assert [s.n_accepted for s in steps] == [p.accepted for p in played]
    chosen = [t for s in steps for t in s.accepted]
    assert [t.p_target for t in chosen] == pytest.approx(
        [math.exp(lp) for p in played for _i, _t, lp in p.tokens[:-1]])
    assert summary.text == sent_text(played) and summary.reason == "eos"
    assert summary.totals.tokens == sum(len(p.tokens) for p in played)
    assert summary.totals.accepted == sum(p.accepted for p in played)
    assert summary.totals.proposed == sum(p.drafted for p in played)
    assert built.header["server"]["engine"] == SPEAKS[dialect][1]
    path, body, _headers = server.requests[-1]
    assert path == "/v1/completions" and body["prompt"] == PROMPT
    assert body["max_tokens"] == 64 and body["return_token_ids"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


def test_a_lane_on_a_plain_openai_server_has_a_step_per_token_it_sent():
    """Speculation unknown: each chunk is a step of one token, the usage at the end only
    confirms the count."""
    with FakeServer(engine("openai").routes()) as server:
        built, steps, summary = run_lane(server.url)
    tokens = [text for p in SCRIPT for _i, text, _lp in p.tokens]
    assert [s.text for s in steps] == tokens
    assert all(s.n_accepted == 0 and s.proposed == () for s in steps)
    assert summary.text == "".join(tokens) and summary.totals.tokens == len(tokens)
    assert summary.reason == "eos" and built.header["server"]["speculation"] is None


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_a_character_split_across_tokens_keeps_the_text_the_server_sent(dialect):
    """The log-probabilities name each byte of "é" U+FFFD: the step's text is still the
    chunk's, and its tokens keep their ids and probabilities."""
    split = Step(((3001, " caf", -0.1), (3002, "", -0.2), (3003, "é", -0.3)), drafted=3,
                 named=(" caf", "\ufffd", "\ufffd"))
    script = [*SCRIPT[:2], split]
    with FakeServer(engine(dialect, script).routes()) as server:
        _built, steps, summary = run_lane(server.url)
    assert steps[-1].text == " café" and summary.text == sent_text(script)
    assert [t.id for t in steps[-1].accepted] + [steps[-1].target.id] == [3001, 3002, 3003]
    assert [t.p_target for t in steps[-1].accepted] == pytest.approx(
        [math.exp(-0.1), math.exp(-0.2)])


@pytest.mark.parametrize("dialect", SPEAKS)
def test_the_token_limit_ends_the_lane_where_the_server_stopped(dialect):
    with FakeServer(engine(dialect).routes()) as server:
        _built, _steps, summary = run_lane(server.url, max_tokens=6)
    assert summary.text == sent_text(played_steps(SCRIPT, 6))
    assert summary.totals.tokens == 6 and summary.reason == "max-tokens"


def session_on(url: str) -> ServerSession:
    endpoint = Endpoint(url)
    module, info = connect(endpoint)
    return ServerSession(endpoint, module, info, RunSettings(PROMPT, chat=False,
                                                             max_tokens=64))


@pytest.mark.parametrize("dialect", SPEAKS)
def test_a_connection_dropped_midway_is_one_line_after_the_steps_before_it(dialect):
    kept = 4  # chunks sent before the server goes
    with FakeServer(engine(dialect).routes(edit=lambda lines: lines[:kept], cut=True)) as server:
        got = []
        with pytest.raises(ServerError, match="broke the connection midway") as caught:
            for event in session_on(server.url):
                got.append(event)
    assert "\n" not in str(caught.value)
    sent = [step_text(p) for p in played_steps(SCRIPT, 64)] if dialect != "openai" else [
        text for p in SCRIPT for _i, text, _lp in p.tokens]
    assert kept - 1 <= len(got) <= kept and [e.text for e in got] == sent[:len(got)]


BAD_CHUNKS = {
    "not JSON": ('{"choices": [{"text": "x"', "not JSON"),
    "not an object": ([1, 2, 3], "not an object"),
    "choices not a list": ({"choices": {"text": "x"}}, "choices"),
    "text not text": ({"choices": [{"index": 0, "text": 5, "finish_reason": None}]}, "text"),
    "token ids not ids": ({"choices": [{"index": 0, "text": " x", "token_ids": "7",
                                        "finish_reason": None}]}, "token_ids"),
}


@pytest.mark.parametrize("dialect", SPEAKS)
@pytest.mark.parametrize("bad", BAD_CHUNKS)
def test_a_malformed_chunk_is_one_line(dialect, bad):
    line, problem = BAD_CHUNKS[bad]

    def spoil(lines):
        return [*lines[:2], malformed(line), *lines[2:]]

    with FakeServer(engine(dialect).routes(edit=spoil)) as server:
        got = []
        with pytest.raises(ServerError, match=problem) as caught:
            for event in session_on(server.url):
                got.append(event)
    assert "\n" not in str(caught.value) and len(got) <= 2
