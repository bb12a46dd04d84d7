"""EAGLE drafting (Li et al. 2024-2025): a small head reads the target's own features and
drafts a tree that grows where it is confident.

The head keeps its own cache of one row per context position: row t pairs the target's fused
features at t with token t+1 (the target's cache ends just before the pending token, so rows
reach position n-2 and the last predicts the first draft token). Each step it reads the rows
the last verification added, then grows the draft tree as EAGLE-2 does: the `top_k` most
probable nodes of the newest depth (by path probability) are expanded together in one pass of
the head, each gets its `top_k` likeliest children; when K deep, the `budget` most probable
nodes of all are kept (a child is never likelier than its parent, so they form a tree) and
verified in one masked pass. The candidates are the head's top tokens, not draws, so
verification treats them as point masses: lossless when sampling too.

With auto K the tree is priced too: a node's path probability is the chance it is accepted
(EAGLE-2's observation), so the likeliest m nodes are worth their summed scores in tokens, and
the oracle sends the m whose expected tokens per ms (auto K's prices for m + 1 rows) peak, none
when no m beats a plain step. The scores are scaled by how they have held up in this run: a
head can be over- or under-confident.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..backends.base import Backend, common_prefix
from ..events import DECLINE_AUTO_K, DECLINE_RULE
from .base import AutoKHints, BuildParts, Oracle, RunContext, TreeProposal
from .tree_price import Trust, affordable


@dataclass
class _Node:
    token: int
    parent: int  # index among the nodes, -1: follows the pending token
    depth: int
    p: float  # the head's probability of this token after its parent
    score: float  # the path's probability
    row: int = -1  # the head's cache row once expanded


class EagleOracle(Oracle, AutoKHints):
    name = "eagle"
    source = "eagle"

    def __init__(self, target: Backend, head_folder: Path | None = None, **settings) -> None:
        super().__init__(**settings)
        from ..eagle.checkpoint import load_head
        from ..eagle.head import KeyValues
        from ..machine.precision import Int8Copy
        from ..medusa.heads import lm_head_of

        self.target = target
        self.head, self.layers, self.config = load_head(target.model, target.model_path,
                                                        head_folder)
        self._embed = target.model.get_input_embeddings()
        # A head without a draft vocabulary drafts through the target's LM head.
        lm_head = None if self.head.lm_head is not None else lm_head_of(target.model)
        self._lm_heads = None if lm_head is None else Int8Copy(lm_head)
        self._lm_head = lm_head
        self._cache = KeyValues()
        self._fed: list[int] = []  # token t+1 of every row t the cache holds
        self._last = None  # the head's output at the cache's last row
        self._trust = Trust()
        self._heads = Int8Copy(self.head, keep={"fc"})  # see engines.machine.precision
        self.settings_changed(None)
        target.keep_features(self.layers)

    def settings_changed(self, old) -> None:
        """int8 1: draft with int8 copies of the head (and of the target's LM head, where the
        head drafts through it) where the device has quantized kernels."""
        on, device = bool(self.settings.int8), str(self.target.device)
        if self._lm_heads:
            self._lm_head = self._lm_heads.pick(bool(on), device)
        head = self._heads.pick(bool(on), device)
        if head is not self.head:  # the other head's cached rows are not this one's
            self.head = head
            self._cache.crop(0)
            self._fed, self._last = [], None

    def heads_config(self) -> dict:
        return self.config

    def tree_nodes(self) -> int:
        return self.settings.budget

    def start(self, run: RunContext) -> None:
        super().start(run)
        self._cache.crop(0)
        self._fed, self._last = [], None
        self._trust = Trust()

    def propose(self, context: Sequence[int], k: int) -> TreeProposal:
        import torch

        t0 = time.perf_counter()
        self._trust.judge(context)
        with torch.inference_mode():
            root = self._read(context)
            if root is None or k < 1 or self.settings.budget < 1:
                return TreeProposal(source=self.source, declined=DECLINE_RULE)
            rows = len(self._cache)
            try:
                nodes = self._grow(root, rows, k)
            finally:
                self._cache.crop(rows)
        budget = self.settings.budget
        if self.price is not None:
            budget = self._affordable(nodes, (time.perf_counter() - t0) * 1e3, len(context))
            if budget == 0:
                return TreeProposal(source=self.source, declined=DECLINE_AUTO_K)
        tree, promised = self._proposal(nodes, budget)
        self._trust.sent(context, tree, promised)
        return tree

    # ------------------------------------------------------------ the head's rows

    def _read(self, context: Sequence[int]):
        """Bring the head's cache to rows 0..n-2 of `context`; its output at row n-2."""
        wanted = list(context[1:])
        common = common_prefix(self._fed, wanted)
        if common == len(wanted) and self._last is not None and len(self._fed) == common:
            return self._last
        common = min(common, len(wanted) - 1)  # at least the last row is computed again
        if common < 0:
            return None
        features = self.target.features(common, len(wanted))
        if features is None:
            return None
        self._cache.crop(common)
        out = self._rows(self.head.fc(features), wanted[common:], common)
        self._fed, self._last = wanted, out[-1]
        return self._last

    def _rows(self, hidden, tokens: Sequence[int], start: int, seen=None):
        """Feed rows at positions start, start+1, ...: each sees the cache (all of it, or the
        rows `seen[i]` lists for row i) and the rows before it here (all, or itself only when
        `seen` is given: tree nodes)."""
        import torch

        n, cached = len(tokens), len(self._cache)
        device = hidden.device
        ids = torch.tensor(list(tokens), device=device)
        allowed = torch.zeros((1, n, cached + n), dtype=torch.bool, device=device)
        if seen is None:
            allowed[0, :, :cached] = True
            allowed[0, :, cached:] = torch.ones(n, n, dtype=torch.bool, device=device).tril()
        else:
            for i, rows in enumerate(seen):
                allowed[0, i, rows] = True
                allowed[0, i, cached + i] = True
        positions = torch.arange(start, start + n, device=device)[None]
        out = self.head.step(hidden[None], self._embed(ids)[None], positions, self._cache,
                             allowed)
        return out[0]

    # ------------------------------------------------------------ the tree

    def _grow(self, root, context_rows: int, k: int) -> list[_Node]:
        nodes: list[_Node] = []
        outs = {-1: root}  # node -> the head's output there (its children's logits)
        frontier = [-1]
        for depth in range(1, k + 1):
            born = self._children(nodes, frontier, outs, depth)
            if depth == k or not born:
                break
            frontier = sorted(born, key=lambda i: -nodes[i].score)[: self.settings.top_k]
            outs.update(self._expand(nodes, frontier, outs, context_rows))
        return nodes

    def _children(self, nodes: list[_Node], frontier: list[int], outs, depth: int) -> list[int]:
        import torch

        logits = self.head.logits(torch.stack([outs[i] for i in frontier]), self._lm_head)
        probs = torch.softmax(logits.float(), dim=-1)
        top_p, top_ids = probs.topk(self.settings.top_k + 1, dim=-1)  # one spare for an end token
        top_ids = self.head.to_target_ids(top_ids)
        born = []
        for parent, ps, ids in zip(frontier, top_p.tolist(), top_ids.tolist()):
            above = 1.0 if parent < 0 else nodes[parent].score
            kept = [(t, p) for t, p in zip(ids, ps)
                    if t not in self.run.eos_ids][: self.settings.top_k]
            for token, p in kept:
                nodes.append(_Node(int(token), parent, depth, p, above * p))
                born.append(len(nodes) - 1)
        return born

    def _expand(self, nodes: list[_Node], chosen: list[int], outs, context_rows: int) -> dict:
        """One pass of the head over the chosen nodes: each sees the context's rows and its
        own ancestors' rows; returns their outputs."""
        import torch

        first = len(self._cache)
        seen = []
        for i in chosen:
            rows, a = list(range(context_rows)), nodes[i].parent
            while a >= 0:
                rows.append(nodes[a].row)
                a = nodes[a].parent
            seen.append(rows)
        hidden = torch.stack([outs[nodes[i].parent] for i in chosen])
        depth = nodes[chosen[0]].depth
        out = self._rows(hidden, [nodes[i].token for i in chosen], context_rows + depth - 1, seen)
        for j, i in enumerate(chosen):
            nodes[i].row = first + j
        return {i: out[j] for j, i in enumerate(chosen)}

    def _affordable(self, nodes: list[_Node], drafted_ms: float, n_ctx: int) -> int:
        """How many of the likeliest nodes to send (tree_price.affordable)."""
        assert self.price is not None
        scores = sorted((n.score for n in nodes), reverse=True)[: self.settings.budget]
        return affordable(scores, self._trust.factor, drafted_ms, n_ctx, self.price)

    def _proposal(self, nodes: list[_Node], budget: int) -> tuple[TreeProposal, float]:
        """The `budget` likeliest nodes, parents first, siblings likeliest first; and the
        tokens their path probabilities promise."""
        kept = sorted(range(len(nodes)), key=lambda i: (-nodes[i].score, nodes[i].depth))
        kept = sorted(kept[:budget], key=lambda i: (nodes[i].depth, -nodes[i].score))
        index: dict[int, int] = {}  # node -> its place in the tree
        tree = TreeProposal(source=self.source, p_draft=[], details=[])
        promised = 0.0
        for i in kept:
            node = nodes[i]
            if node.parent >= 0 and node.parent not in index:
                continue  # a tie put a child before its parent: it cannot hang anywhere
            index[i] = len(tree)
            tree.tokens.append(node.token)
            tree.parents.append(index[node.parent] if node.parent >= 0 else -1)
            tree.p_draft.append(node.p)
            tree.details.append(f"depth {node.depth}, path p {node.score:.2f}")
            promised += node.score
        return tree, promised

    def close(self) -> None:
        self.target.keep_features(None)


def build(parts: BuildParts) -> EagleOracle:
    return EagleOracle(parts.target, parts.inputs.get("eagle_head"), **parts.settings)
