"""Medusa heads draft from the target's own last hidden state (Cai et al. 2024).

After each step the target's cache ends at the position just before the pending token; the
LM head's input there, h, predicted the pending token. Head k reads h and guesses the token k
places after the pending one, so one small matmul drafts up to H tokens with no extra model.
The linear proposal (each head's top token, or a sample from it with its distribution for
rejection sampling) is verified like any other: lossless. `tree()` gives Medusa's candidate
tree from the heads' top-k tokens, for tree verification.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ..backends.base import Backend
from ..events import DECLINE_RULE
from ..medusa.tree import CandidateTree, build_tree
from ..sampling import distribution, prob_of, sample, softmax
from .base import BuildParts, Oracle, Proposal, TreeProposal


class MedusaOracle(Oracle):
    name = "medusa"
    source = "medusa"

    def __init__(self, target: Backend, heads_folder: Path | None = None, **settings) -> None:
        super().__init__(**settings)
        from ..machine.precision import Int8Copy
        from ..medusa.heads import lm_head_of, load_heads

        self.target = target
        self.heads, self.config = load_heads(target.model, target.model_path, heads_folder)
        # The heads draft through the target's LM head: on a CPU reading it is most of what
        # drafting costs (113 MB in float32 for smollm2), a quarter of that in int8.
        self._lm_heads = Int8Copy(lm_head_of(target.model))
        self.settings_changed(None)
        target.keep_hidden(True)

    @property
    def n_heads(self) -> int:
        return self.heads.n_heads

    def head_logits(self, context: Sequence[int], n: int) -> np.ndarray | None:
        """(n, vocab) logits of the first n heads after `context`, or None without a hidden
        state (a one-token prompt has no position before the pending token)."""
        import torch

        h = self.target.hidden_at(len(context) - 2)
        if h is None or n < 1:
            return None
        with torch.inference_mode():
            logits = self.heads.logits(h, self._lm_head, min(n, self.n_heads))
        return logits.float().cpu().numpy()

    def settings_changed(self, old) -> None:
        """int8 1: draft through an int8 copy of the target's LM head where the device has
        quantized kernels (engines.machine.precision); the target verifies in its own
        precision."""
        self._lm_head = self._lm_heads.pick(bool(self.settings.int8), str(self.target.device))

    def heads_config(self) -> dict:
        return asdict(self.config)

    def tree_nodes(self) -> int:
        return self.settings.budget

    def tree_depth(self) -> int:
        budget = self.settings.budget  # 0: the top chain
        return min(budget, self.n_heads) if budget else self.n_heads  # a head per position

    def propose(self, context: Sequence[int], k: int) -> Proposal | TreeProposal:
        if self.settings.budget > 0:
            return self._tree_proposal(context, k)
        rows = self.head_logits(context, k)
        if rows is None:  # no hidden state to read yet
            return Proposal(source=self.source, declined=DECLINE_RULE)
        params, rng = self.run.params, self.run.rng
        tokens, p_draft, q_rows, details = [], [], [], []
        for i, row in enumerate(rows):
            if params.greedy:
                token = int(np.argmax(row))
                p_draft.append(prob_of(row, token))
            else:
                q = distribution(row, params)
                token = sample(q, rng)
                p_draft.append(float(q[token]))
                q_rows.append(q)
            tokens.append(token)
            details.append(f"head {i + 1}")
        return Proposal(tokens, self.source, q_rows or None, p_draft, details=details)

    def tree(self, context: Sequence[int], top_k: int = 4, budget: int = 32) -> CandidateTree:
        """Medusa's candidate tree after `context`: each head's top_k tokens, best `budget`
        paths by product of head probabilities. Empty without a hidden state."""
        rows = self.head_logits(context, self.n_heads)
        if rows is None:
            return build_tree([], [], 0)
        tops = [np.argsort(-row, kind="stable")[:top_k] for row in rows]
        probs = [softmax(row)[top] for row, top in zip(rows, tops)]
        return build_tree([t.tolist() for t in tops], [p.tolist() for p in probs], budget)

    def _tree_proposal(self, context: Sequence[int], k: int) -> TreeProposal:
        """Medusa's own decoding: the candidate tree, verified in one masked pass (the session
        prunes it to depth k). Its candidates are fixed, not drawn, so sampled runs verify
        them as point masses and stay lossless."""
        tree = self.tree(context, self.settings.top_k, self.settings.budget)
        parent_score = [tree.scores[p] if p >= 0 else 1.0 for p in tree.parents]
        return TreeProposal(
            tokens=list(tree.tokens), parents=list(tree.parents), source=self.source,
            p_draft=[s / ps for s, ps in zip(tree.scores, parent_score)],  # the head's own p
            details=[f"head {d}" for d in tree.depths],
        )

    def close(self) -> None:
        self.target.keep_hidden(False)


def build(parts: BuildParts) -> MedusaOracle:
    return MedusaOracle(parts.target, parts.inputs.get("medusa_heads"), **parts.settings)
