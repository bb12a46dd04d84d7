"""A suffix memory names the model and tokenizer it belongs to: another model's memory is
refused by that name whatever its token ids (an equal or larger vocabulary read it as its
own before); an older memory naming none is read where its ids fit, saying so in one line."""

from __future__ import annotations

import json

import pytest
from write_faults import files_in

from specviz.app.cli.main import main
from specviz.engines.errors import SpecvizError
from specviz.engines.oracles import memory_file
from specviz.engines.oracles.suffix_memory import SuffixMemory, owner_of

MINE = {"model": "mine.gguf", "tokenizer": "0123456789abcdef"}
OTHER = {"model": "other.gguf", "tokenizer": "fedcba9876543210"}
RUN = memory_file.line("a", [1, 2, 3])


def test_another_models_memory_is_refused_by_name_untouched(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(memory_file.owner_line(OTHER) + RUN)  # its ids fit this vocabulary
    before = files_in(tmp_path)
    with pytest.raises(SpecvizError, match=r"it is the memory of other\.gguf \(tokenizer "
                                           r"fedcba9876543210\), not of mine\.gguf"):
        SuffixMemory.open(path, vocab_size=400, owner=MINE)
    assert files_in(tmp_path) == before


def test_a_memory_that_names_no_model_is_read_where_its_ids_fit_saying_so(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(RUN)
    memory = SuffixMemory.open(path, vocab_size=400, owner=MINE)
    assert [r.tokens for r in memory.runs] == [[1, 2, 3]]
    assert "names no model" in memory.take_problem()
    with pytest.raises(SpecvizError, match="holds token 3, past this model's 3"):
        SuffixMemory.open(path, vocab_size=3, owner=MINE)


def test_a_new_memory_names_its_model_first_and_keeps_the_name_when_rewritten(tmp_path):
    path = tmp_path / "m.jsonl"
    memory = SuffixMemory.open(path, max_tokens=5, vocab_size=400, owner=MINE)
    memory.add([1, 2, 3], "a")
    memory.add([4, 5, 6], "b")  # past max_tokens: the oldest dropped, the file written anew
    lines = path.read_bytes().splitlines(keepends=True)
    assert lines == [memory_file.owner_line(MINE), memory_file.line("b", [4, 5, 6])]
    again = SuffixMemory.open(path, max_tokens=5, vocab_size=400, owner=MINE)
    assert [r.label for r in again.runs] == ["b"] and again.take_problem() is None


def test_the_command_line_refuses_a_memory_another_model_wrote(capsys, tiny_model_dir,
                                                               tmp_path):
    memory = tmp_path / "memory.jsonl"
    args = ["run", "--target", str(tiny_model_dir), "--backend", "transformers", "--no-chat",
            "--prompt", "def add(a, b):", "--max-tokens", "4", "--oracle", "suffix", "--json",
            "--suffix-memory", str(memory)]
    assert main(args) == 0
    first, *runs = memory.read_bytes().splitlines(keepends=True)
    assert json.loads(first)["memory"]["model"] == tiny_model_dir.name and len(runs) == 1
    memory.write_bytes(memory_file.owner_line(OTHER) + b"".join(runs))
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "it is the memory of other.gguf" in err[0], err


@pytest.mark.model
def test_one_model_is_one_owner_on_llama_cpp_and_transformers(smol_llama, smol_hf,
                                                              tiny_backend):
    """The cache's memory is shared by both backends of a model: they must name it alike."""
    assert owner_of(smol_llama) == owner_of(smol_hf)
    assert owner_of(tiny_backend)["tokenizer"] != owner_of(smol_hf)["tokenizer"]
