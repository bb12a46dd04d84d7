"""The command line: `specviz run`, `replay --print`, and the errors a user will hit."""

from __future__ import annotations

import json

import pytest

from specviz.app.cli.main import main

PROMPT = "def add(a, b):\n    return a + b\n\ndef add("


def run_cli(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exc:  # the option parser's own refusal: one line, exit 2
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def tiny_args(model_dir, *extra):
    return ["run", "--target", str(model_dir), "--backend", "transformers", "--no-chat",
            "--prompt", PROMPT, "--max-tokens", "24", "--k", "4", *extra]  # a later --k wins


def test_run_json_reports_the_speculative_figures(capsys, tiny_model_dir):
    code, out, _ = run_cli(capsys, *tiny_args(tiny_model_dir, "--json", "--oracle",
                                              "prompt-lookup", "--k", "3", "--baseline"))
    assert code == 0
    result = json.loads(out)
    for key in ("text", "tokens", "wall_s", "tok_per_s", "target", "backend", "device",
                "oracle", "k", "steps", "proposed", "accepted", "acceptance_rate",
                "mean_accepted_tokens", "baseline_tok_per_s", "speedup"):
        assert key in result, key
    assert result["tokens"] == 24 and result["backend"] == "transformers"
    assert result["identical_to_baseline"] is True
    assert result["mean_accepted_tokens"] == pytest.approx(result["tokens"] / result["steps"])
    declined = sum(result["declined"].values())
    assert result["decline_rate"] == pytest.approx(declined / result["steps"], abs=1e-4)


def test_run_streams_text_then_a_summary_line(capsys, tiny_model_dir):
    code, out, err = run_cli(capsys, *tiny_args(tiny_model_dir))
    _, json_out, _ = run_cli(capsys, *tiny_args(tiny_model_dir, "--json"))
    assert code == 0
    assert out.rstrip("\n") == json.loads(json_out)["text"].rstrip("\n")
    assert "24 tokens in" in err and "tokens/s" in err


def test_trace_then_replay_prints_the_same_text(capsys, tiny_model_dir, tmp_path):
    trace = tmp_path / "t.jsonl"
    _, out, _ = run_cli(capsys, *tiny_args(tiny_model_dir, "--oracle", "ngram", "--trace",
                                           str(trace)))
    code, replayed, err = run_cli(capsys, "replay", "--print", str(trace))
    assert code == 0 and replayed == out and "ngram" in err


def test_replay_of_a_damaged_trace_shows_what_it_can(capsys, tiny_model_dir, tmp_path):
    trace = tmp_path / "t.jsonl"
    run_cli(capsys, *tiny_args(tiny_model_dir, "--trace", str(trace)))
    trace.write_bytes(trace.read_bytes()[:-30])
    code, out, err = run_cli(capsys, "replay", "--print", str(trace))
    assert code == 2 and out.strip() and "truncated" in err


@pytest.mark.parametrize("argv, message", [
    (["run", "--target", "no-such-model", "--prompt", "x"], "known models: smollm2-135m"),
    (["run", "--target", "/nowhere/m.gguf", "--prompt", "x"], "/nowhere/m.gguf"),
    (["run", "--prompt-file", "/nowhere/p.txt"], "cannot read prompt file"),
    (["run", "--oracle", "draft", "--prompt", "x", "--target", "{tiny}", "--backend",
      "transformers"], "needs --draft"),
    (["run", "--target", "{tiny}", "--backend", "transformers", "--device", "cuda",
      "--prompt", "x"], "not available here; available: cpu"),
    (["run", "--target", "{tiny}", "--backend", "transformers", "--prompt", "fox " * 3000],
     "context holds 512"),
    (["run", "--target", "{tiny}", "--backend", "transformers", "--prompt", "x",
      "--top-p", "0"], "top-p"),
])
def test_errors_are_one_clear_line(capsys, tiny_model_dir, argv, message):
    argv = [a.replace("{tiny}", str(tiny_model_dir)) for a in argv]
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specviz: ") and message in lines[0], err


def test_corrupt_model_file_is_one_clear_line(capsys, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model at all")
    code, _, err = run_cli(capsys, "run", "--target", str(bad), "--prompt", "x")
    assert code == 2 and "is not a GGUF model file" in err and len(err.strip().splitlines()) == 1


def test_k_out_of_range_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--k", "99", "--prompt", "x"])
    assert exit_.value.code == 2 and "between 0 and 32" in capsys.readouterr().err


@pytest.mark.model
@pytest.mark.parametrize("backend", ["llama", "transformers"])
def test_run_decodes_real_text_through_both_backends(capsys, smollm2_path, backend):
    code, out, _ = run_cli(capsys, "run", "--target", "smollm2-135m", "--backend", backend,
                           "--prompt", "What is the capital of France? Answer in one word.",
                           "--max-tokens", "16", "--json")
    result = json.loads(out)
    assert code == 0 and "Paris" in result["text"] and result["backend"] == backend


@pytest.mark.parametrize("oracle", [["--oracle", "lookahead", "--window", "3", "--ngram-size",
                                     "3", "--guesses", "2"],
                                    ["--oracle", "tree", "--split", "0.1", "--budget", "6"]])
def test_run_tree_oracles_with_their_knobs(capsys, tiny_model_dir, oracle):
    extra = ["--draft", str(tiny_model_dir)] if "tree" in oracle else []
    code, out, _ = run_cli(capsys, *tiny_args(tiny_model_dir, "--json", "--baseline", "--k", "3",
                                              *oracle, *extra))
    assert code == 0
    result = json.loads(out)
    assert result["identical_to_baseline"] is True and result["oracle"] == oracle[1]


def test_tree_oracle_without_a_draft_is_refused(capsys, tiny_model_dir):
    code, _, err = run_cli(capsys, *tiny_args(tiny_model_dir, "--oracle", "tree"))
    assert code == 2 and "--draft" in err


def test_no_option_is_taken_for_a_prefix_of_another(capsys):
    from specviz.app.cli.main import build_parser

    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--prompt-f", "p.txt"])  # once read as --prompt-file
    shot = parser.parse_args(["shot", "o.png", "--prompt", "some text"])
    assert (shot.prompt, shot.prompt_file) == ("some text", None)
    capsys.readouterr()
