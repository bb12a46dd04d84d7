"""Pricing a speculation tree for auto K (EAGLE's and suffix decoding's): a node's
probability is the chance it is accepted, so the likeliest m nodes are worth their summed
probabilities in tokens; send the m whose expected tokens per ms peak, none when no m beats
a plain step. The probabilities are scaled by how well they have held up in this run (an
oracle can be over- or under-confident)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .base import TreeProposal


def affordable(scores: Sequence[float], trust: float, drafted_ms: float, n_ctx: int,
               price: Callable[[int, int], float]) -> int:
    """How many of the nodes (scores likeliest first) to send: the number with the most
    expected tokens per ms, the drafting already done counted in every step's time."""
    best, best_rate, gain = 0, 1.0 / (drafted_ms + price(1, n_ctx)), 0.0
    for m, score in enumerate(scores, start=1):
        gain += score
        rate = (1.0 + trust * gain) / (drafted_ms + price(1 + m, n_ctx))
        if rate > best_rate:
            best, best_rate = m, rate
    return best


class Trust:
    """How the path probabilities of the trees sent have held up: tokens accepted over the
    tokens the scores promised (a Beta-like prior of PRIOR promised tokens kept at 1)."""

    PRIOR = 4.0

    def __init__(self) -> None:
        self.accepted = self.promised = 0.0
        self._last: tuple[int, list[int], list[int], float] | None = None

    @property
    def factor(self) -> float:
        return (self.accepted + self.PRIOR) / (self.promised + self.PRIOR)

    def sent(self, context: Sequence[int], tree: TreeProposal, promised: float) -> None:
        self._last = (len(context), tree.tokens, tree.parents, promised)

    def judge(self, context: Sequence[int]) -> None:
        """Count the last tree's accepted path, read off the context that followed it."""
        if self._last is None:
            return
        start, tokens, parents, promised = self._last
        self._last = None
        node, depth = -1, 0
        for token in context[start:]:
            node = next((i for i, (t, p) in enumerate(zip(tokens, parents))
                         if p == node and t == token), None)
            if node is None:
                break
            depth += 1
        self.accepted += depth
        self.promised += promised
