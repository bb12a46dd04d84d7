"""Nonsense on the command line is one line, exit 2, before any model is loaded: numeric
options out of range (NaN and infinity too), argparse's own errors (which printed the whole
usage), a prompt longer than --n-ctx on llama.cpp (which aborted the process in a
GGML_ASSERT), an empty raw prompt, a model name too long for any file; and --seed -1 draws a
seed as llama.cpp's does."""

from __future__ import annotations

import json

import pytest
from write_faults import one_line, specviz

from specviz.app.cli.main import main

RUN = ["run", "--no-fetch", "--prompt", "hi"]
BENCH = ["bench", "--no-fetch", "--questions", "q.jsonl"]
PAIR = ["pair", "--no-fetch", "--draft", "smollm2-135m"]
SHOT = ["shot", "out.png", "--no-fetch", "--prompt", "hi"]

NUMERIC = {
    "temperature nan": ([*RUN, "--temperature", "nan"], "--temperature"),
    "temperature inf": ([*RUN, "--temperature", "inf"], "--temperature"),
    "temperature -inf": ([*RUN, "--temperature=-inf"], "--temperature"),
    "temperature negative": ([*RUN, "--temperature", "-0.5"], "--temperature"),
    "temperature text": ([*RUN, "--temperature", "warm"], "--temperature"),
    "top-p 0": ([*RUN, "--top-p", "0"], "--top-p"),
    "top-p above 1": ([*RUN, "--top-p", "1.01"], "--top-p"),
    "top-p nan": ([*RUN, "--top-p", "nan"], "--top-p"),
    "max-tokens -1": ([*RUN, "--max-tokens", "-1"], "--max-tokens"),
    "max-tokens 0": ([*RUN, "--max-tokens", "0"], "--max-tokens"),
    "max-tokens 1.5": ([*RUN, "--max-tokens", "1.5"], "--max-tokens"),
    "threads -3": ([*RUN, "--threads", "-3"], "--threads"),
    "threads 0": ([*RUN, "--threads", "0"], "--threads"),
    "n-ctx -1": ([*RUN, "--n-ctx", "-1"], "--n-ctx"),
    "seed -2": ([*RUN, "--seed", "-2"], "--seed"),
    "seed 2^32": ([*RUN, "--seed", str(2**32)], "--seed"),
    "k 33": ([*RUN, "--k", "33"], "--k"),
    "k -1": ([*RUN, "--k", "-1"], "--k"),
    "k text": ([*RUN, "--k", "many"], "--k"),
    "typical epsilon nan": ([*RUN, "--typical-epsilon", "nan"], "--typical-epsilon"),
    "typical alpha -1": ([*RUN, "--typical-alpha", "-1"], "--typical-alpha"),
    "bench temperature nan": ([*BENCH, "--temperature", "nan"], "--temperature"),
    "bench max-tokens 0": ([*BENCH, "--max-tokens", "0"], "--max-tokens"),
    "bench seed -5": ([*BENCH, "--seed", "-5"], "--seed"),
    "bench top-p 2": ([*BENCH, "--top-p", "2"], "--top-p"),
    "bench k 2,40": ([*BENCH, "--k", "2,40"], "--k"),
    "bench repeat 0": ([*BENCH, "--repeat", "0"], "--repeat"),
    "bench limit -1": ([*BENCH, "--limit", "-1"], "--limit"),
    "bench threads -1": ([*BENCH, "--threads", "-1"], "--threads"),
    "pair k-max 40": ([*PAIR, "--k-max", "40"], "--k-max"),
    "pair max-tokens 3": ([*PAIR, "--max-tokens", "3"], "--max-tokens"),
    "pair temperature inf": ([*PAIR, "--temperature", "inf"], "--temperature"),
    "profile repeats 0": (["profile", "--repeats", "0"], "--repeats"),
    "profile n-ctx -8": (["profile", "--n-ctx", "-8"], "--n-ctx"),
    "shot threads -3": ([*SHOT, "--threads", "-3"], "--threads"),
    "shot n-ctx -3": ([*SHOT, "--n-ctx", "-3"], "--n-ctx"),
}


def refused(argv: list[str], capsys) -> str:
    """Run `specviz ARGV` in this process; it must exit 2 with one `specviz:` line."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return one_line(captured.err)


@pytest.mark.parametrize("case", NUMERIC)
def test_a_numeric_option_out_of_range_is_one_line(case, capsys):
    argv, flag = NUMERIC[case]
    line = refused(argv, capsys)
    assert f"argument {flag}" in line and "--help" in line, line


ARGPARSE = {
    "unknown option": ([*RUN, "--bogus"], "specviz run --help"),
    "unknown command": (["bogus"], "specviz --help"),
    "missing value": (["run", "--prompt"], "specviz run --help"),
    "bad choice": ([*RUN, "--oracle", "bogus"], "specviz run --help"),
    "both prompts": ([*RUN, "--prompt-file", "p.txt"], "specviz run --help"),
    "required option": (["pair"], "specviz pair --help"),
    "nested command missing": (["models"], "specviz models --help"),
    "nested unknown option": (["models", "pull", "x", "--bogus"], "specviz models pull --help"),
}


@pytest.mark.parametrize("case", ARGPARSE)
def test_an_argparse_error_is_one_line_with_the_help_hinted(case, capsys):
    argv, hint = ARGPARSE[case]
    line = refused(argv, capsys)
    assert line.endswith(f"(see {hint})"), line


def test_a_model_name_too_long_for_a_file_is_one_line(capsys):
    name = "a" * 5000
    for argv in (["run", "--target", name, "--prompt", "hi", "--no-fetch"],
                 ["run", "--target", f"org/{name}.gguf", "--prompt", "hi"],
                 ["run", "--oracle", "draft", "--draft", name, "--prompt", "hi", "--no-fetch"],
                 ["models", "path", name]):
        assert main(argv) == 2
        line = one_line(capsys.readouterr().err)
        assert "too long" in line and len(line) < 300, line


def test_an_empty_raw_prompt_is_one_line(capsys):
    assert main(["run", "--prompt", "", "--no-chat", "--no-fetch"]) == 2
    assert "the prompt is empty" in one_line(capsys.readouterr().err)


@pytest.mark.parametrize("n_ctx", [8, 30])
def test_a_prompt_longer_than_n_ctx_is_one_line_on_llama(smollm2_path, n_ctx):
    """8: below llama.cpp's batch; 30: inside the 256 cells it pads the context to, where
    the prompt passed every check and llama.cpp aborted (exit 134)."""
    prompt = "one two three four five six seven eight nine ten " * 4
    done = specviz("run", "--target", smollm2_path, "--device", "cpu", "--n-ctx", n_ctx,
                   "--prompt", prompt, "--no-chat", "--k", "2", "--max-tokens", "4",
                   timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    line = one_line(done.stderr)
    assert f"context holds {n_ctx}" in line, line


def test_a_prompt_that_fits_n_ctx_runs_to_the_context_end(smollm2_path, capsys):
    """The prompt plus one token is enough: the run stops when the context is full."""
    argv = ["run", "--target", str(smollm2_path), "--device", "cpu", "--prompt",
            "one two three four five six seven eight nine ten", "--no-chat", "--k", "2",
            "--max-tokens", "50", "--json", "--n-ctx", "16"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["reason"] == "context-full" and 1 <= result["tokens"] < 16, result


def test_seed_minus_one_draws_a_seed_and_says_it(smollm2_path, capsys):
    argv = ["run", "--target", str(smollm2_path), "--device", "cpu", "--prompt", "hi",
            "--k", "0", "--max-tokens", "2", "--temperature", "0.8", "--json", "--seed", "-1"]
    seeds = set()
    for _ in range(2):
        assert main(argv) == 0
        seed = json.loads(capsys.readouterr().out)["seed"]
        assert isinstance(seed, int) and 0 <= seed < 2**32
        seeds.add(seed)
    assert len(seeds) == 2  # drawn, not a fixed stand-in


def test_a_reader_that_stops_early_ends_the_run_without_a_traceback(tiny_gguf_path):
    """`specviz run ... | head -c 1`: the pipe closes under the streamed text; the run ends as
    a shell reports SIGPIPE (141), with nothing on stderr. (On the tiny GGUF: the pipe is not
    the backend's, and the child starts in a second, not the seconds torch takes to import.
    It decodes 400 tokens in a tenth of a second: 4000 keep the run going seconds after the
    pipe has closed.)"""
    import subprocess
    import sys

    child = subprocess.Popen(
        [sys.executable, "-m", "specviz", "run", "--target", str(tiny_gguf_path), "--prompt",
         "x", "--no-chat", "--max-tokens", "4000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout.read(1)
    child.stdout.close()
    _, err = child.communicate(timeout=120)
    assert child.returncode == 141, err
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err


def test_threads_past_the_usable_cores_are_capped_with_one_line(monkeypatch, capsys):
    """`--threads 1000` on 2 cores was taken: 8 tokens in 54.7 s, with no word."""
    from specviz.app.cli.main import main
    from specviz.engines.machine import hardware

    monkeypatch.setattr(hardware.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    assert hardware.capped_threads(2) == (2, "") and hardware.capped_threads(None) == (None, "")
    code = main(["run", "--target", "/nowhere/m.gguf", "--prompt", "x", "--threads", "1000"])
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and lines[0] == ("specviz: --threads 1000 is more than the 2 cores this "
                                      "process may use: 2 threads are used"), lines
