"""Early-exit self-speculation: the target's first L layers draft, the whole target verifies.

As in LayerSkip / draft-and-verify, the draft is the target cut after layer L, with its own
final norm and LM head on top: no second model, nothing to load. Transformers backend only
(llama.cpp cannot stop a forward pass after a layer).

The cache is shared: drafting runs on top of the target's cache, so the prefix is never
recomputed and no second cache is held; the K draft tokens' entries in the first L layers
are dropped after drafting (TransformersBackend.first_layers). What that costs: verification
recomputes the first L layers for the K drafted tokens (LayerSkip would reuse them), i.e. a
step costs K * L/N token-forwards of drafting on top of the verification batch. Memory: K
extra cache entries in L layers while drafting, nothing after.

`exit_layer` (the knob L) may change between steps; 0 picks three quarters of the layers: a
model not trained for early exit (LayerSkip trains for it) predicts poorly from its middle
layers (smollm2-135m, 30 layers, code prompt: 2% of drafts accepted at L=15, 23% at L=24).
Greedy drafting
proposes the argmax; sampled drafting samples the processed distribution and returns it (q)
for rejection sampling, as the draft oracle does.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..backends.base import Backend
from ..errors import SpecvizError
from ..sampling import distribution, prob_of, sample
from .base import BuildParts, Oracle, Proposal


class EarlyExitOracle(Oracle):
    name = "early-exit"
    source = "early-exit"

    def __init__(self, target: Backend, **settings) -> None:
        super().__init__(**settings)
        self.target = target
        self._layers(self.settings.exit_layer)  # refuse a bad L now, not at the first step

    def settings_changed(self, old) -> None:
        self._layers(self.settings.exit_layer)

    def _layers(self, exit_layer: int) -> int:
        n = self.target.n_layers
        if not 0 <= exit_layer <= n:
            raise SpecvizError(f"exit layer {exit_layer} is outside 1..{n} (0: {default_layer(n)})")
        return exit_layer or default_layer(n)

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        params, rng = self.run.params, self.run.rng
        tokens: list[int] = []
        q_rows: list[np.ndarray] = []
        p_draft: list[float] = []
        n_layers = self._layers(self.settings.exit_layer)  # read once: the GUI may change it
        with self.target.first_layers(n_layers) as draft:
            logits = draft([context[-1]])  # the pending token: not in the cache yet
            for i in range(k):
                q = distribution(logits, params) if not params.greedy else None
                token = sample(q, rng) if q is not None else int(np.argmax(logits))
                if token in self.run.eos_ids:
                    break
                tokens.append(token)
                p_draft.append(float(q[token]) if q is not None else prob_of(logits, token))
                if q is not None:
                    q_rows.append(q)
                if i + 1 < k:
                    logits = draft([token])
        layer = f"layer {n_layers}/{self.target.n_layers}"
        return Proposal(tokens, self.source, q_rows or None, p_draft,
                        details=[layer] * len(tokens))


def default_layer(n_layers: int) -> int:
    """Three quarters of the layers (at least one)."""
    return max(1, round(n_layers * 3 / 4))


def build(parts: BuildParts) -> EarlyExitOracle:
    return EarlyExitOracle(parts.target, **parts.settings)
