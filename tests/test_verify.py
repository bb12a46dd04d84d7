"""Verification: greedy prefix rule, and rejection sampling that preserves p exactly."""

from __future__ import annotations

import numpy as np
import pytest
from logit_rows import GREEDY, SAMPLED, logits_for
from scipy.stats import chisquare

from specviz.engines import events as ev
from specviz.engines.loop.verify import verify
from specviz.engines.sampling import RowStats, SamplingParams, distribution, margin, prob_of, sample


def test_greedy_accepts_the_matching_prefix_and_corrects():
    v = verify([1, 2, 3], None, logits_for(1, 2, 4, 0), GREEDY, np.random.default_rng(0))
    assert v.n_accepted == 2 and v.token == 4 and v.kind == ev.TARGET_CORRECTION
    assert [j.reason for j in v.judgements] == [None, None, ev.REJECT_MISMATCH]


def test_greedy_full_acceptance_adds_the_bonus_token():
    v = verify([1, 2], None, logits_for(1, 2, 5), GREEDY, np.random.default_rng(0))
    assert v.n_accepted == 2 and v.token == 5 and v.kind == ev.TARGET_BONUS


def test_greedy_tokens_after_a_rejection_are_never_judged():
    v = verify([3, 2], None, logits_for(1, 2, 5), GREEDY, np.random.default_rng(0))
    assert v.n_accepted == 0 and v.token == 1
    assert [j.reason for j in v.judgements] == [ev.REJECT_MISMATCH, ev.REJECT_AFTER]


def test_plain_step():
    v = verify([], None, logits_for(3), GREEDY, np.random.default_rng(0))
    assert v.token == 3 and v.kind == ev.TARGET_PLAIN and v.margin == pytest.approx(5.0)


# ------------------------------------------------------------------ lossless sampling

P = np.array([0.05, 0.30, 0.10, 0.25, 0.20, 0.10])
Q = np.array([0.40, 0.05, 0.20, 0.05, 0.10, 0.20])
N = 20_000


def first_token_draws(q: np.ndarray | None, wrong: bool = False) -> np.ndarray:
    """The first emitted token of many one-token speculative steps with fixed p and q."""
    rng = np.random.default_rng(1234)
    logits = np.log(np.stack([P, P])).astype(np.float32)  # row 0 scores the draft, row 1 bonus
    counts = np.zeros(len(P))
    for _ in range(N):
        d = sample(q, rng) if q is not None else int(rng.integers(len(P)))
        if wrong:  # a broken scheme: every proposal accepted
            counts[d] += 1
            continue
        v = verify([d], None if q is None else [q], logits, SAMPLED, rng)
        counts[d if v.n_accepted else v.token] += 1
    return counts


def test_rejection_sampling_preserves_the_target_distribution():
    counts = first_token_draws(Q)
    assert chisquare(counts, P * N).pvalue > 0.01


def test_point_mass_proposals_preserve_the_target_distribution():
    counts = first_token_draws(None)  # prompt lookup, n-grams: no q, uniform guesses here
    assert chisquare(counts, P * N).pvalue > 0.01


def test_the_same_test_catches_a_wrong_scheme():
    counts = first_token_draws(Q, wrong=True)
    assert chisquare(counts, P * N).pvalue < 1e-6


def test_sampled_judgement_records_probability_and_draw():
    logits = np.log(np.stack([P, P])).astype(np.float32)
    v = verify([0], [Q], logits, SAMPLED, np.random.default_rng(7))
    j = v.judgements[0]
    assert j.accept_prob == pytest.approx(min(1.0, P[0] / Q[0]), rel=1e-4)
    assert 0.0 <= j.draw < 1.0 and j.accepted == (j.draw < j.accept_prob)


def test_top_p_keeps_the_smallest_set_with_enough_mass():
    p = distribution(np.log(P).astype(np.float32), SamplingParams(1.0, top_p=0.5))
    assert set(np.flatnonzero(p)) == {1, 3}
    assert p.sum() == pytest.approx(1.0)


def test_bad_sampling_settings_are_refused():
    with pytest.raises(ValueError, match="top-p"):
        SamplingParams(1.0, top_p=0.0)
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(-1.0)


def direct(row: np.ndarray, token: int) -> float:
    """softmax(row)[token] computed from scratch, the whole row each time."""
    m = np.max(row)
    return float(np.exp(row[token] - m) / np.exp(row - m, dtype=np.float32).sum())


def test_a_rows_figures_computed_once_are_the_figures_computed_each_time():
    """A greedy verification keeps each row's argmax and softmax normalizer (RowStats): the
    probabilities and margins it reports are those computed afresh, bit for bit."""
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((4, 5000)) * 4).astype(np.float32)
    rows = RowStats(logits)
    for i in range(4):
        for token in (0, int(np.argmax(logits[i])), 4999, 17):
            assert rows.prob(i, token) == direct(logits[i], token) == prob_of(logits[i], token)
        assert rows.margin(i) == margin(logits[i].copy())
        assert rows.best(i) == int(np.argmax(logits[i]))
    proposal = [int(np.argmax(logits[0])), 3, 4]
    v = verify(proposal, None, logits, GREEDY, np.random.default_rng(0))
    assert [j.p_target for j in v.judgements] == [direct(logits[i], t)
                                                  for i, t in enumerate(proposal)]
    assert v.p_token == direct(logits[1], v.token) and v.margin == margin(logits[1])
