"""Server lanes without a real engine: streams shaped as llama-server, vLLM and SGLang send
them (from their sources) become step events; every way a server fails is one line."""

from __future__ import annotations

import json
import socket
import threading

import pytest
from fake_server import FakeServer, Reply, sse

from specviz.engines import events as ev
from specviz.engines.errors import SpecvizError
from specviz.engines.host import run_spec as rs
from specviz.engines.host.lanes import ServerLane
from specviz.engines.host.run_builder import build_lane
from specviz.engines.loop.session import RunSettings
from specviz.engines.servers import connect, llama_server, sglang, vllm
from specviz.engines.servers.server_session import ServerSession
from specviz.engines.servers.sse import Endpoint, ServerError
from specviz.engines.servers.steps import StepBuilder

PROPS = {"default_generation_settings": {"params": {"speculative.types": "draft-simple"}},
         "build_info": "b1-test", "model_path": "/m/smol.gguf", "endpoint_slots": False}
MODELS = {"object": "list", "data": [{"id": "smol", "owned_by": "llamacpp"}]}


def llama_chunks(steps, finish="length", n_prompt=7):
    """llama-server's stream: one chunk per token, running totals in `timings`; a step is
    (texts, drafted, accepted, ms). The first step is the prompt's own token."""
    chunks, n, drafted, accepted, gen = [], 0, 0, 0, 0.0
    for texts, d, a, ms in steps:
        drafted, accepted, gen = drafted + d, accepted + a, gen + ms
        for text in texts:
            n += 1
            timings = {"prompt_n": n_prompt, "cache_n": 0, "prompt_ms": 12.5,
                       "predicted_n": n, "predicted_ms": round(gen, 3)}
            if drafted:
                timings |= {"draft_n": drafted, "draft_n_accepted": accepted}
            chunks.append({"choices": [{"text": text, "index": 0, "finish_reason": None}],
                           "object": "text_completion", "timings": timings})
    last = dict(chunks[-1], choices=[{"text": "", "index": 0, "finish_reason": finish}])
    return [*chunks, last]


STEPS = [(["def"], 0, 0, 0.001), ([" f", "(", "x"], 4, 2, 30.0), ([")", ":"], 4, 1, 28.0),
         ([" return"], 0, 0, 9.0), ([" x", "\n"], 3, 1, 25.0)]


def feed_all(builder: StepBuilder, engine, chunks) -> list[ev.StepEvent]:
    out = []
    for i, data in enumerate(chunks):
        out += builder.feed(engine.chunk(data, i), 1.0)
    return out + builder.finish(1.0)


def test_llama_server_chunks_group_into_its_verification_steps():
    builder = StepBuilder("server", "draft", "llama.cpp", None, speculates=True)
    steps = feed_all(builder, llama_server, llama_chunks(STEPS))
    assert [s.text for s in steps] == ["def", " f(x", "):", " return", " x\n"]
    assert [s.n_accepted for s in steps] == [0, 2, 1, 0, 1]
    assert [len(s.rejected) for s in steps] == [0, 2, 3, 0, 2]
    assert [s.target.kind for s in steps][1:] == ["correction"] * 2 + ["plain", "correction"]
    assert steps[1].accepted[0].text == " f" and steps[1].target.text == "x"
    hidden = steps[1].rejected[0]
    assert hidden.reject_reason == ev.REJECT_NOT_EXPOSED and hidden.verified_by == "llama.cpp"
    assert [s.declined for s in steps] == [None, None, None, ev.DECLINE_SERVER, None]
    assert [s.timing.total_ms for s in steps] == pytest.approx([0.001, 30.0, 28.0, 9.0, 25.0])
    t = steps[-1].totals
    assert (t.tokens, t.steps, t.proposed, t.accepted) == (9, 5, 11, 4)
    assert steps[2].position == 7 + 4  # the prompt, then the tokens before the step
    assert builder.finish_reason == "length" and builder.prompt_ms == 12.5
    # The server did not say its K: a step's K is the longest draft so far, never less.
    assert [s.k for s in steps] == [0, 4, 4, 4, 4]


def test_server_steps_survive_the_protocol_and_traces_unknowns_included():
    steps = feed_all(StepBuilder("server", "draft", "llama.cpp", None, True), llama_server,
                     llama_chunks(STEPS))
    assert all(ev.from_dict(json.loads(ev.to_json(s))) == s for s in steps)
    assert steps[1].target.p_target is None and steps[1].target.margin is None


def test_a_step_cut_by_the_token_limit_keeps_its_tokens():
    # 3 of 4 drafts accepted, but the limit came after 2 of them: the last one is the target's.
    chunks = llama_chunks([(["a"], 0, 0, 0.001), (["b", "c"], 4, 3, 20.0)])
    steps = feed_all(StepBuilder("server", "draft", "llama.cpp", 4, True), llama_server, chunks)
    assert steps[1].text == "bc" and steps[1].n_accepted == 1 and steps[1].k == 4


def test_vllm_chunks_are_steps_and_its_final_metrics_count_the_drafts():
    chunks = [{"choices": [{"index": 0, "text": t, "token_ids": ids,
                            "logprobs": {"tokens": pieces, "token_logprobs": [-0.1] * len(ids)},
                            "finish_reason": f}],
               "usage": {"prompt_tokens": 5, "completion_tokens": n}}
              for t, ids, pieces, n, f in [("Hi", [7], ["Hi"], 1, None),
                                          (" there you", [8, 9], [" there", " you"], 3, None),
                                          ("!", [10], ["!"], 4, "stop")]]
    chunks.append({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4},
                   "metrics": {"speculative_decoding": {"num_draft_tokens": 6,
                                                        "num_accepted_draft_tokens": 1}}})
    builder = StepBuilder("server", "draft", "vLLM", None, speculates=False)
    steps = feed_all(builder, vllm, chunks)
    assert [s.text for s in steps] == ["Hi", " there you", "!"]
    assert steps[1].accepted[0].text == " there" and steps[1].accepted[0].id == 8
    assert steps[1].target.id == 9 and steps[1].target.p_target == pytest.approx(0.905, 1e-3)
    assert steps[1].rejected == ()  # vLLM does not say what each step drafted
    assert builder.run_drafted == 6


def test_sglang_spec_details_chunk_gives_the_run_totals():
    chunks = [{"choices": [{"index": 0, "text": "ab", "token_ids": [1, 2],
                            "finish_reason": None}]},
              {"choices": [{"index": 0, "text": "c", "token_ids": [3], "finish_reason": "stop",
                            "matched_stop": "\n\n"}]},
              {"choices": [], "sglext": {"spec_tokens_details": {
                  "spec_num_proposed_drafts": 8, "spec_num_correct_drafts": 1,
                  "spec_verify_ct": 2}}}]
    builder = StepBuilder("server", "draft", "SGLang", None, speculates=False)
    steps = feed_all(builder, sglang, chunks)
    assert [s.n_accepted for s in steps] == [1, 0] and builder.run_drafted == 8
    assert builder.stop_string


# ---------------------------------------------------------------- against a fake server


def llama_routes(stream=None, props=PROPS, **reply):
    def complete(body):
        return Reply(lines=sse(stream or llama_chunks(STEPS)), **reply)

    return {("GET", "/v1/models"): lambda _: Reply(json_body=MODELS),
            ("GET", "/props"): lambda _: Reply(json_body=props),
            ("POST", "/v1/completions"): complete,
            ("POST", "/v1/chat/completions"): complete}


def run_lane(url, chat=True, **lane):
    spec = rs.LaneSpec("server", server=url, **lane)
    request = rs.RunRequest("Write f.", rs.ModelChoice("smollm2-135m"), max_tokens=32,
                            chat=chat)
    built = build_lane("lane1", spec, request, pool=None)
    return built, list(built.steps())


def test_a_server_lane_runs_end_to_end_and_its_header_names_the_server(monkeypatch):
    monkeypatch.setenv("SPECVIZ_API_KEY", "sk-secret")
    with FakeServer(llama_routes()) as server:
        built, events = run_lane(server.url)
    summary = events[-1]
    assert summary.text == "def f(x):return x\n".replace(":r", ": r")
    assert summary.totals.tokens == 9 and summary.reason == "max-tokens"
    assert isinstance(built, ServerLane) and built.header["server"]["engine"] == "llama.cpp"
    assert built.build == "llama-server b1-test"
    path, body, headers = server.requests[-1]
    assert path == "/v1/chat/completions" and body["timings_per_token"] is True
    assert body["messages"][-1] == {"role": "user", "content": "Write f."}
    assert headers["Authorization"] == "Bearer sk-secret"
    assert "sk-secret" not in json.dumps(built.header)  # the key never enters a trace


def test_raw_prompts_go_to_the_completions_endpoint():
    with FakeServer(llama_routes()) as server:
        run_lane(server.url, chat=False)
    path, body, _ = server.requests[-1]
    assert path == "/v1/completions" and body["prompt"] == "Write f."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("make, problem", [
    (lambda: None, "cannot reach .* is the server running"),
    (lambda: llama_routes(status=500) | {("POST", "/v1/chat/completions"): lambda _: Reply(
        500, {"error": {"message": "out of memory"}})}, "HTTP 500: out of memory"),
    (lambda: llama_routes() | {("POST", "/v1/chat/completions"): lambda _: Reply(
        401, {"error": "bad key"})}, "HTTP 401: bad key .*--api-key-env"),
    (lambda: llama_routes() | {("POST", "/v1/chat/completions"): lambda _: Reply(
        lines=["data: {not json\n\n"])}, "not JSON"),
    (lambda: llama_routes() | {("POST", "/v1/chat/completions"): lambda _: Reply(
        lines=sse(llama_chunks(STEPS), done=False), cut=True)}, "ended the stream midway"),
    (lambda: llama_routes() | {("POST", "/v1/chat/completions"): lambda _: Reply(
        lines=sse([{"error": {"message": "slot crashed"}}]))}, "failed midway: slot crashed"),
    (lambda: {("GET", "/v1/models"): lambda _: Reply(404, {})}, "not an OpenAI-compatible"),
])
def test_every_server_failure_is_one_line(make, problem):
    routes = make()
    if routes is None:
        url = f"http://127.0.0.1:{free_port()}"
        with pytest.raises(SpecvizError, match=problem):
            run_lane(url)
        return
    with FakeServer(routes) as server, pytest.raises(SpecvizError, match=problem) as info:
        run_lane(server.url)
    assert "\n" not in str(info.value)


def test_a_slow_server_times_out_and_the_tokens_so_far_were_yielded():
    """The server falls silent until the test has seen the timeout (a silence of 2 s that a
    busy machine's late reader could outlast, and then no timeout came); the read timeout is
    3 s, longer than any pause a busy machine put between lines that are sent at once."""
    silence = threading.Event()
    routes = llama_routes() | {("POST", "/v1/chat/completions"): lambda _: Reply(
        lines=sse(llama_chunks(STEPS)), stall_after=3, stall=silence)}
    try:
        with FakeServer(routes) as server:
            endpoint = Endpoint(server.url, read_timeout=3.0)
            engine, info = connect(endpoint)
            session = ServerSession(endpoint, engine, info,
                                    RunSettings("Write f.", max_tokens=32))
            got = []
            with pytest.raises(ServerError, match=r"sent nothing for 3(\.0)? s"):
                for event in session:
                    got.append(event)
    finally:
        silence.set()
    assert [e.text for e in got] == ["def"]  # the first step, complete before the silence


def test_stop_closes_the_stream_and_ends_with_a_stopped_summary():
    with FakeServer(llama_routes(pause=0.05)) as server:
        endpoint = Endpoint(server.url)
        engine, info = connect(endpoint)
        session = ServerSession(endpoint, engine, info, RunSettings("Write f.", max_tokens=32))
        events = []
        for event in session:
            events.append(event)
            if len(events) == 2:
                session.stop()
    assert events[-1].reason == "stopped" and len(events) == 3


def test_k_is_refused_in_one_line_where_the_server_takes_it_only_at_start():
    with FakeServer(llama_routes()) as server:
        endpoint = Endpoint(server.url)
        engine, info = connect(endpoint)
        session = ServerSession(endpoint, engine, info, RunSettings("x"))
        with pytest.raises(SpecvizError, match="draft length only when it starts"):
            session.set_k(8)


def test_k_changed_mid_run_continues_the_text_in_a_fresh_request_with_the_new_k():
    props = {**PROPS, "default_generation_settings": {"params": {
        "speculative.types": "draft-simple", "speculative.n_max": 4}}}
    def complete(body):
        if body["speculative.n_max"] == 4:
            return Reply(lines=sse(llama_chunks(STEPS)), pause=0.05)
        return Reply(lines=sse(llama_chunks([([" y"], 0, 0, 0.001), (["!"], 8, 0, 5.0)],
                                            finish="stop")))

    routes = llama_routes(props=props) | {("POST", "/v1/completions"): complete}
    with FakeServer(routes) as server:
        endpoint = Endpoint(server.url)
        engine, info = connect(endpoint)
        assert info.k_per_request and info.k == 4
        session = ServerSession(endpoint, engine, info,
                                RunSettings("P:", chat=False, k=4, max_tokens=32))
        events = []
        for event in session:
            events.append(event)
            if len(events) == 2:
                session.set_k(8)
    bodies = [b for p, b, _ in server.requests if p == "/v1/completions"]
    assert [b["speculative.n_max"] for b in bodies] == [4, 8]
    assert bodies[1]["prompt"] == "P:" + "".join(e.text for e in events[:2])
    steps = [e for e in events if isinstance(e, ev.StepEvent)]
    assert [s.k for s in steps] == [4, 4, 8, 8] and events[-1].reason == "eos"
    assert events[-1].text == "def f(x y!"


def test_stored_keys_reach_their_own_servers_lanes_by_a_variable_of_their_own(monkeypatch):
    from specviz.app.state.server_keys import env_name, origin, with_keys
    from specviz.engines.host.server_lanes import api_key, remember_key

    assert origin("http://gpu:8080/v1/chat") == origin("gpu:8080") == "http://gpu:8080"
    assert origin("https://api.example.com/v1") == "https://api.example.com:443"
    keys = {"http://gpu:8080": "sk-1"}
    lanes, secrets = with_keys({"a": rs.LaneSpec("server", server="http://gpu:8080/v1"),
                                "b": rs.LaneSpec("server", server="http://other:8080"),
                                "c": rs.LaneSpec("server", server=rs.ServerSpec(
                                    "http://gpu:8080", api_key_env="MINE")),
                                "d": rs.LaneSpec("ngram")}, keys.get)
    name = env_name("http://gpu:8080")
    assert secrets == {name: "sk-1"} and lanes["a"].server.api_key_env == name
    assert lanes["b"].server.api_key_env is None and lanes["c"].server.api_key_env == "MINE"
    assert "sk-1" not in repr(lanes)
    monkeypatch.delenv(name, raising=False)
    remember_key(name, "sk-1")
    assert api_key(name) == "sk-1"
    for bad in ("LD_PRELOAD", "SPECVIZ_KEY_../x", "SPECVIZ_KEY_"):
        with pytest.raises(SpecvizError, match="SPECVIZ_KEY_"):
            remember_key(bad, "x")


def test_a_server_lane_refuses_an_oracle_setting_and_an_unknown_control_with_the_reason():
    with FakeServer(llama_routes()) as server:
        built = build_lane("lane1", rs.LaneSpec("server", server=server.url),
                           rs.RunRequest("Write f.", rs.ModelChoice("smollm2-135m")), pool=None)
    assert "no oracle settings" in built.control("set_knob", {"name": "split", "value": 0.1})
    assert "unknown control 'set_top_p'" in built.control("set_top_p", {"value": 0.5})
    assert "a server chooses its own draft length" in built.control("set_auto", {"on": True})
