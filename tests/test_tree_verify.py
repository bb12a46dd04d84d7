"""Tree verification: greedy longest matching path; sampled verification keeps p exactly."""

from __future__ import annotations

import numpy as np
from logit_rows import GREEDY, SAMPLED, logits_for
from scipy.stats import chisquare

from specviz.engines import events as ev
from specviz.engines.loop.tree_verify import verify_tree
from specviz.engines.loop.verify import verify
from specviz.engines.sampling import sample


def test_greedy_follows_the_matching_branch():
    # root -> {1 (node 0), 2 (node 1)}; node 1 -> {3 (node 2), 4 (node 3)}; node 3 -> 5 (node 4)
    tokens, parents = [1, 2, 3, 4, 5], [-1, -1, 1, 1, 3]
    # rows: root wants 2, node0 -, node1 wants 4, node2 -, node3 wants 0, node4 -
    v = verify_tree(tokens, parents, None, logits_for(2, 0, 4, 0, 0, 0), GREEDY,
                    np.random.default_rng(0))
    assert v.path == (1, 3) and v.token == 0 and v.kind == ev.TARGET_CORRECTION
    reasons = [j.reason for j in v.judgements]
    assert reasons == [ev.REJECT_MISMATCH, None, ev.REJECT_MISMATCH, None, ev.REJECT_MISMATCH]
    assert [j.accepted for j in v.judgements] == [False, True, False, True, False]


def test_greedy_unreached_nodes_and_bonus():
    tokens, parents = [1, 2, 3], [-1, 0, -1]
    v = verify_tree(tokens, parents, None, logits_for(1, 2, 4, 0), GREEDY,
                    np.random.default_rng(0))
    assert v.path == (0, 1) and v.token == 4 and v.kind == ev.TARGET_BONUS
    v = verify_tree(tokens, parents, None, logits_for(3, 2, 4, 0), GREEDY,
                    np.random.default_rng(0))
    assert v.path == (2,) and v.judgements[1].reason == ev.REJECT_UNREACHED


def test_a_chain_is_judged_like_linear_verification():
    rng = np.random.default_rng(0)
    for best in [(1, 2, 3, 4), (1, 2, 5, 4), (0, 2, 3, 4)]:
        logits = logits_for(*best)
        lin = verify([1, 2, 3], None, logits, GREEDY, rng)
        tree = verify_tree([1, 2, 3], [-1, 0, 1], None, logits, GREEDY, rng)
        assert (lin.n_accepted, lin.token, lin.kind) == (tree.n_accepted, tree.token, tree.kind)


def test_empty_tree_is_a_plain_step():
    v = verify_tree([], [], None, logits_for(3), GREEDY, np.random.default_rng(0))
    assert v.path == () and v.token == 3 and v.kind == ev.TARGET_PLAIN


# ------------------------------------------------------------------ lossless sampling

P = np.array([0.05, 0.30, 0.10, 0.25, 0.20, 0.10])
Q = np.array([0.40, 0.05, 0.20, 0.05, 0.10, 0.20])
N = 20_000


def first_tokens(make_siblings, wrong: bool = False) -> np.ndarray:
    """The first emitted token of many tree steps whose root has several candidate children."""
    rng = np.random.default_rng(99)
    counts = np.zeros(len(P))
    for _ in range(N):
        tokens, q_rows = make_siblings(rng)
        logits = np.log(np.stack([P] * (len(tokens) + 1))).astype(np.float32)
        if wrong:  # a broken scheme: accept a child with p/q, never update p
            accepted = [t for t, q in zip(tokens, q_rows)
                        if rng.random() < min(1, P[t] / (q[t] if q is not None else 1))]
            counts[accepted[0] if accepted else sample(P, rng)] += 1
            continue
        v = verify_tree(tokens, [-1] * len(tokens), q_rows, logits, SAMPLED, rng)
        counts[tokens[v.path[0]] if v.path else v.token] += 1
    return counts


def test_siblings_drawn_from_q_preserve_the_target_distribution():
    def siblings(rng):  # three independent draws from q (duplicates allowed)
        return [sample(Q, rng) for _ in range(3)], [Q, Q, Q]

    assert chisquare(first_tokens(siblings), P * N).pvalue > 0.01


def test_deterministic_siblings_preserve_the_target_distribution():
    def siblings(rng):  # top-k style candidates: distinct, no q
        return [int(t) for t in rng.choice(len(P), 3, replace=False)], [None, None, None]

    assert chisquare(first_tokens(siblings), P * N).pvalue > 0.01


def test_the_same_test_catches_a_wrong_tree_scheme():
    def siblings(rng):
        return [sample(Q, rng) for _ in range(3)], [Q, Q, Q]

    assert chisquare(first_tokens(siblings, wrong=True), P * N).pvalue < 1e-6


def test_two_levels_preserve_the_joint_distribution():
    """Depth 2, deterministic candidates: the first two emitted tokens follow p(x) p(y|x)."""
    rng = np.random.default_rng(5)
    p2 = {x: np.roll(P, x) for x in range(len(P))}  # p(y | x): a different row per x
    tokens, parents = [1, 3, 4, 0, 2], [-1, -1, 0, 0, 1]  # 1 -> {4, 0}; 3 -> {2}
    rows = [P, p2[1], p2[3], p2[4], p2[0], p2[2]]
    logits = np.log(np.stack(rows)).astype(np.float32)
    counts = np.zeros((len(P), len(P)))
    for _ in range(N):
        v = verify_tree(tokens, parents, None, logits, SAMPLED, rng)
        emitted = [tokens[i] for i in v.path] + [v.token]
        x = emitted[0]
        y = emitted[1] if len(emitted) > 1 else sample(p2[x], rng)  # next step, plainly
        counts[x, y] += 1
    want = np.stack([P[x] * p2[x] for x in range(len(P))]).ravel() * N
    assert chisquare(counts.ravel(), want).pvalue > 0.01
