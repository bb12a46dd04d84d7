"""Traces under faults: a write that fails is one line and leaves whole lines only; a header
of the wrong types is one line when read, never a traceback further on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from write_faults import files_in, one_line, specviz

from specviz.app.cli.main import main
from specviz.engines.errors import SpecvizError, TraceError
from specviz.engines.trace import TraceWriter, read_trace

SMALL = Path(__file__).parent / "data" / "small_trace.jsonl"


def run_args(target: Path, *extra: object) -> list[str]:
    # The target is the tiny GGUF (llama.cpp, picked by its format): a trace is written the
    # same from either backend, and a child on it starts in a second, not the seconds torch
    # takes to import.
    return ["run", "--target", str(target), "--no-chat", "--prompt", "def add(a, b):",
            "--max-tokens", "8", "--k", "4", "--oracle", "prompt-lookup", *map(str, extra)]


# ---------------------------------------------------------------- writing


@pytest.mark.parametrize("where", ["missing/dir/t.jsonl", "a-folder", "a-file/t.jsonl"])
def test_a_trace_that_cannot_be_made_is_one_line_naming_it(where, tmp_path):
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "a-file").write_text("x")
    before = files_in(tmp_path)
    with pytest.raises(SpecvizError, match=f"cannot write {tmp_path / where}: "):
        TraceWriter(tmp_path / where, {"prompt": "p"})
    assert files_in(tmp_path) == before


def test_the_command_line_says_a_missing_trace_folder_in_one_line(tiny_gguf_path, tmp_path):
    done = specviz(*run_args(tiny_gguf_path, "--trace", tmp_path / "missing/dir/t.jsonl"))
    assert done.returncode == 2 and done.stdout == ""
    assert one_line(done.stderr) == (f"specviz: cannot write {tmp_path}/missing/dir/t.jsonl: "
                                     "No such file or directory")
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_ends_the_trace_at_its_last_whole_line(tiny_gguf_path, tmp_path):
    """The file-size limit falls after the header, then after one step: one line each, saying
    how many steps the trace keeps, and the trace holds whole lines only."""
    whole = tmp_path / "whole.jsonl"
    assert specviz(*run_args(tiny_gguf_path, "--trace", whole)).returncode == 0
    lines = whole.read_bytes().splitlines(keepends=True)
    assert json.loads(lines[1])["kind"] == "step"
    for limit, kept, n in ((len(lines[0]) + 5, "no step", 1),
                           (len(lines[0]) + len(lines[1]) + len(lines[2]) // 2,
                            "its first step", 2)):
        trace = tmp_path / f"cut-{n}.jsonl"
        done = specviz(*run_args(tiny_gguf_path, "--trace", trace), fsize=limit)
        assert done.returncode == 2, done.stderr
        assert one_line(done.stderr) == (f"specviz: cannot write {trace}: File too large "
                                         f"(the trace keeps {kept})")
        data = trace.read_bytes()
        assert data.endswith(b"\n") and data.count(b"\n") == n
        read = read_trace(trace)
        assert read.problem is None and len(read.steps) == n - 1


# ---------------------------------------------------------------- reading


def _header_with(**fields) -> str:
    header = json.loads(SMALL.read_text(encoding="utf-8").splitlines()[0])
    for name, value in fields.items():
        if "." in name:
            outer, inner = name.split(".")
            header[outer] = {**header[outer], inner: value}
        else:
            header[name] = value
    return json.dumps(header)


@pytest.mark.parametrize("fields, message", [
    ({"schema": "1"}, 'schema is "1", not int'),
    ({"schema": None}, "schema is null, not int"),
    ({"schema": 1.5}, "schema is 1.5, not int"),
    ({"schema": True}, "schema is true, not int"),
    ({"prompt": 42}, "prompt is 42, not str"),
    ({"prompt": ["a", "b"]}, 'prompt is ["a", "b"], not str'),
    ({"prompt": None}, "prompt is null, not str"),
    ({"prompt_text": {"x": 1}}, "prompt_text is"),
    ({"oracle": 3}, "oracle is 3, not str"),
    ({"target": None}, "target is null, not dict"),
    ({"target": "tiny"}, 'target is "tiny", not dict'),
    ({"draft": 7}, "draft is 7, not dict or null"),
    ({"server": "x"}, 'server is "x", not dict or null'),
    ({"settings": "k=4"}, 'settings is "k=4", not dict'),
    ({"settings.k": "4"}, 'settings.k is "4", not int or null'),
    ({"settings.max_tokens": 8.5}, "settings.max_tokens is 8.5, not int or null"),
    ({"settings.auto_k": "yes"}, 'settings.auto_k is "yes", not bool'),
    ({"backend": ["llama"]}, "backend is"),
    ({"prompt": "x" * 1000, "schema": "1"}, 'schema is "1"'),
    ({"streams": 3}, "streams is 3, not dict"),
    ({"streams": {"prompts": "abc"}}, 'streams.prompts is "abc", not list'),
    ({"streams": {"prompts": ["a", 2]}}, "streams.prompts holds other than strs"),
    ({"streams": {"prompts": ["a"], "token_chars": ["xy"]}},
     "streams.token_chars holds other than lists"),
    ({"streams": {"prompts": ["a"] * 17}}, "streams name 17 prompts, more than the 16"),
], ids=lambda v: str(v)[:30])
def test_a_header_of_the_wrong_types_is_one_line(fields, message, tmp_path, capsys):
    rest = SMALL.read_text(encoding="utf-8").splitlines(keepends=True)[1:]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(_header_with(**fields) + "\n" + "".join(rest), encoding="utf-8")
    with pytest.raises(TraceError) as raised:
        read_trace(bad)
    assert str(raised.value).startswith(f"{bad}, line 1: the header's {message}")
    assert len(str(raised.value)) < 200
    for argv in (["replay", "--print", bad], ["export", bad, tmp_path / "out.html"]):
        assert main(list(map(str, argv))) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"line 1: the header's {message}" in err, err
    assert not (tmp_path / "out.html").exists()


def test_the_recorded_header_is_accepted():
    assert read_trace(SMALL).problem is None


def test_a_torn_last_line_leaves_every_whole_record_readable(tmp_path):
    whole = read_trace(SMALL)
    data = SMALL.read_bytes()
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(data[:data.rstrip(b"\n").rfind(b"\n") + 1] + b'{"kind":"summ')
    trace = read_trace(torn)
    assert trace.events == whole.events[:-1] and trace.header == whole.header
    assert "truncated" in str(trace.problem)


def _with_line(number: int, line: bytes) -> bytes:
    """The small trace with its line `number` (1: the header) replaced by `line`."""
    lines = SMALL.read_bytes().splitlines(keepends=True)
    lines[number - 1] = line + b"\n"
    return b"".join(lines)


def _step_of_type(name: str, value) -> bytes:
    step = json.loads(SMALL.read_bytes().splitlines()[1])
    return json.dumps({**step, name: value}).encode()


@pytest.mark.parametrize("number, line, message", [
    (1, b"[" * 100_000 + b"]" * 100_000, "line 1: nested more than 64 levels deep"),
    (2, b"[" * 1000 + b"]" * 1000, "line 2: nested more than 64 levels deep"),
    (2, b'{"kind": "step", "step": 1e999999}', "line 2: a number out of range (1e999999)"),
    (2, _step_of_type("step", "one"), "line 2: malformed step record: step is 'one', not int"),
    (2, _step_of_type("timing", [1, 2]), "line 2: malformed step record: "
                                         "specviz.engines.events.Timing() argument after ** "),
    (2, _step_of_type("timing", None), "line 2: malformed step record: "),
    (2, b'{"kind": "batch_step", "index": 0}', "line 2: malformed batch: KeyError('steps')"),
    (2, b'{"kind": "batch_step", "index": "one", "width": 2, "steps": [], "timing": {}, '
        b'"left": []}', "line 2: invalid literal for int()"),
    (2, b'{"kind": "batch_step", "index": 0, "width": 2, "steps": [[0]], "timing": {}, '
        b'"left": []}', "line 2: not enough values to unpack"),
    (2, b'{"kind": "batch_summary", "steps": 1, "compute_ms": 1, "prefill_ms": 0, '
        b'"wall_ms": 1, "paces": [], "summaries": [{"kind": "step"}]}',
     "line 2: malformed step record"),
], ids=["deep header", "deep step", "huge number", "string step", "list timing", "no timing",
        "batch without width", "batch index a word", "stream without step", "summary a step"])
def test_a_hostile_line_is_one_line_naming_it(number, line, message, tmp_path, capsys):
    """Nested JSON raised RecursionError out of every reader: `replay --print` printed a
    34-line traceback, `export` 43."""
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(_with_line(number, line))
    for argv in (["replay", "--print", bad], ["export", bad, tmp_path / "out.html"],
                 ["anatomy", bad, tmp_path / "out.html", "--step", "0"]):
        code = main(list(map(str, argv)))
        err = capsys.readouterr().err
        said = [line for line in err.splitlines() if line.startswith("specviz:")]
        assert code in (0, 2) and "Traceback" not in err, (argv, err)
        assert len(said) == 1 and message in said[0], (argv, err)
    assert not (tmp_path / "out.html").exists()
