"""Verifying a token tree: which branch the target keeps, and the target's own token.

Row 0 of the logits scores the pending token's position (the root); row i + 1 scores the
position after node i. Children of a node are tried in order.

Greedy: from the root, follow the child equal to the target's argmax while there is one; the
argmax at the last kept node is the target's token (correction, or bonus at a leaf).

Sampling: SpecInfer's multi-step speculative sampling (Miao et al. 2024). At a node with
target distribution p, try its children in turn: accept child x with probability
min(1, p(x)/q(x)); after a rejection p becomes norm(max(0, p - q)) and the next sibling is
tried against it. Siblings drawn independently from q keep p exactly. A child with no q (a
deterministic candidate: top-k drafts, n-grams) is a point mass: accepted with probability
p(x), after a rejection p(x) is set to 0 and p renormalised. Also exact. When every child
is rejected the token is drawn from what is left of p; at a leaf, from the node's own p.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import events as ev
from ..sampling import RowStats, SamplingParams, distribution, sample
from .verify import Judgement, residual


@dataclass(frozen=True)
class TreeVerdict:
    judgements: tuple[Judgement, ...]  # per node; never-judged nodes have reason UNREACHED
    path: tuple[int, ...]  # accepted nodes, root's child first
    token: int  # the target's own token after the path
    kind: str  # ev.TARGET_*
    p_token: float
    margin: float

    @property
    def n_accepted(self) -> int:
        return len(self.path)


def children_of(parents: Sequence[int]) -> dict[int, list[int]]:
    """Children of every node in order; key -1 is the root."""
    kids: dict[int, list[int]] = {-1: []}
    for i, parent in enumerate(parents):
        kids.setdefault(i, [])
        kids.setdefault(parent, []).append(i)
    return kids


def verify_tree(
    tokens: Sequence[int],
    parents: Sequence[int],
    q_rows: Sequence[np.ndarray | None] | None,
    logits: np.ndarray,
    params: SamplingParams,
    rng: np.random.Generator,
) -> TreeVerdict:
    """`q_rows[i]` is the distribution node i was drawn from (None: deterministic)."""
    if len(logits) != len(tokens) + 1 or len(parents) != len(tokens):
        raise ValueError(f"need {len(tokens) + 1} logit rows and a parent per node")
    kids = children_of(parents)
    rows = RowStats(logits)  # siblings share a row: its softmax once
    judged: dict[int, Judgement] = {}
    path: list[int] = []
    node = -1
    while True:
        row = logits[node + 1]
        if params.greedy:
            nxt, token = _greedy_children(tokens, kids[node], rows, node + 1, judged)
        else:
            q = [None if q_rows is None else q_rows[c] for c in kids[node]]
            nxt, token = _sampled_children(tokens, kids[node], q, row, params, rng, judged)
        if nxt is None:
            break
        path.append(nxt)
        node = nxt
    at = node + 1
    p_token = (rows.prob(at, token) if params.greedy
               else float(distribution(logits[at], params)[token]))
    kind = _kind(tokens, kids[node])
    judgements = tuple(judged.get(i) or _unreached(tokens, parents, i, rows, params)
                       for i in range(len(tokens)))
    return TreeVerdict(judgements, tuple(path), token, kind, p_token, rows.margin(at))


def _greedy_children(tokens, children, rows: RowStats, at: int,
                     judged) -> tuple[int | None, int]:
    best = rows.best(at)
    chosen = None
    for c in children:
        ok = chosen is None and tokens[c] == best
        judged[c] = Judgement(ok, rows.prob(at, tokens[c]), None if ok else ev.REJECT_MISMATCH)
        chosen = c if ok else chosen
    return chosen, best


def _sampled_children(tokens, children, q_rows, row, params, rng, judged):
    p = distribution(row, params)
    p_orig = p
    for c, q in zip(children, q_rows):
        tok = tokens[c]
        q_tok = float(q[tok]) if q is not None else 1.0
        a = 1.0 if q_tok <= 0 else min(1.0, float(p[tok]) / q_tok)
        u = float(rng.random())
        if u < a:
            judged[c] = Judgement(True, float(p_orig[tok]), None, a, u)
            return c, -1
        judged[c] = Judgement(False, float(p_orig[tok]), ev.REJECT_SAMPLED, a, u)
        p = residual(p, q, tok)
    return None, sample(p, rng)


def _unreached(tokens, parents, i, rows: RowStats, params) -> Judgement:
    at = parents[i] + 1
    p = rows.prob(at, tokens[i]) if params.greedy else \
        float(distribution(rows.logits[at], params)[tokens[i]])
    return Judgement(False, p, ev.REJECT_UNREACHED)


def _kind(tokens: Sequence[int], children: list[int]) -> str:
    if not tokens:
        return ev.TARGET_PLAIN
    return ev.TARGET_CORRECTION if children else ev.TARGET_BONUS
