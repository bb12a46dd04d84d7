"""Turning logits into a distribution, the same way for target and draft.

Temperature and top-p must be applied identically to p (target) and q (draft): rejection
sampling is lossless with respect to the *processed* target distribution.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top-p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


GREEDY = SamplingParams()  # the default everywhere (frozen, so one instance serves all)


def softmax(logits: np.ndarray) -> np.ndarray:
    # exp in float32 (fast on 150k-row vocabularies), normalised in float64 (sums to 1).
    e = np.exp(logits - np.max(logits), dtype=np.float32).astype(np.float64)
    return e / e.sum()


def prob_of(logits: np.ndarray, token: int) -> float:
    """softmax(logits)[token] without building the whole distribution in float64."""
    return RowStats(logits[None]).prob(0, token)


class RowStats:
    """A verification's logits, with each row's argmax and softmax normalizer computed once.

    A greedy verification asks a row for its argmax, its probability of one or more tokens
    (siblings of a tree share a row; a refused row is asked for the proposed token and for
    the target's own) and its margin; each probability was a softmax of the whole row, an
    exponential of every logit: 123 us a row for a 151,936-token vocabulary on a 2-core
    EPYC, more than a fast GPU's step spends elsewhere. `prob_of` is a row's probability
    asked once; `margin` takes the kept argmax."""

    def __init__(self, logits: np.ndarray) -> None:
        self.logits = logits
        self._best: dict[int, int] = {}
        self._norm: dict[int, tuple] = {}

    def best(self, i: int) -> int:
        if i not in self._best:
            self._best[i] = int(np.argmax(self.logits[i]))
        return self._best[i]

    def prob(self, i: int, token: int) -> float:
        row = self.logits[i]
        if i not in self._norm:
            top = row[self.best(i)]  # the row's maximum
            self._norm[i] = (top, np.exp(row - top, dtype=np.float32).sum())
        top, norm = self._norm[i]
        return float(np.exp(row[token] - top) / norm)

    def margin(self, i: int) -> float:
        return margin(self.logits[i], self.best(i))


def distribution(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The sampling distribution for one row of logits (float64, sums to 1)."""
    if params.greedy:
        p = np.zeros(logits.shape[-1])
        p[int(np.argmax(logits))] = 1.0
        return p
    p = softmax(logits / params.temperature)
    if params.top_p < 1.0:
        p = _top_p(p, params.top_p)
    return p


def _top_p(p: np.ndarray, top_p: float) -> np.ndarray:
    order = np.argsort(-p, kind="stable")
    cumulative = np.cumsum(p[order])
    keep = int(np.searchsorted(cumulative, top_p)) + 1  # smallest set with mass >= top_p
    out = np.zeros_like(p)
    out[order[:keep]] = p[order[:keep]]
    return out / out.sum()


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    """One draw from a distribution (inverse CDF: one uniform per draw, reproducible)."""
    cumulative = np.cumsum(p)
    return int(min(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"),
                   len(p) - 1))


def top_tokens(p: np.ndarray, k: int) -> list[int]:
    """The k likeliest tokens of a distribution, likeliest first, leaving out any of
    probability 0; of equally likely tokens the lower id comes first (`rank_of` agrees).
    One partial sort of the row, not a full one."""
    k = min(k, len(p))
    if k <= 0:
        return []
    kth = np.partition(p, len(p) - k)[len(p) - k]
    above = np.flatnonzero(p > kth)
    head = [*above, *np.flatnonzero(p == kth)[: k - len(above)]]
    return sorted((int(i) for i in head if p[i] > 0), key=lambda i: (-p[i], i))


def rank_of(p: np.ndarray, token: int) -> int:
    """The token's place in p, likeliest first (0: the likeliest), as `top_tokens` orders."""
    return int(np.count_nonzero(p > p[token]) + np.count_nonzero(p[:token] == p[token]))


def margin(logits: np.ndarray, best: int | None = None) -> float:
    """Top-1 minus top-2 logit: how close the greedy choice was to a tie (`best`: the
    argmax, where known)."""
    best = int(np.argmax(logits)) if best is None else best
    top = logits[best]
    logits[best] = -np.inf  # two linear scans beat a partition; restored below
    second = np.max(logits)
    logits[best] = top
    return float(top - second)
