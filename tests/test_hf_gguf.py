"""A GGUF's tokenizer and config are read from the file once and kept: a second load of the
model tokenizes, ends turns and computes as the first (hf_gguf.py)."""

from __future__ import annotations

import numpy as np

from specviz.engines.backends import hf_gguf
from specviz.engines.backends.hf import TransformersBackend
from specviz.engines.models import gguf_read

TEXTS = ["Hello world", "def f(x):\n    return x  # ünïcode ✓", "  spaces\t\ttabs\n\n",
         "<|im_start|>user\nhi<|im_end|>"]


def test_a_second_load_reads_the_kept_tokenizer_and_config_and_computes_the_same(
        smollm2_path, tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    parses = []
    reader = gguf_read.reader_class()
    parse = reader._build_fields
    monkeypatch.setattr(reader, "_build_fields",
                        lambda self, *a: parses.append(1) or parse(self, *a))
    first = TransformersBackend(smollm2_path, device="cpu", dtype="float32")
    assert len(parses) == 1  # the tokenizer's, the config's and the weights' read shared
    assert "GGUF tensors" not in capfd.readouterr().err  # transformers' own bar, silenced
    kept = list((tmp_path / hf_gguf.FOLDER).iterdir())
    assert len(kept) == 1 and (kept[0] / hf_gguf.CONFIG).is_file()
    second = TransformersBackend(smollm2_path, device="cpu", dtype="float32")
    assert len(parses) == 2  # the weights' alone
    for text in TEXTS:
        for special in (True, False):
            assert first.tokenize(text, special) == second.tokenize(text, special)
    assert (first.eos_ids, first.bos_id, first.chat_template, first.n_ctx, first.n_vocab) == (
        second.eos_ids, second.bos_id, second.chat_template, second.n_ctx, second.n_vocab)
    assert [first.is_special(i) for i in range(200)] == [second.is_special(i) for i in range(200)]
    ids = first.tokenize(TEXTS[1])
    assert np.array_equal(first.forward(ids, logits="all"), second.forward(ids, logits="all"))


def test_a_damaged_kept_folder_is_read_from_the_file_again(smollm2_path, tmp_path):
    store = tmp_path / hf_gguf.FOLDER
    tok, config = hf_gguf.tokenizer_and_config(smollm2_path.parent, smollm2_path.name, store)
    (kept,) = store.iterdir()
    (kept / hf_gguf.CONFIG).write_text("{broken")
    again, config_again = hf_gguf.tokenizer_and_config(smollm2_path.parent, smollm2_path.name,
                                                       store)
    assert again(TEXTS[0]).input_ids == tok(TEXTS[0]).input_ids
    assert config_again.to_diff_dict() == config.to_diff_dict()
    assert (kept / hf_gguf.CONFIG).read_text().startswith("{\n")  # kept whole again


def test_gguf_name_maps_are_built_once_per_architecture_and_depth():
    """transformers asked gguf for the same tensor-name map for each of a model's 397 modules
    (7 ms each, a third of the load); the second load test above checks the model it makes."""
    import gguf

    hf_gguf.name_maps_once()
    hf_gguf.name_maps_once()  # twice: wrapped once
    first = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
    assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is first
    assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 3) is not first
    assert not hasattr(gguf.get_tensor_name_map.__wrapped__, "cache_info")
