"""Bad input on a first try: every command that reads a file, given a file that is missing,
empty, not text, truncated, random bytes or far too long, ends with exit 2 and one line from
specviz on stderr, and writes nothing it was not asked for.

A truncated text file is still text (a shorter prompt is a prompt), so truncation is tried
where a format can tell: traces, GGUF models, JSON Lines. "Far too long" is tried where a
length is an error (a prompt longer than the model's context); a long corpus is only a long
corpus.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from specviz.app.cli.main import main

TEXT = ("def add(a, b):\n    return a + b\n\n" * 40).encode()
QUESTIONS = b"".join(json.dumps({"question_id": n, "category": "coding",
                                 "turns": ["def add(a, b):"]}).encode() + b"\n"
                     for n in range(3))
TOO_LONG = ("word " * 20_000).encode()  # far past the tiny model's 512-token context


def contents(kind: str, valid: bytes) -> bytes | None:
    return {
        "missing": None,
        "empty": b"",
        "not-text": b"\xff\xfe\x00\x81" * 64 + valid[:100],
        "truncated": valid[: len(valid) // 2 - 7],
        "random": random.Random(0).randbytes(4096),
        "too-long": TOO_LONG if valid is not QUESTIONS else json.dumps(
            {"question_id": 1, "category": "coding", "turns": [TOO_LONG.decode()]}).encode()
        + b"\n",
    }[kind]


BASIC = ("missing", "empty", "not-text", "random")


def tiny_run(model: Path) -> list[str]:
    return ["--target", str(model), "--backend", "transformers", "--max-tokens", "4", "--k", "2"]


KINDS = {
    "run --prompt-file": (*BASIC, "too-long"),
    "run --ngram-corpus": BASIC,
    "run --target F.gguf": (*BASIC, "truncated"),
    "replay --print": BASIC,
    "shot OUT --replay": (*BASIC, "truncated"),
    "shot --replay F OUT": (*BASIC, "truncated"),
    "bench --questions": (*BASIC, "truncated", "too-long"),
    "pair --prompts": (*BASIC, "too-long"),
    "train-heads --corpus": BASIC,
    "train-heads --read": BASIC,
}


def commands(tiny: Path, trace: bytes, gguf: bytes, out: Path):
    """command -> (what a valid file of its kind holds, its argv given the file's path)"""
    run = ["run", *tiny_run(tiny), "--no-chat"]
    heads = ["train-heads", "--target", str(tiny), "--tokens", "40", "--steps", "2",
             "--out", str(out / "heads")]
    return {
        "run --prompt-file": (TEXT, lambda f: [*run, "--prompt-file", f]),
        "run --ngram-corpus": (TEXT, lambda f: [*run, "--prompt", "x", "--oracle", "ngram",
                                                "--ngram-corpus", f]),
        "run --target F.gguf": (gguf, lambda f: ["run", "--target", f, "--prompt", "hi",
                                                 "--k", "2", "--max-tokens", "2"]),
        "replay --print": (trace, lambda f: ["replay", "--print", f]),
        "shot OUT --replay": (trace, lambda f: ["shot", str(out / "a.png"), "--replay", f]),
        "shot --replay F OUT": (trace, lambda f: ["shot", "--replay", f, str(out / "b.png")]),
        "bench --questions": (QUESTIONS, lambda f: ["bench", *tiny_run(tiny), "--oracles",
                                                    "prompt-lookup", "--questions", f]),
        "pair --prompts": (TEXT, lambda f: ["pair", "--target", str(tiny), "--draft",
                                            str(tiny), "--backend", "transformers",
                                            "--prompts", f]),
        "train-heads --corpus": (TEXT, lambda f: [*heads, "--corpus", f]),
        "train-heads --read": (TEXT, lambda f: [*heads, "--read", f]),
    }


@pytest.fixture(scope="module")
def valid_files(tmp_path_factory, tiny_model_dir) -> tuple[bytes, bytes]:
    from tiny_gguf import write_tiny_gguf

    folder = tmp_path_factory.mktemp("valid")
    trace = folder / "run.jsonl"
    assert main(["run", *tiny_run(tiny_model_dir), "--no-chat", "--prompt", "def add(",
                 "--trace", str(trace)]) == 0
    gguf = write_tiny_gguf(folder / "tiny.gguf")
    return trace.read_bytes(), gguf.read_bytes()


@pytest.mark.parametrize(("command", "kind"),
                         [(command, kind) for command, kinds in KINDS.items() for kind in kinds])
def test_a_bad_file_is_one_line_and_exit_2(command, kind, tmp_path, tiny_model_dir,
                                           valid_files, capsys):
    out = tmp_path / "out"
    out.mkdir()
    valid, argv = commands(tiny_model_dir, *valid_files, out)[command]
    suffix = {TEXT: ".txt", QUESTIONS: ".jsonl", valid_files[0]: ".jsonl"}.get(valid, ".gguf")
    path = tmp_path / f"input{suffix}"
    data = contents(kind, valid)
    if data is not None:
        path.write_bytes(data)
    capsys.readouterr()
    code = main(argv(str(path)))
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("specviz: "), err
    written = sorted(p.name for p in out.iterdir())
    if kind == "truncated" and command.startswith("shot"):
        assert written == [Path(err[0].split("saved ")[1].split()[0]).name]  # what was asked:
        assert "with the steps before it" in err[0]  # the steps before the cut, and said so
    else:
        assert written == [], written
