"""`specviz run --streams N` and `specviz bench --streams 1,2,...` on a tiny llama.cpp model:
the per-stream and total figures, the speedup over batched plain decoding with its interval,
the crossover, and one line for each bad input."""

from __future__ import annotations

import json

import pytest

from specviz.app.cli.main import main
from specviz.engines.batch_events import BatchStep
from specviz.engines.trace import read_trace


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    from tiny_gguf import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("streams-cli") / "tiny.gguf")


def run_args(gguf, *more: str) -> list[str]:
    return ["run", "--target", str(gguf), "--backend", "llama", "--threads", "1", "--no-chat",
            "--prompt", "the x the y the x the", "--oracle", "prompt-lookup", "--k", "3",
            "--max-tokens", "12", *more]


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_run_streams_prints_every_streams_pace_and_the_total(gguf, capsys):
    assert main(run_args(gguf, "--streams", "3", "--json")) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["streams"] == 3 and result["tokens"] == 36
    assert [s["stream"] for s in result["streams_detail"]] == [0, 1, 2]
    assert all(s["pace"] > 0 and s["tokens"] == 12 for s in result["streams_detail"])
    assert result["tok_per_s"] > 0 and result["failures"] == []


def test_run_streams_baseline_is_batched_plain_decoding_with_an_interval(gguf, capsys):
    assert main(run_args(gguf, "--streams", "2", "--baseline", "--max-tokens", "40",
                         "--json")) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["plain_tok_per_s"] > 0 and result["plain_pace"] > 0
    assert result["speedup"] > 0 and result["stretches"] >= 4
    assert result["interval"][0] <= result["speedup"] <= result["interval"][1]
    assert result["verdict"] in ("faster", "slower", "within noise")


def test_run_streams_text_names_each_stream(gguf, capsys):
    assert main(run_args(gguf, "--streams", "2")) == 0
    captured = capsys.readouterr()
    assert "--- stream 1" in captured.out and "--- stream 2" in captured.out
    assert "2 streams: 24 tokens" in captured.err


def test_run_streams_traces_every_stream_and_replay_prints_each(gguf, tmp_path, capsys):
    """Sampled, each stream has its own seed and so its own text: the trace keeps all three,
    stream by stream, and `replay --print` gives each (or the one asked for)."""
    path = tmp_path / "streams.jsonl"
    assert main(run_args(gguf, "--streams", "3", "--temperature", "1", "--trace", str(path),
                         "--json")) == 0
    result = json.loads(capsys.readouterr().out)
    texts = [s["text"] for s in result["streams_detail"]]
    assert len(set(texts)) > 1  # the streams differ: a trace of stream 1 thrice would not
    trace = read_trace(path)
    assert trace.problem is None and trace.streams == 3
    assert sum(isinstance(b, BatchStep) for b in trace.batches) == result["steps"]
    assert trace.events == trace.stream(0).events  # a reader of one stream reads stream 1
    for i, text in enumerate(texts):
        one = trace.stream(i)
        assert one.summary.text == text and "".join(e.text for e in one.steps) == text
    assert main(["replay", "--print", str(path)]) == 0
    out, err = capsys.readouterr()
    assert f"3 streams: 36 tokens, {result['tok_per_s']:.1f} tokens/s in all" in err
    assert [line for line in out.splitlines() if line.startswith("--- stream")] == [
        "--- stream 1", "--- stream 2", "--- stream 3"]
    assert main(["replay", "--print", "--stream", "2", str(path)]) == 0
    out = capsys.readouterr().out
    assert "--- stream 1" not in out and texts[1] in out
    assert main(["replay", "--print", "--stream", "4", str(path)]) == 2
    assert "holds 3 stream(s), not a stream 4" in one_line(capsys.readouterr().err)


def test_run_streams_baseline_traces_the_first_rounds_speculating_batch(gguf, tmp_path,
                                                                       capsys):
    path = tmp_path / "streams.jsonl"
    assert main(run_args(gguf, "--streams", "2", "--baseline", "--rounds", "2",
                         "--trace", str(path), "--json")) == 0
    result = json.loads(capsys.readouterr().out)
    trace = read_trace(path)
    assert trace.streams == 2 and trace.header["oracle"] == "prompt-lookup"
    assert [trace.stream(i).summary.text for i in range(2)] == [
        s["text"] for s in result["streams_detail"]]
    assert sum(isinstance(b, BatchStep) for b in trace.batches) == result["steps"]


@pytest.mark.parametrize("n", ["0", "17", "two"])
def test_streams_out_of_range_is_one_line(gguf, n, capsys):
    with pytest.raises(SystemExit) as stop:
        main(run_args(gguf, "--streams", n))
    assert stop.value.code == 2
    assert "streams must be" in capsys.readouterr().err.splitlines()[-1]


def test_more_streams_than_the_context_holds_is_one_line_before_the_run(gguf, capsys):
    assert main(run_args(gguf, "--streams", "8", "--max-tokens", "100")) == 2
    captured = capsys.readouterr()
    line = one_line(captured.err)
    assert "8 streams need" in line and "at most 3 of these fit" in line
    assert captured.out == ""  # nothing decoded


def test_auto_k_chooses_for_the_batch(gguf, capsys):
    """`--k auto` with streams: K chosen for the batch each step, the mean said, every
    stream decoded to its budget."""
    args = run_args(gguf, "--streams", "2", "--json")
    args[args.index("--k") + 1] = "auto"
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["k"] == "auto" and result["tokens"] == 24
    detail = result["streams_detail"]
    assert result["mean_k"] == round(sum(s["proposed"] for s in detail)
                                     / sum(s["steps"] for s in detail), 3)


def test_bench_streams_gives_each_count_and_the_crossover(gguf, tmp_path, capsys):
    questions = tmp_path / "q.jsonl"
    questions.write_text(
        '{"question_id": 1, "category": "writing", "turns": ["the x the y the x the"]}\n'
        '{"question_id": 2, "category": "coding", "turns": ["def add(a, b): a + b def"]}\n')
    out = tmp_path / "streams.json"
    assert main(["bench", "--target", str(gguf), "--backend", "llama", "--threads", "1",
                 "--oracles", "none,prompt-lookup", "--k", "3,auto", "--max-tokens", "12",
                 "--questions", str(questions), "--streams", "1,2", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| prompt-lookup | 3 | 2 |" in table and "prompt-lookup K=3:" in table
    assert "| prompt-lookup | auto | 2 |" in table and "prompt-lookup K=auto:" in table
    fixed, auto = json.loads(out.read_text())["lanes"]
    assert (fixed["k"], auto["k"]) == (3, "auto")
    for lane in (fixed, auto):
        assert [p["streams"] for p in lane["points"]] == [1, 2]
        assert all(p["plain_tok_per_s"] > 0 and "verdict" in p for p in lane["points"])
        assert "crossover" in lane
