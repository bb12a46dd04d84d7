"""`specviz serve`: the engine protocol over TCP behind a token. The real command in a
subprocess, spoken to over a plain socket: signing in, every kind of bad message refused with
the server still up, a real run, an engine killed mid-connection, too many clients."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from serve_client import Conn

from specviz.engines import events as ev
from specviz.engines.host import protocol
from specviz.engines.host import relay as srv
from specviz.engines.host import run_spec as rs
from specviz.engines.oracles.registry import SERVER

PROMPT = "def add(a, b):\n    return a + b\n\ndef add("


@pytest.fixture
def served(tmp_path, request):
    """`specviz serve` on a free port; (address, token)."""
    extra = getattr(request, "param", [])
    token_file = tmp_path / "token"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specviz", "serve", "--port", "0", "--token-file",
         str(token_file), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "SPECVIZ_HOME": str(tmp_path)})
    first = proc.stdout.readline().decode()
    assert "listening on 127.0.0.1:" in first, proc.stderr.read().decode()
    address = srv.parse_address(first.split("listening on ")[1].split(";")[0])
    yield address, token_file.read_text().strip()
    proc.terminate()
    proc.wait(10)


def signed_in(served) -> tuple[Conn, protocol.Message]:
    address, token = served
    conn = Conn(address)
    conn.send("auth", token=token)
    hello = conn.next()
    assert hello is not None and hello.kind == "hello", hello
    return conn, hello


def signed_in_once_free(served, within_s: float = 30.0) -> Conn:
    """Sign in, retrying while the server still counts a client that has left."""
    deadline = time.monotonic() + within_s
    while True:
        conn = Conn(served[0])
        conn.send("auth", token=served[1])
        reply = conn.next()
        if reply is not None and reply.kind == "hello":
            return conn
        assert reply is not None and reply["message"].startswith("busy"), reply
        assert time.monotonic() < deadline, "the server still counts a client that left"
        conn.close()
        time.sleep(0.05)


def tiny_spec(model, max_tokens=16, backend="transformers", **lanes) -> dict:
    lanes = lanes or {"a": rs.LaneSpec("none"), "b": rs.LaneSpec("prompt-lookup", 4)}
    return rs.to_dict(rs.RunSpec(
        rs.RunRequest(PROMPT, rs.ModelChoice(str(model), backend, "cpu", 1),
                      max_tokens=max_tokens, chat=False), lanes))


# The tests that stop a run midway run it on the tiny GGUF: how an engine dies or follows its
# client out is not the backend's, and an engine on it starts in a second, not the seconds
# torch takes to import. It decodes thousands of tokens a second: 4000 (of its context of
# 4096) keep the run going for seconds.
LONG_RUN = 4000


def with_request(spec: dict, **fields) -> dict:
    spec = json.loads(json.dumps(spec))
    spec["request"].update(fields)
    return spec


def gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


# ------------------------------------------------------------ pieces, no server


def test_lines_are_split_across_reads_and_a_flood_is_dropped_once():
    split = srv.LineSplitter(limit=10)
    assert split.feed(b'{"a"') == []
    assert split.feed(b':1}\n\n{"b"') == [b'{"a":1}', b""]
    assert split.feed(b":2}\n" + b"x" * 25) == [b'{"b":2}', srv.TOO_LONG]
    assert split.feed(b"y" * 40) == []  # still the same long line: dropped, said once
    assert split.feed(b"z\nok\n") == [b"ok"]
    assert split.feed(b"0123456789AB\n") == [srv.TOO_LONG]  # too long within one read


@pytest.mark.parametrize("text, address", [
    ("gpu-box:7341", srv.Address("gpu-box", 7341)),
    (":9000", srv.Address("127.0.0.1", 9000)),
    ("[::1]:7341", srv.Address("::1", 7341)),
])
def test_addresses(text, address):
    assert srv.parse_address(text) == address
    assert srv.parse_address(str(address)) == address


@pytest.mark.parametrize("text", ["gpu-box", "gpu-box:0", "gpu-box:http", "h:70000"])
def test_bad_addresses_are_one_line(text):
    with pytest.raises(srv.SpecvizError, match="HOST:PORT"):
        srv.parse_address(text)


@pytest.mark.parametrize("fields, problem", [
    ({"spec": {"request": {}}}, "bad spec"),
    ({"spec": with_request(tiny_spec("m"), max_tokens="all")}, "max_tokens cannot be 'all'"),
    ({"spec": with_request(tiny_spec("m"), stop=[3])}, "stop cannot be"),
    ({"spec": tiny_spec("m", a=rs.LaneSpec(SERVER, server="http://10.0.0.1"))},
     "makes no requests to other hosts"),
])
def test_runs_are_checked_before_they_reach_an_engine(fields, problem):
    with pytest.raises(protocol.ProtocolError, match=problem):
        srv.check_request(protocol.encode("run", **fields))


def test_controls_are_checked_before_they_reach_an_engine():
    bad = [protocol.encode("set_k", lane="a", k="9"), protocol.encode("set_k", lane="a", k=True),
           protocol.encode("set_knob", lane="a", name="split"),
           protocol.encode("profile", task="p", model={"target": 3}),
           protocol.encode("auth", token="again"), protocol.encode("done"),
           protocol.encode("secret", name="SPECVIZ_KEY_A", value="sk")]
    for line in bad:
        with pytest.raises(protocol.ProtocolError):
            srv.check_request(line)
    assert srv.check_request(protocol.encode("set_knob", lane="a", name="split",
                                             value=0.2)).kind == "set_knob"


# ------------------------------------------------------------ the real command


def test_a_wrong_token_is_refused_and_the_server_stays_up(served):
    address, token = served
    conn = Conn(address)
    conn.send("auth", token=token[:-1] + ("x" if token[-1] != "x" else "y"))
    refused = conn.next()
    assert refused.kind == "error" and refused["message"] == "wrong token"
    assert conn.next() is None  # closed
    conn = Conn(address)
    conn.send("set_k", lane="a", k=3)  # anything but auth first
    assert "must be auth" in conn.next()["message"]
    conn, hello = signed_in(served)
    assert hello["pid"] > 0
    conn.send("shutdown")
    assert conn.next() is None  # asked: the connection ends without a `died`


def test_bad_messages_are_refused_one_by_one_and_a_run_still_works(served, tiny_model_dir):
    conn, _ = signed_in(served)
    conn.raw(b"not json\n")
    conn.raw(b'{"v":1,"msg":"' + b"x" * (srv.MAX_LINE + 10) + b'"}\n')
    conn.raw(b'{"v":1,"msg":"exec","cmd":"rm -rf /"}\n')
    conn.send("set_k", lane="a", k="many")
    conn.send("run", spec={"request": {"prompt": 1}})
    errors = [conn.next() for _ in range(5)]
    assert all(e.kind == "error" for e in errors), errors
    said = [e["message"] for e in errors]
    assert "not a message" in said[0]
    assert f"longer than {srv.MAX_LINE} bytes" in said[1]
    assert "unknown message kind 'exec'" in said[2]
    assert "'k' must be int" in said[3] and errors[3]["request"] == "set_k"
    assert "bad spec" in said[4] and errors[4]["request"] == "run"
    conn.send("run", spec=tiny_spec(tiny_model_dir))
    messages = conn.until("done")
    events = {lane: [m["event"] for m in messages if m.kind == "event" and m["lane"] == lane]
              for lane in ("a", "b")}
    assert {m["lane"] for m in messages if m.kind == "started"} == {"a", "b"}
    assert all(isinstance(e[-1], ev.SummaryEvent) for e in events.values())
    assert events["a"][-1].text == events["b"][-1].text  # lossless over the wire too
    conn.send("shutdown")
    assert conn.next() is None


def test_an_engine_killed_mid_run_is_said_and_the_next_client_gets_a_fresh_one(
        served, tiny_gguf_path):
    conn, hello = signed_in(served)
    conn.send("run", spec=tiny_spec(tiny_gguf_path, max_tokens=LONG_RUN, backend="llama"))
    conn.until("event")
    os.kill(hello["pid"], signal.SIGKILL)
    seen = conn.until("died")
    assert "killed by SIGKILL" in seen[-1]["message"]
    assert conn.next() is None
    again, second = signed_in(served)
    assert second["pid"] != hello["pid"]
    again.send("shutdown")


def test_a_client_that_leaves_mid_run_takes_its_engine_with_it(served, tiny_gguf_path):
    conn, hello = signed_in(served)
    conn.send("run", spec=tiny_spec(tiny_gguf_path, max_tokens=LONG_RUN, backend="llama"))
    conn.until("event")
    conn.close()
    assert gone(hello["pid"], srv.CLOSE_S + 10)


@pytest.mark.parametrize("served", [["--max-clients", "1"]], indirect=True)
def test_one_client_too_many_is_told_the_server_is_busy(served):
    first, _ = signed_in(served)
    conn = Conn(served[0])
    refused = conn.next()
    assert refused.kind == "error" and refused["message"].startswith("busy: 1 clients")
    first.send("shutdown")
    assert first.next() is None
    again = signed_in_once_free(served)  # as soon as the server notices the first has gone
    again.send("shutdown")
