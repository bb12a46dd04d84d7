"""Medusa's typical acceptance (Cai et al. 2024): LOSSY, an option, never the default.

With sampling, a proposed token x is accepted when the target finds it typical enough:
p(x) > min(epsilon, alpha * exp(-H(p))), where H is the entropy of the target's processed
distribution p at that position. The longest such prefix is kept and the target's own token
is drawn from p after it. This accepts more than rejection sampling, but the output no longer
follows the target's distribution exactly. At temperature 0 it is plain greedy verification
(as in Medusa), which is lossless.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import events as ev
from ..sampling import SamplingParams, distribution, margin, sample
from .verify import Judgement, Verdict, verify


@dataclass(frozen=True)
class TypicalAcceptance:
    epsilon: float = 0.09  # the posterior threshold (Medusa's default)
    alpha: float = 0.3  # scales exp(-entropy); Medusa uses sqrt(epsilon)

    def __post_init__(self) -> None:
        if not 0 < self.epsilon <= 1 or not 0 < self.alpha:
            raise ValueError("typical acceptance needs 0 < epsilon <= 1 and alpha > 0")

    def threshold(self, p: np.ndarray) -> float:
        nz = p[p > 0]
        entropy = float(-(nz * np.log(nz)).sum())
        return min(self.epsilon, self.alpha * float(np.exp(-entropy)))


def verify_typical(proposal: Sequence[int], logits: np.ndarray, params: SamplingParams,
                   rng: np.random.Generator, rule: TypicalAcceptance) -> Verdict:
    """Like `verify`, but a proposal is kept when typical, not by rejection sampling."""
    if params.greedy:
        return verify(proposal, None, logits, params, rng)
    if len(logits) != len(proposal) + 1:
        raise ValueError(f"need {len(proposal) + 1} logit rows, got {len(logits)}")
    judgements: list[Judgement] = []
    for i, tok in enumerate(proposal):
        p = distribution(logits[i], params)
        if judgements and not judgements[-1].accepted:
            judgements.append(Judgement(False, float(p[tok]), ev.REJECT_AFTER))
            continue
        bar = rule.threshold(p)
        ok = float(p[tok]) > bar
        # accept_prob carries the threshold the token's p_target was held against.
        judgements.append(Judgement(ok, float(p[tok]), None if ok else ev.REJECT_TYPICAL, bar))
    n = 0
    while n < len(judgements) and judgements[n].accepted:
        n += 1
    p = distribution(logits[n], params)
    token = sample(p, rng)
    kind = ev.TARGET_PLAIN if not proposal else (
        ev.TARGET_BONUS if n == len(proposal) else ev.TARGET_CORRECTION)
    return Verdict(tuple(judgements), n, token, kind, float(p[token]), margin(logits[n]))
