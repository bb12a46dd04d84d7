"""Branching drafts: the draft model proposes a token tree, verified in one target pass.

At each depth every frontier node (most probable path first) gets the draft's top token,
and also its next tokens while their probability is at least `split`, until the tree holds
`budget` nodes or is K deep. The draft scores a whole level in one masked forward pass.

The candidates are the draft's top tokens, not draws from it, so verification treats them
as point masses (accept with the target's residual probability): lossless when sampling too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..backends.base import Backend
from ..sampling import SamplingParams, distribution, softmax
from .base import BuildParts, Oracle, RunContext, TreeProposal
from .draft import check_compatible

MAX_CHILDREN = 4


class TreeDraftOracle(Oracle):
    name = "tree"
    source = "tree"

    def __init__(self, draft: Backend, target: Backend | None = None, **settings) -> None:
        super().__init__(**settings)
        self.draft = draft
        if target is not None:
            check_compatible(target, draft)

    def tree_nodes(self) -> int:
        return self.settings.budget

    def start(self, run: RunContext) -> None:
        super().start(run)
        self.draft.reserve_branches(self.settings.budget)

    def propose(self, context: Sequence[int], k: int) -> TreeProposal:
        tree = TreeProposal(source=self.source, p_draft=[], details=[])
        frontier = [(-1, 1.0, self.draft.sync(context)[-1])]  # (node, path prob, logits)
        for depth in range(1, k + 1):
            grown = self._grow(tree, frontier)
            if not grown or depth == k or len(tree) >= self.settings.budget:
                break
            logits = self.draft.forward_tree(tree.tokens, tree.parents)
            self.draft.discard_nodes()
            frontier = [(i, p, logits[i]) for i, p in grown]
        return tree

    def _grow(self, tree: TreeProposal, frontier) -> list[tuple[int, float]]:
        """Add the children of every frontier node; return (node, path prob) of the new."""
        params: SamplingParams = self.run.params
        grown = []
        for parent, path_p, logits in sorted(frontier, key=lambda f: -f[1]):
            p = softmax(logits) if params.greedy else distribution(logits, params)
            for rank, tok in enumerate(_top(p, MAX_CHILDREN)):
                tok, prob = int(tok), float(p[tok])
                if len(tree) >= self.settings.budget or (rank and prob < self.settings.split):
                    break
                if tok in self.run.eos_ids:
                    continue
                tree.tokens.append(tok)
                tree.parents.append(parent)
                tree.p_draft.append(prob)
                tree.details.append(f"draft's #{rank + 1} choice")
                grown.append((len(tree) - 1, path_p * prob))
        return grown

def _top(p: np.ndarray, n: int) -> np.ndarray:
    """The n most probable tokens, most probable first (a partition, not a full sort)."""
    top = np.argpartition(-p, n)[:n]
    return top[np.argsort(-p[top], kind="stable")]


def build(parts: BuildParts) -> TreeDraftOracle:
    return TreeDraftOracle(parts.inputs["draft"], parts.target, **parts.settings)
