"""Verification: which proposed tokens the target keeps, and the target's own token.

Greedy: accept the longest prefix equal to the target's argmax, then take the target's
argmax at the first mismatch (or after the last proposal: the bonus token).

Sampling: the rejection scheme of Leviathan et al. 2022 / Chen et al. 2023. Accept proposal x
with probability min(1, p(x)/q(x)); on rejection draw from norm(max(0, p - q)); after full
acceptance draw the bonus token from p. An oracle without probabilities is a point mass
(q(x) = 1), which makes the scheme accept with probability p(x). Both preserve p exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .. import events as ev
from ..sampling import (
    RowStats,
    SamplingParams,
    distribution,
    margin,
    rank_of,
    sample,
    top_tokens,
)

RESIDUAL_TOP = 5  # the residual's likeliest tokens a sampled correction records


@dataclass(frozen=True)
class Judgement:
    """What verification decided about one proposed token."""

    accepted: bool
    p_target: float
    reason: str | None = None
    accept_prob: float | None = None
    draw: float | None = None


@dataclass(frozen=True)
class ResidualDraw:
    """The residual a sampled correction was drawn from, as the event records it: its mass
    before normalising and its likeliest (token, probability, rank), the drawn one included."""

    mass: float
    top: tuple[tuple[int, float, int], ...]

    @staticmethod
    def of(r: np.ndarray, mass: float, drawn: int) -> ResidualDraw:
        top = [(t, float(r[t]), rank) for rank, t in enumerate(top_tokens(r, RESIDUAL_TOP))]
        if all(t != drawn for t, _, _ in top):  # drawn from further down: where, and how likely
            top.append((drawn, float(r[drawn]), rank_of(r, drawn)))
        return ResidualDraw(mass, tuple(top))

    def event(self, text_of: Callable[[int], str]) -> ev.Residual:
        return ev.Residual(self.mass, tuple(ev.ResidualToken(t, text_of(t), p, rank)
                                            for t, p, rank in self.top))


@dataclass(frozen=True)
class Verdict:
    judgements: tuple[Judgement, ...]
    n_accepted: int
    token: int  # the target's own token
    kind: str  # ev.TARGET_*
    p_token: float
    margin: float
    residual: ResidualDraw | None = None  # sampling: what a correction was drawn from


def verify(
    proposal: Sequence[int],
    q_rows: Sequence[np.ndarray] | None,
    logits: np.ndarray,
    params: SamplingParams,
    rng: np.random.Generator,
) -> Verdict:
    """`logits` has len(proposal) + 1 rows: row i scores the position of proposal[i]."""
    if len(logits) != len(proposal) + 1:
        raise ValueError(f"need {len(proposal) + 1} logit rows, got {len(logits)}")
    if params.greedy:
        return _greedy(proposal, logits)
    return _sampled(proposal, q_rows, logits, params, rng)


def _greedy(proposal: Sequence[int], logits: np.ndarray) -> Verdict:
    rows = RowStats(logits)
    judgements: list[Judgement] = []
    for i, tok in enumerate(proposal):
        p = rows.prob(i, tok)
        if judgements and not judgements[-1].accepted:
            judgements.append(Judgement(False, p, ev.REJECT_AFTER))
        elif tok == rows.best(i):
            judgements.append(Judgement(True, p))
        else:
            judgements.append(Judgement(False, p, ev.REJECT_MISMATCH))
    n = _n_accepted(judgements)
    token = rows.best(n)
    return Verdict(tuple(judgements), n, token, _kind(proposal, n), rows.prob(n, token),
                   rows.margin(n))


def _sampled(proposal, q_rows, logits, params: SamplingParams, rng) -> Verdict:
    judgements: list[Judgement] = []
    token: int | None = None
    kind, p_token, drawn_from = ev.TARGET_PLAIN, 0.0, None
    for i, tok in enumerate(proposal):
        p = distribution(logits[i], params)
        if token is not None:  # already rejected earlier: these are never judged
            judgements.append(Judgement(False, float(p[tok]), ev.REJECT_AFTER))
            continue
        q = q_rows[i] if q_rows is not None else None
        q_tok = float(q[tok]) if q is not None else 1.0
        a = 1.0 if q_tok <= 0 else min(1.0, float(p[tok]) / q_tok)
        u = float(rng.random())
        if u < a:
            judgements.append(Judgement(True, float(p[tok]), None, a, u))
            continue
        judgements.append(Judgement(False, float(p[tok]), ev.REJECT_SAMPLED, a, u))
        r, mass = residual_and_mass(p, q, tok)
        token = sample(r, rng)
        kind, p_token = ev.TARGET_CORRECTION, float(p[token])
        drawn_from = ResidualDraw.of(r, mass, token)
    n = _n_accepted(judgements)
    if token is None:
        p = distribution(logits[n], params)
        token = sample(p, rng)
        kind, p_token = _kind(proposal, n), float(p[token])
    return Verdict(tuple(judgements), n, token, kind, p_token, margin(logits[n]), drawn_from)


def residual(p: np.ndarray, q: np.ndarray | None, tok: int) -> np.ndarray:
    """norm(max(0, p - q)); q is a point mass at `tok` when the oracle has no probabilities."""
    return residual_and_mass(p, q, tok)[0]


def residual_and_mass(p: np.ndarray, q: np.ndarray | None,
                      tok: int) -> tuple[np.ndarray, float]:
    """The residual and its mass before normalising, sum(max(0, p - q)); where none is left
    (p no greater than q anywhere) the draw falls back on p itself."""
    if q is None:
        r = p.copy()
        r[tok] = 0.0
    else:
        r = np.maximum(p - q, 0.0)
    total = float(r.sum())
    return (r / total if total > 0 else p), total


def _n_accepted(judgements: list[Judgement]) -> int:
    n = 0
    while n < len(judgements) and judgements[n].accepted:
        n += 1
    return n


def _kind(proposal: Sequence[int], n: int) -> str:
    if not proposal:
        return ev.TARGET_PLAIN
    return ev.TARGET_BONUS if n == len(proposal) else ev.TARGET_CORRECTION
