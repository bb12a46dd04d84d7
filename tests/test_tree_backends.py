"""Masked (tree) forward passes and keep-path, against brute-force forwards of each path."""

from __future__ import annotations

import numpy as np
import pytest
from model_fixtures import batches_round_alike

from specviz.engines.backends.base import tree_layout
from specviz.engines.backends.llama import seq_groups
from specviz.engines.bench.compare import batch_noise
from specviz.engines.oracles.lookahead import LookaheadOracle

PROMPT = "def add(a, b):\n    return"
# Node i follows PARENTS[i] (-1: the cache). Node 0 plays the pending token.
PARENTS = [-1, 0, 0, 1, 1, 2, 3, 0]


def tree_tokens(backend) -> list[int]:
    ids = backend.tokenize("return a + b fox the lazy dog", add_special=False)
    return ids[:len(PARENTS)]


def brute_force_rows(backend, context, tokens, depths, visible) -> np.ndarray:
    """Each node's logits from a plain forward of the context and the nodes it sees."""
    rows = []
    for i in range(len(tokens)):
        backend.truncate(len(context))
        seen = sorted([*visible[i], i], key=lambda j: depths[j])
        rows.append(backend.forward([tokens[j] for j in seen], "all")[-1])
    return np.stack(rows)


def check_tree_logits(backend, atol: float) -> None:
    context = backend.tokenize(PROMPT)
    tokens = tree_tokens(backend)
    backend.reset()
    backend.forward(context)
    got = backend.forward_tree(tokens, PARENTS)
    assert backend.n_past == len(context)  # nodes are not part of the context until kept
    want = brute_force_rows(backend, context, tokens, *tree_layout(PARENTS))
    np.testing.assert_allclose(got, want, rtol=0, atol=atol)
    top_two = np.sort(want, axis=1)[:, -2:]
    clear = top_two[:, 1] - top_two[:, 0] > 2 * atol  # a near-tie within the noise may flip
    assert (got.argmax(1) == want.argmax(1))[clear].all()


def check_keep_path(backend, path: list[int], atol: float) -> None:
    """After keep_path the cache continues exactly like a fresh forward of that context."""
    context = backend.tokenize(PROMPT)
    tokens = tree_tokens(backend)
    backend.reset()
    backend.forward(context)
    backend.forward_tree(tokens, PARENTS)
    backend.keep_path(path)
    kept = [tokens[i] for i in path]
    assert backend.tokens == context + kept
    probe = backend.tokenize(" x = 1", add_special=False)
    got = backend.forward(probe, "all")
    backend.reset()
    backend.forward(context + kept)
    want = backend.forward(probe, "all")
    np.testing.assert_allclose(got, want, rtol=0, atol=atol)


def check_lookahead_window(backend, atol: float) -> None:
    """Lookahead's non-tree mask: every window cell sees its diagonal and nothing else."""
    oracle = LookaheadOracle(W=3, N=4, G=0)
    oracle.levels = [[11, 12, 13], [14, 15, 16], [17, 18, 19]]
    side = oracle._window()
    context = backend.tokenize(PROMPT)
    tokens = [context[-1], *side.tokens]
    depths = [0, *side.depths]
    visible = [[], *([0, *(1 + j for j in v)] for v in side.visible)]
    backend.reset()
    backend.forward(context[:-1])
    got = backend.forward_masked(tokens, depths, visible)
    backend.discard_nodes()
    want = brute_force_rows(backend, context[:-1], tokens, depths, visible)
    np.testing.assert_allclose(got, want, rtol=0, atol=atol)


# ------------------------------------------------------------------ tiny transformers model


def row_tolerance(backend, exact: float) -> float:
    """`exact` where a batch's rows round as their path's own batch does (float32 on a CPU);
    else the batch noise measured on this very context, with room (half precision, where a
    CPU's kernels change with the rows' count; llama.cpp on a GPU). A wrong mask moves rows
    by far more (below)."""
    if batches_round_alike(backend):
        return exact
    return 1.5 * batch_noise(backend, backend.tokenize(PROMPT) + tree_tokens(backend))


def test_tiny_tree_logits_equal_each_path_alone(tiny_backend):
    check_tree_logits(tiny_backend, atol=row_tolerance(tiny_backend, 1e-4))


@pytest.mark.parametrize("path", [[0, 1, 3, 6], [0, 2, 5], [0, 7], [0], []])
def test_tiny_keep_path_leaves_the_accepted_context(tiny_backend, path):
    check_keep_path(tiny_backend, path, atol=row_tolerance(tiny_backend, 1e-4))


def test_tiny_lookahead_window_mask(tiny_backend):
    check_lookahead_window(tiny_backend, atol=row_tolerance(tiny_backend, 1e-4))


def test_a_tree_must_be_kept_as_a_chain(tiny_backend):
    tiny_backend.reset()
    tiny_backend.forward(tiny_backend.tokenize(PROMPT))
    tiny_backend.forward_tree(tree_tokens(tiny_backend), PARENTS)
    with pytest.raises(ValueError, match="chain"):
        tiny_backend.keep_path([0, 2, 3])
    tiny_backend.truncate(2)  # drops the nodes too
    assert tiny_backend.n_past == 2
    with pytest.raises(ValueError, match="forward_masked"):
        tiny_backend.keep_path([0])


# ------------------------------------------------------------------ llama.cpp sequence groups


def visible_by_llama_rule(depths, query, members) -> list[set[int]]:
    """What llama.cpp lets each node see: cells holding its query seq, not after it."""
    return [{j for j in range(len(depths)) if j in members[query[i]] and depths[j] <= depths[i]}
            for i in range(len(depths))]


@pytest.mark.parametrize("layout", ["tree", "lookahead"])
def test_sequence_groups_reproduce_the_mask(layout):
    if layout == "tree":
        depths, visible = tree_layout(PARENTS)
    else:
        oracle = LookaheadOracle(W=4, N=4, G=0)
        oracle.levels = [[1] * 4, [2] * 4, [3] * 4]
        side = oracle._window()
        depths, visible = side.depths, side.visible
    query, members = seq_groups(depths, visible)
    want = [set(v) | {i} for i, v in enumerate(visible)]
    assert visible_by_llama_rule(depths, query, members) == want
    leaves = sum(1 for i in range(len(PARENTS)) if i not in PARENTS)
    assert len(members) == (leaves if layout == "tree" else 4)  # a group per leaf / column


# ------------------------------------------------------------------ smollm2-135m


@pytest.mark.model
def test_smollm2_hf_tree(smol_hf):
    check_tree_logits(smol_hf, atol=1e-3)
    check_keep_path(smol_hf, [0, 2, 5], atol=1e-3)
    check_lookahead_window(smol_hf, atol=1e-3)


def llama_tolerance(backend) -> float:
    """0 on the CPU, where llama.cpp's batches round alike; on a GPU the measured noise. A
    wrong mask moves most rows 10-20 logits and the rest 3-6 (measured on the CPU: each node
    also seeing the node before it, or missing its parent); the H200's noise was 1.5-3.0."""
    return row_tolerance(backend, 0.0)


@pytest.mark.model
def test_smollm2_llama_tree_is_exact(smol_llama):
    """llama.cpp: a node's logits equal its path's own batched forward bit for bit, and a
    kept path (in place, or run again when it is not the batch's first chain) leaves the
    cache as a plain forward would. Both measured exact on the CPU with this model and build;
    on a GPU, within the batch noise."""
    atol = llama_tolerance(smol_llama)
    check_tree_logits(smol_llama, atol=atol)
    for path in ([0, 1], [0, 1, 3, 6], [0, 2, 5], [0, 7], [0]):
        check_keep_path(smol_llama, path, atol=atol)
    check_lookahead_window(smol_llama, atol=atol)
