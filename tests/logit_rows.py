"""Hand-made logit rows for the verification tests: one clear winner per row."""

from __future__ import annotations

import numpy as np

from specviz.engines.sampling import SamplingParams

GREEDY = SamplingParams()
SAMPLED = SamplingParams(temperature=1.0)


def logits_for(*best: int, vocab: int = 6) -> np.ndarray:
    rows = np.zeros((len(best), vocab), dtype=np.float32)
    for i, b in enumerate(best):
        rows[i, b] = 5.0
    return rows
