"""llama.cpp's batches padded to fixed widths (engines/backends/llama_widths.py, opt-in): the
setting, and on this CPU the same logits, cache and greedy output as unpadded batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specviz.engines.backends import llama_widths as lw


def test_padding_is_off_unless_asked_for():
    assert lw.widths_for({}) == lw.widths_for({lw.ENV: "off"}) == ()
    assert lw.widths_for({lw.ENV: "on"}) == lw.WIDTHS
    assert lw.widths_for({lw.ENV: "16, 4"}) == (4, 16)
    for bad in ("sixteen", "1,8", ","):
        with pytest.raises(ValueError, match=lw.ENV):
            lw.widths_for({lw.ENV: bad})


def test_a_batch_runs_at_the_smallest_width_that_holds_it_where_it_fits():
    widths = (8, 16, 33)
    assert [lw.padded_width(n, widths, room=100) for n in (1, 2, 8, 9, 33, 34)] == \
        [0, 8, 8, 16, 33, 0]
    assert lw.padded_width(5, widths, room=7) == 0  # the context's end: as it is
    assert lw.padded_width(5, (), room=100) == 0


def test_a_padded_profile_is_stored_apart_from_an_unpadded_one():
    from specviz.engines.cost.profile import profile_path

    plain = profile_path("m", "llama", "cuda", 4)
    padded = profile_path("m", "llama", "cuda", 4, variant=lw.variant(lw.WIDTHS))
    assert plain != padded and padded.name.endswith("--pad8-16-33.json")
    assert lw.profile_variant("llama", {lw.ENV: "on"}) == "pad8-16-33"
    assert lw.profile_variant("llama", {}) == ""
    assert lw.profile_variant("transformers", {lw.ENV: "on"}) == ""


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    from tiny_gguf import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-q4_0.gguf")


def backends(tiny_gguf, monkeypatch):
    from specviz.engines.backends.llama import LlamaBackend

    monkeypatch.setenv(lw.ENV, "off")
    plain = LlamaBackend(tiny_gguf, n_ctx=256, threads=1)
    monkeypatch.setenv(lw.ENV, "on")
    padded = LlamaBackend(tiny_gguf, n_ctx=256, threads=1)
    assert (plain.pad_widths, padded.pad_widths) == ((), lw.WIDTHS)
    return plain, padded


def test_padded_batches_give_the_logits_and_cache_of_unpadded_ones(tiny_gguf, monkeypatch):
    """A draft's rows, what follows a rollback, and a one-token step after it: the pad's
    cells are gone (the cache holds what the unpadded one holds) and no real row saw them.
    Widths round differently in llama.cpp's kernels, so rows agree to its batch noise."""
    plain, padded = backends(tiny_gguf, monkeypatch)
    rng = np.random.default_rng(1)
    prompt = [1, *rng.integers(3, 250, 40).tolist()]
    for backend in (plain, padded):
        backend.forward(prompt)
    for draft in (3, 7, 12, 1, 5):
        tokens = rng.integers(3, 250, draft).tolist()
        got = [b.forward(tokens, "all") for b in (plain, padded)]
        assert got[1].shape == got[0].shape == (draft, plain.n_vocab)
        np.testing.assert_allclose(got[1], got[0], atol=2e-2 * np.abs(got[0]).max())
        assert (got[1].argmax(1) == got[0].argmax(1)).all()
        keep = plain.n_past - draft + rng.integers(0, draft + 1)
        for b in (plain, padded):
            b.truncate(keep)
    assert padded.n_past == plain.n_past
    lib = padded._lib
    assert lib.llama_memory_seq_pos_max(padded._mem, 0) == padded.n_past - 1  # no pad cells
    one = [b.forward([7]) for b in (plain, padded)]
    np.testing.assert_allclose(one[1], one[0], atol=2e-2 * np.abs(one[0]).max())


def test_greedy_decoding_padded_is_greedy_decoding(tiny_gguf, monkeypatch):
    from specviz.engines.loop.session import RunSettings, Session
    from specviz.engines.oracles.prompt_lookup import PromptLookupOracle

    plain, padded = backends(tiny_gguf, monkeypatch)
    prompt = "def x ( y ): return x + y def x ( y ): return"
    texts = []
    for backend in (plain, padded):
        session = Session(backend, PromptLookupOracle(),
                          RunSettings(prompt, chat=False, k=6, max_tokens=40))
        texts.append(session.run_to_end().text)
    assert texts[0] == texts[1]
