"""The target's layer features kept for every cached position: what EAGLE heads read. They
must equal a fresh forward's hidden states through any forward, rollback and tree keep."""

from __future__ import annotations

import pytest
import torch


def reference(backend, tokens, layers):
    """What enters each layer over `tokens`, in one fresh pass without a cache
    (`hidden_states[i]` is the input of layer i)."""
    with torch.inference_mode():
        out = backend.model(input_ids=torch.tensor([tokens]), use_cache=False,
                            output_hidden_states=True)
    return torch.cat([out.hidden_states[i][0] for i in layers], dim=-1)


@pytest.fixture
def featured(tiny_model_dir):
    from specviz.engines.backends.hf import TransformersBackend

    backend = TransformersBackend(tiny_model_dir, device="cpu")
    backend.keep_features([1, 0, 1])
    yield backend
    backend.close()


def test_features_follow_forwards_rollbacks_and_kept_tree_paths(featured):
    tokens = featured.tokenize("def add(a, b):\n    return a + b\n", add_special=False)
    layers = [1, 0, 1]
    featured.forward(tokens[:10])
    featured.forward(tokens[10:14], "all")
    assert torch.allclose(featured.features(0, 14), reference(featured, tokens[:14], layers),
                          rtol=1e-3, atol=1e-3)
    featured.truncate(12)
    assert featured.features(0, 13) is None  # position 12 is no longer held
    # A tree after position 12: node 0 (= tokens[12]) with two children; keep 0 -> 2.
    featured.forward_tree([tokens[12], 7, tokens[13]], [-1, 0, 0])
    featured.keep_path([0, 2])
    assert featured.n_past == 14
    assert torch.allclose(featured.features(0, 14), reference(featured, tokens[:14], layers),
                          rtol=1e-3, atol=1e-3)
    featured.reset()
    assert featured.features(0, 1) is None


def test_features_cost_nothing_unless_asked(tiny_backend):
    tiny_backend.reset()
    tiny_backend.forward(tiny_backend.tokenize("hello there", add_special=False))
    assert tiny_backend.features(0, 1) is None
    tiny_backend.reset()


def test_a_layer_the_model_lacks_is_refused(tiny_backend):
    with pytest.raises(ValueError, match="layer 5 does not exist"):
        tiny_backend.keep_features([0, 5])
    tiny_backend.keep_features(None)


def test_kept_rows_equal_a_plain_list_of_them_through_growth_rollbacks_and_trees():
    """The buffer that doubles when full holds what appending each forward's rows to a list
    and cutting it would, over a long run of random forwards, rollbacks, tree keeps and gaps."""
    import random

    from specviz.engines.backends.hf_features import LayerFeatures

    rng = random.Random(3)
    most = 0
    kept, rows = LayerFeatures(), []  # rows: the plain list's, None where nothing is held
    for _ in range(600):
        op = rng.random()
        held = len(rows or [])
        if op < 0.75:  # a forward right after what is held (now and then from 0, or a gap)
            start = rng.choice([held] * 40 + [0, held + 1])
            new = torch.randn(rng.randint(1, 9), 5)
            kept.put(new, start)
            rows = None if start > held else [*(rows or [])[:start], *new]
        elif op < 0.9:  # a rollback of a few rows (now and then of all)
            n = rng.choice([held - rng.randint(0, 6)] * 8 + [-1, 0, held + 2])
            kept.cut(n)
            rows = (rows or [])[:max(n, 0)] or None
        else:
            n_past = rng.randint(max(0, held - 6), held)
            path = sorted(rng.sample(range(held - n_past), rng.randint(0, held - n_past)))
            kept.select(n_past, path)
            rows = [*(rows or [])[:n_past], *[rows[n_past + i] for i in path]] or None
        assert len(kept) == len(rows or [])
        most = max(most, len(kept))
        if rows:
            assert torch.equal(kept.rows(0, len(rows)), torch.stack(rows))
            assert kept.rows(0, len(rows) + 1) is None
        else:
            assert kept.rows(0, 1) is None
    assert most > 150  # the buffer grew past its first size (64) more than once
