"""Backends: determinism, rollback, UTF-8-safe streaming, chat templates, errors."""

from __future__ import annotations

import numpy as np
import pytest

from specviz.engines.backends import load_backend
from specviz.engines.errors import BackendError, ContextOverflow
from specviz.engines.loop.detokenize import TextStream
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.oracles.none import NoOracle

MULTIBYTE = "El niño comió piñas 🚀 数据 模型 crème brûlée ✨"


def greedy_text(backend, prompt="The quick brown fox", n=24) -> str:
    return Session(backend, NoOracle(), RunSettings(prompt, chat=False, k=0, max_tokens=n)
                   ).run_to_end().text


def check_rollback(backend, tol: float) -> None:
    ids = backend.tokenize("def add(a, b):\n    return a + b", add_special=True)
    backend.reset()
    backend.forward(ids[:-3])
    reference = backend.forward(ids[-3:], "all")
    backend.forward(backend.tokenize(" something else entirely", False), "all")
    backend.truncate(len(ids) - 3)
    assert backend.n_past == len(ids) - 3
    again = backend.forward(ids[-3:], "all")
    np.testing.assert_allclose(again, reference, rtol=0, atol=tol)


def check_streaming(backend) -> None:
    ids = backend.tokenize(MULTIBYTE, add_special=False)
    pieces_alone = [backend.token_bytes(t) for t in ids]
    assert any(_invalid_utf8(p) for p in pieces_alone), "test text must split a character"
    stream = TextStream(backend.token_bytes, backend.is_special)
    pieces = [stream.push(t) for t in ids]
    assert "".join(pieces) + stream.flush() == MULTIBYTE
    assert all("\ufffd" not in p for p in pieces)


def _invalid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


# ------------------------------------------------------------------ tiny transformers model


def test_tiny_greedy_is_repeatable(tiny_backend):
    assert greedy_text(tiny_backend) == greedy_text(tiny_backend)


def test_tiny_rollback_gives_same_logits(tiny_backend):
    check_rollback(tiny_backend, tol=1e-4)


def test_tiny_streaming_never_splits_a_character(tiny_backend):
    check_streaming(tiny_backend)


def test_cache_keyword_follows_the_models_signature():
    from specviz.engines.backends.hf_cache import cache_keyword

    class Renamed:
        def forward(self, input_ids=None, cache=None, use_cache=None): ...

    class Older:
        def forward(self, input_ids=None, past_key_values=None, use_cache=None): ...

    assert cache_keyword(Renamed()) == "cache"
    assert cache_keyword(Older()) == "past_key_values"


def test_tiny_forwards_use_the_cache_name_the_model_takes(tiny_backend):
    """No deprecation warning per run (transformers renamed `past_key_values` to `cache`)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        greedy_text(tiny_backend, n=4)
        with tiny_backend.first_layers(1) as step:
            step(tiny_backend.tokenize(" jumps", add_special=False))
    assert not [w for w in caught if "past_key_values" in str(w.message)]


def test_tiny_logit_rows(tiny_backend):
    tiny_backend.reset()
    ids = tiny_backend.tokenize("hello there", add_special=False)
    assert tiny_backend.forward(ids, "all").shape == (len(ids), tiny_backend.n_vocab)
    assert tiny_backend.forward([ids[0]], "last").shape == (1, tiny_backend.n_vocab)


def test_tiny_chat_template_wraps_the_prompt(tiny_backend):
    text = tiny_backend.format_prompt("hi", chat=True)
    assert text.startswith("<|im_start|>user\nhi<|im_end|>") and text.endswith("assistant\n")
    assert tiny_backend.format_prompt("hi", chat=False) == "hi"


def test_prompt_longer_than_context_names_both_lengths(tiny_backend):
    long_prompt = "fox " * 2000
    with pytest.raises(ContextOverflow) as err:
        Session(tiny_backend, NoOracle(), RunSettings(long_prompt, chat=False))
    n_prompt = len(tiny_backend.tokenize(long_prompt))
    assert str(n_prompt) in str(err.value) and str(tiny_backend.n_ctx) in str(err.value)


def test_unavailable_device_lists_the_available_ones(tiny_model_dir):
    from specviz.engines.backends.hf_setup import available_devices

    absent = next(d for d in ("cuda", "mps") if d not in available_devices())
    with pytest.raises(BackendError, match=rf"{absent}.*available: .*cpu"):
        load_backend("transformers", tiny_model_dir, device=absent)


def test_model_folder_without_config_is_refused(tmp_path):
    with pytest.raises(BackendError, match=r"no config\.json"):
        load_backend("transformers", tmp_path)


def test_corrupt_gguf_is_refused_by_both_backends(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    for kind in ("llama", "transformers"):
        with pytest.raises(BackendError):
            load_backend(kind, bad)


# ------------------------------------------------------------------ smollm2-135m, both backends


@pytest.mark.model
@pytest.mark.parametrize("name", ["smol_llama", "smol_hf"])
def test_smollm2_greedy_is_repeatable_and_real(name, request):
    backend = request.getfixturevalue(name)
    first = greedy_text(backend, "The capital of France is", 12)
    assert first == greedy_text(backend, "The capital of France is", 12)
    assert "Paris" in first


@pytest.mark.model
def test_smollm2_llama_rollback(smol_llama):
    check_rollback(smol_llama, tol=1e-3)


@pytest.mark.model
def test_smollm2_hf_rollback(smol_hf):
    check_rollback(smol_hf, tol=1e-3)


@pytest.mark.model
@pytest.mark.parametrize("name", ["smol_llama", "smol_hf"])
def test_smollm2_streaming(name, request):
    check_streaming(request.getfixturevalue(name))


@pytest.mark.model
def test_smollm2_backends_agree_on_tokens_and_template(smol_llama, smol_hf):
    assert smol_llama.tokenize(MULTIBYTE, False) == smol_hf.tokenize(MULTIBYTE, False)
    assert smol_llama.chat_template and smol_hf.chat_template
    assert smol_llama.format_prompt("hi", True) == smol_hf.format_prompt("hi", True)
    assert smol_llama.eos_ids & smol_hf.eos_ids


@pytest.mark.model
@pytest.mark.parametrize("name", ["smol_llama", "smol_hf"])
def test_prompt_token_offsets_index_the_rendered_prompt(name, request):
    from specviz.engines.loop.session import _token_chars

    backend = request.getfixturevalue(name)
    text = backend.format_prompt("Summarise: the team met on Monday.", chat=True)
    ids = backend.encode_prompt(text, chat=True)
    chars = _token_chars(backend, ids)
    assert "".join(text[a:b] for a, b in chars) == text
    team = next(i for i, t in enumerate(ids) if backend.token_bytes(t) == b" team")
    assert text[slice(*chars[team])] == " team"
