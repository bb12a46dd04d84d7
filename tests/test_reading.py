"""Text the target reads: one pass per chunk gives the rows writing gives, labelled with the
target's own choices (not the text's tokens), for both kinds of heads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from specviz.app.cli.main import main
from specviz.engines.eagle.checkpoint import CONFIG_FILE, default_layers
from specviz.engines.errors import SpecvizError
from specviz.engines.training import answers as ta
from specviz.engines.training import eagle as et
from specviz.engines.training import medusa as mt
from specviz.engines.training import reading as rd

PROMPT = "def add(a, b):\n    return a + b\n\nThe quick brown fox jumps over the lazy dog. def"


def layers_of(backend) -> list[int]:
    return default_layers(int(backend.model.config.num_hidden_layers))


def test_reading_the_targets_own_answer_gives_what_writing_kept(tiny_backend):
    settings = et.EagleSettings(tokens=16, max_new=16, chat=False)
    wrote = ta.generate_answers(tiny_backend, [PROMPT], settings,
                                layers=layers_of(tiny_backend))[0]
    seq = wrote.prompt + wrote.tokens
    got = rd.read(tiny_backend, [seq], layers_of(tiny_backend))[0]
    assert got.prompt == seq[:1] and got.tokens == seq[1:]
    first = len(wrote.prompt) - 1  # the row that chose the answer's first token
    assert got.choices[first:] == wrote.tokens  # greedy: its choices are what it wrote
    assert got.choices[:first] != got.tokens[:first]  # a random model does not echo prompts
    assert torch.allclose(got.features.float(), wrote.features.float(), rtol=1e-2, atol=1e-2)
    assert torch.allclose(got.hidden[first:], wrote.hidden, rtol=1e-3, atol=1e-3)


def test_pieces_of_unequal_length_are_read_as_if_alone(tiny_backend):
    long, short = list(range(5, 45)), list(range(50, 83))
    both = rd.read(tiny_backend, [long, short], layers_of(tiny_backend), batch=2)
    alone = rd.read(tiny_backend, [long], layers_of(tiny_backend))[0]
    got = next(a for a in both if a.prompt == long[:1])
    assert got.choices == alone.choices
    assert torch.allclose(got.features.float(), alone.features.float(), atol=1e-2)


def test_both_kinds_of_heads_learn_the_targets_choices_not_the_text():
    answer = ta.Answer(torch.zeros(4, 2), [10, 11, 12, 13], [9],
                       torch.zeros(4, 6, dtype=torch.float16), [20, 21, 22, 23])
    assert mt.labels(answer, 2)[:, 0].tolist() == [21, 22, 23, ta.IGNORE]
    w = et.window(answer, 4, 1, np.random.default_rng(0))
    assert w.tokens[:4].tolist() == [10, 11, 12, 13]  # what the head reads: the text
    assert w.labels[:4].tolist() == [20, 21, 22, 23]  # what it learns: the target's choices
    written = ta.Answer(torch.zeros(4, 2), [10, 11, 12, 13], [9],
                        torch.zeros(4, 6, dtype=torch.float16))
    assert et.window(written, 4, 1, np.random.default_rng(0)).labels[:4].tolist() == [
        10, 11, 12, 13]


def test_hard_labels_from_a_draft_vocabulary_are_the_targets_choices(tiny_backend):
    """With a reduced draft vocabulary, the loss maps the target's choices, not the text."""
    torch.manual_seed(0)
    text, choices = list(range(10, 30)), list(range(40, 60))
    vocab = torch.arange(0, 128)
    head = et.new_head(tiny_backend.model, vocab)
    frozen = et.Frozen.of(tiny_backend.model)
    to_draft = et.draft_labels(head, int(tiny_backend.model.config.vocab_size))
    settings = et.EagleSettings(ttt=1, soft=False, rows=1000)
    h = int(tiny_backend.model.config.hidden_size)

    def loss(labels):
        answer = ta.Answer(torch.zeros(19, h), text[1:], text[:1],
                           torch.randn(19, 3 * h, generator=torch.Generator().manual_seed(1))
                           .half(), labels)
        batch = et.collate([et.window(answer, 19, 1, np.random.default_rng(0))])
        return et.ttt_loss(head, frozen, batch, settings, torch.Generator(), to_draft).item()

    assert loss(None) == loss(text[1:])  # a written answer: its tokens are its choices
    assert loss(choices[1:]) != loss(None)


def test_the_prompts_read_are_the_training_answers_only():
    answers = [ta.Answer(torch.zeros(2, 2), [1, 2], list(range(100 * i, 100 * i + 40)))
               for i in range(10)]
    pieces = rd.prompt_pieces(answers, 0.2, seed=3, size=32)
    train_set, held_out = ta.split(answers, 0.2, 3)
    assert sorted(p[0] for p in pieces) == sorted(a.prompt[0] for a in train_set)
    assert all(len(p) == 32 for p in pieces)  # each prompt's 8-token tail is too short to read
    assert not {p[0] for p in pieces} & {a.prompt[0] for a in held_out}


def test_choices_round_trip_through_the_cache(tiny_backend, tmp_path):
    read = rd.read(tiny_backend, [list(range(3, 40))], layers_of(tiny_backend))
    ta.save_answers(read, tmp_path / "r.safetensors")
    back = ta.load_answers(tmp_path / "r.safetensors")[0]
    assert back.choices == read[0].choices and back.tokens == read[0].tokens


def test_chunks_follow_the_budget_and_skip_what_is_not_text(tiny_backend, tmp_path):
    (tmp_path / "a.py").write_text("def f(x):\n    return x * 2\n" * 40)
    (tmp_path / "b.md").write_text("# Notes\n\nSome words about the code. " * 40)
    (tmp_path / "c.bin").write_bytes(bytes(range(256)))  # not searched: no text suffix
    (tmp_path / "d.txt").write_bytes(b"\xff\xfe\x00bad" * 100)  # not UTF-8: skipped
    files = rd.text_files([tmp_path])
    assert [f.name for f in files] == ["a.py", "b.md", "d.txt"]
    (tmp_path / "e.jsonl").write_text(json.dumps({"turns": ["Why is the sky blue? " * 20]}))
    prompts = rd.chunks(tiny_backend, [tmp_path / "e.jsonl"], 1000, 64)  # the prompt's text,
    assert "Why is the sky blue?" in tiny_backend.detokenize(prompts[0])  # not its JSON
    pieces = rd.chunks(tiny_backend, files, 160, 64)
    assert sum(map(len, pieces)) == 160 and max(map(len, pieces)) == 64
    short = rd.chunks(tiny_backend, files, 150, 64)  # a last piece under MIN_CHUNK: not read
    assert sum(map(len, short)) == 128
    assert all(len(p) >= rd.MIN_CHUNK for p in pieces)
    with pytest.raises(SpecvizError, match="not found"):
        rd.text_files([tmp_path / "missing"])


def test_train_heads_reads_text_too(capsys, tiny_model_dir, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"turns": [p]}) for p in
                                ["def add(a, b):", "The quick brown fox", "for i in range(3):"]))
    text = tmp_path / "text"
    text.mkdir()
    (text / "code.py").write_text("def double(x):\n    return x * 2\n" * 30)
    out = tmp_path / "eagle"
    args = ["train-heads", "--kind", "eagle", "--target", str(tiny_model_dir), "--corpus",
            str(corpus), "--tokens", "60", "--max-new", "20", "--heads", "2", "--steps", "3",
            "--held-out", "0.34", "--read", str(text), "--read-tokens", "200",
            "--no-read-prompts", "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "and 199 it read" in printed  # one chunk: all but its first token
    training = json.loads((out / CONFIG_FILE).read_text())["specviz"]["training"]
    assert training["read_tokens"] > 150 and training["read_chunks"] >= 1
    assert main(args) == 0
    assert "reusing the text the target read" in capsys.readouterr().err
    medusa = [a if a != "eagle" else "medusa" for a in args]
    assert main(medusa) == 0 and "it read" in capsys.readouterr().out
    assert main([*args[:-2], "--read", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    err = capsys.readouterr().err  # before the target loads or writes anything
    assert "text to read not found" in err and "reusing" not in err
