"""Lookahead decoding's n-gram pool and Jacobi window, without a model."""

from __future__ import annotations

import numpy as np
import pytest

from specviz.engines.oracles.base import RunContext
from specviz.engines.oracles.lookahead import LookaheadOracle, NGramPool
from specviz.engines.sampling import SamplingParams


def run_context(prompt_ids) -> RunContext:
    return RunContext(tuple(prompt_ids), "", (), SamplingParams(), np.random.default_rng(0),
                      frozenset(), str)


def test_pool_keeps_at_most_g_per_key_most_recent_first():
    pool = NGramPool(g=2)
    assert pool.add((1, 2, 3), "a") and pool.add((1, 4, 5), "b")
    assert pool.add((1, 6, 7), "c")  # evicts the oldest under key 1
    assert [rest for rest, _ in pool.candidates(1)] == [(6, 7), (4, 5)]
    assert not pool.add((1, 4, 5), "d")  # known: refreshed, not new
    assert pool.candidates(1)[0] == ((4, 5), "d")
    pool.add((9, 9, 9), "e")
    assert len(pool) == 3 and pool.candidates(2) == []


def test_context_ngrams_seed_the_pool():
    oracle = LookaheadOracle(W=2, N=3, G=4)
    oracle.start(run_context([5, 6, 7, 5, 6, 8]))
    proposal = oracle.propose([5, 6, 7, 5, 6, 8, 5], k=4)
    # after 5 the context continued with (6, 7) and (6, 8): one shared node, two leaves
    assert proposal.tokens[:1] == [6] and sorted(proposal.tokens[1:]) == [7, 8]
    assert proposal.parents == [-1, 0, 0]


def test_window_fills_level_by_level_then_feeds_the_pool():
    W, N = 3, 4
    oracle = LookaheadOracle(W=W, N=N, G=8)
    oracle.start(run_context([1, 2, 3]))
    oracle.levels = [[10, 11, 12]]
    vocab = 64

    def step(next_level):
        side = oracle.propose([1, 2, 3], k=3).side
        assert len(side.tokens) == W * len(oracle.levels)
        logits = np.zeros((len(side.tokens), vocab), dtype=np.float32)
        top = (len(oracle.levels) - 1) * W
        logits[np.arange(top, top + W), next_level] = 1.0
        oracle.side_logits(logits)

    step([20, 21, 22])
    step([30, 31, 32])
    assert oracle.levels == [[10, 11, 12], [20, 21, 22], [30, 31, 32]]  # N - 1 levels
    before = len(oracle.pool)
    step([40, 41, 42])  # full window: each column + its new token is an n-gram
    assert oracle.levels == [[20, 21, 22], [30, 31, 32], [40, 41, 42]]
    assert len(oracle.pool) == before + W and oracle.lookahead_state().new_ngrams == W
    assert oracle.pool.candidates(11)[0] == ((21, 31, 41), "Jacobi window")
    state = oracle.lookahead_state()
    assert state.window == (("20", "21", "22"), ("30", "31", "32"), ("40", "41", "42"))


def test_window_cells_see_their_diagonal():
    oracle = LookaheadOracle(W=3, N=3, G=0)
    oracle.levels = [[1, 2, 3], [4, 5, 6]]
    side = oracle._window()
    assert side.depths == [1, 2, 3, 2, 3, 4]
    # level 1, column 2 (index 5) sees level 0 columns 0..2: depths 1, 2, 3, then itself
    assert side.visible[5] == [0, 1, 2]
    assert side.visible[3] == [0] and side.visible[2] == [0, 1]


def test_bad_knobs_are_refused():
    with pytest.raises(ValueError, match=r"N 1 is outside 2\.\.16"):
        LookaheadOracle(N=1)
    oracle = LookaheadOracle()
    oracle.set_knob("W", 7)
    assert oracle.settings.W == 7 and oracle.levels == []
