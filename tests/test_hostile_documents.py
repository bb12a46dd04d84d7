"""Every reader of a file or a peer's bytes, fed hostile documents (deep nesting, numbers past
a double or past Python's digit limit, JSON of the wrong types, documents cut short, invalid
UTF-8), says what is wrong in one line or takes the document, and nothing else: no other
exception, memory bounded, nothing written beside the file. A line of 1,000 `[` raised
RecursionError out of every reader (a 34- to 59-line traceback)."""

from __future__ import annotations

import json
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specviz.engines import bounded_json, corpus
from specviz.engines.bench import spec_bench
from specviz.engines.cost import profile_shape, profile_store
from specviz.engines.cost.profile_data import PROFILE_VERSION
from specviz.engines.errors import SpecvizError
from specviz.engines.host import protocol, relay
from specviz.engines.machine import json_file
from specviz.engines.medusa.heads import HeadsConfig
from specviz.engines.oracles import memory_file
from specviz.engines.servers import spec_metrics, sse
from specviz.engines.trace import read_trace

HEADER = json.dumps({"kind": "header", "format": "specviz-trace", "schema": 1}) + "\n"
PEAK_BYTES = 64 << 20  # a reader's peak while reading one document of at most a few MB

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                          allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12)


def nested(depth: int, kind: str) -> str:
    if kind == "list":
        return "[" * depth + "]" * depth
    if kind == "object":
        return '{"a":' * depth + "1" + "}" * depth
    return "[" * depth  # unclosed: the parser recursed all the way before failing


hostile = st.one_of(
    st.builds(nested, st.integers(65, 100_000), st.sampled_from(["list", "object", "open"])),
    st.sampled_from(["1e999999", "-1e400", "9" * 5000, "NaN", "Infinity", '{"x": -Infinity}',
                     '{"run": "a", "tokens": [' + "9" * 5000 + "]}",
                     '{"kind": "step", "step": 1e999}']),
    json_values.map(json.dumps),  # the wrong types, wherever a reader expects others
    st.builds(lambda v, cut: json.dumps(v)[:cut], json_values, st.integers(0, 40)),  # cut short
    st.binary(max_size=64).map(lambda b: b"\xff" + b),  # not UTF-8
).map(lambda doc: doc if isinstance(doc, bytes) else doc.encode("utf-8", "surrogatepass"))


def said(reader: str, document: bytes) -> str | None:
    """What the reader said of the document, in a file of a folder of its own (None: it
    took it), held to one line, bounded memory and the folder as it was."""
    name, content, read, refusals = READERS[reader]
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        path = folder / name
        path.write_bytes(content(document))
        before = sorted((p.name, p.stat().st_size) for p in folder.iterdir())
        tracemalloc.start()
        try:
            read(path, document)
            line = None
        except refusals as exc:
            line = str(exc)
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        assert sorted((p.name, p.stat().st_size) for p in folder.iterdir()) == before
    assert peak < PEAK_BYTES, peak
    if line is not None:
        assert line and "\n" not in line and len(line) < 600, line
    return line


def one_line(document: bytes) -> bytes:
    return document.replace(b"\n", b" ") + b"\n"


def as_is(document: bytes) -> bytes:
    return document


def after_header(document: bytes) -> bytes:
    return HEADER.encode() + one_line(document)


def a_trace_line(path: Path, document: bytes) -> None:
    trace = read_trace(path)
    if trace.problem is not None:
        raise trace.problem
    assert all(isinstance(step.step, int) for step in trace.steps)


def a_trace_header(path: Path, document: bytes) -> None:
    read_trace(path)


def a_memory(path: Path, document: bytes) -> None:
    owner = memory_file.owner_line({"model": "m", "tokenizer": "t"})
    good = memory_file.line("a", [1, 2])
    contents = memory_file.parse(owner + good + document.replace(b"\n", b" ") + b"\n" + good)
    assert contents.records == [("a", [1, 2])] * 2 or len(contents.records) == 3
    if contents.unreadable:
        raise SpecvizError(contents.first_unreadable)


def a_profile(path: Path, document: bytes) -> None:
    data = bounded_json.read_json(path, profile_store.WHAT, bounded_json.SMALL_FILE)
    wrong = profile_shape.problem(data, PROFILE_VERSION)
    if wrong:
        raise SpecvizError(wrong)


def facts(path: Path, document: bytes) -> None:
    assert isinstance(json_file.read_dict(path), dict)


def a_request(path: Path, document: bytes) -> None:
    message = relay.check_request(document)
    assert message.kind in protocol.TO_ENGINE


def an_engine_line(path: Path, document: bytes) -> None:
    protocol.decode(document)


def a_stream_chunk(path: Path, document: bytes) -> None:
    sse._parse(document.decode("utf-8", "replace"), sse.Endpoint("http://127.0.0.1:1"))


def metrics(path: Path, document: bytes) -> None:
    text = document.decode("utf-8", "replace")
    spec_metrics.parse(f"llamacpp:n_drafted_total {text}\nvllm:spec_decode_num_accepted_tokens"
                       f'_per_pos_total{{position="{text[:40]}"}} {text[:40]}\n')


def prompts(path: Path, document: bytes) -> None:
    corpus.read_prompts([path])


def questions(path: Path, document: bytes) -> None:
    spec_bench.load_questions(path)


def heads_config(path: Path, document: bytes) -> None:
    HeadsConfig.from_json(document.decode("utf-8", "replace"))


READERS = {  # reader -> its file's name and bytes, how it reads, what it may refuse with
    "trace line": ("t.jsonl", after_header, a_trace_line, (SpecvizError,)),
    "trace header": ("t.jsonl", one_line, a_trace_header, (SpecvizError,)),
    "suffix memory": ("m.jsonl", as_is, a_memory, (SpecvizError,)),
    "cost profile": ("p.json", as_is, a_profile, (SpecvizError,)),
    "facts": ("f.json", as_is, facts, ()),
    "serve request": ("-", as_is, a_request, (protocol.ProtocolError,)),
    "engine line": ("-", as_is, an_engine_line, (protocol.ProtocolError,)),
    "server stream": ("-", as_is, a_stream_chunk, (sse.ServerError,)),
    "server metrics": ("-", as_is, metrics, ()),
    "prompts": ("p.jsonl", as_is, prompts, (SpecvizError,)),
    "questions": ("q.jsonl", as_is, questions, (SpecvizError,)),
    "heads config": ("-", as_is, heads_config, (ValueError,)),
}


@pytest.mark.parametrize("reader", READERS)
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(document=hostile)
def test_a_hostile_document_is_one_line_or_taken(reader, document):
    said(reader, document)


@pytest.mark.parametrize("reader", [r for r in READERS if READERS[r][3]])
def test_a_deep_document_is_refused_by_its_depth(reader):
    line = said(reader, b"[" * 1000 + b"]" * 1000)
    assert line is not None and "nested more than 64 levels deep" in line, line


def test_settings_of_the_wrong_kind_fall_back_to_their_defaults(tmp_path):
    from PySide6.QtCore import QSettings

    from specviz.app.state.settings import AppSettings
    from specviz.engines.host.run_spec import ModelChoice

    store = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    app = AppSettings(store)
    default = ModelChoice("t", "llama", None, None)
    for value in ("[" * 5000 + "]" * 5000, "1e999999", '["a list"]', '{"target": 3}', "x"):
        for key in ("model/choice", "model/recent", "model/folders", "lanes/configs",
                    "servers/keys"):
            store.setValue(key, value)
        assert app.model(default).target == "t"
        assert app.recent_models() == [] or value == '["a list"]'
        assert app.server_key("http://x") is None
        assert app.lanes()
    store.setValue("run/temperature", "inf")
    assert app.temperature() == 0.0
