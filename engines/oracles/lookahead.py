"""Lookahead decoding (Fu et al. 2024): Jacobi iterations of the target itself feed an n-gram
pool; n-grams that start with the pending token are verified as a tree.

The lookahead branch is a window of N-1 levels of W tokens. Token (level l, column i) sits
i + l + 1 positions after the pending token and sees level 0's columns up to i and the
levels below it in column i: a diagonal that reads as one candidate continuation. The
target's argmax at the top level gives the next level (one Jacobi iteration for every
column at once); once the window is N-1 levels tall, each column with its new token is an
n-gram for the pool, and the window slides up one level. The pool keeps at most G n-grams
per first token, most recent first; n-grams of the context (prompt and output) seed it too.

Verification branch: up to G pool n-grams that start with the pending token, merged into a
tree. Both branches go to the target in the same forward pass: the window as side rows of
the tree proposal (`SideBranch`), whose logits come back through `side_logits`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..events import Lookahead
from .base import BuildParts, Oracle, RunContext, SideBranch, SideRows, TreeProposal

NGram = tuple[int, ...]


class NGramPool:
    """N-grams keyed by their first token: at most `g` per key, the most recent last."""

    def __init__(self, g: int) -> None:
        self.g = g
        self._pool: dict[int, dict[NGram, str]] = {}  # key -> {rest: origin}, ordered

    def add(self, ngram: Sequence[int], origin: str) -> bool:
        """Add (or refresh) an n-gram; True when it was new."""
        key, rest = ngram[0], tuple(ngram[1:])
        entries = self._pool.setdefault(key, {})
        new = rest not in entries
        entries.pop(rest, None)
        entries[rest] = origin
        while len(entries) > self.g:
            del entries[next(iter(entries))]
        return new

    def candidates(self, key: int) -> list[tuple[NGram, str]]:
        """Continuations after `key`, the most recent first."""
        return list(reversed(self._pool.get(key, {}).items()))

    def __len__(self) -> int:
        return sum(len(e) for e in self._pool.values())


class LookaheadOracle(Oracle, SideRows):
    name = "lookahead"
    source = "lookahead"

    def __init__(self, **settings) -> None:  # W, N, G: the paper's names
        super().__init__(**settings)
        self.pool = NGramPool(self.settings.G)
        self.levels: list[list[int]] = []
        self._seeded = 0  # context tokens whose n-grams are in the pool
        self._new = 0
        self._rng = np.random.default_rng(0)

    def settings_changed(self, old) -> None:
        self.pool.g = self.settings.G
        self.levels = []  # a new window shape: start it again

    def tree_nodes(self) -> int:
        return (self.settings.W + self.settings.G) * (self.settings.N - 1)

    def tree_depth(self) -> int:
        return self.settings.N - 1  # a guess is the rest of one n-gram

    def start(self, run: RunContext) -> None:
        super().start(run)
        self.pool = NGramPool(self.settings.G)
        self._seeded = self._new = 0
        self.levels = []
        self._rng = np.random.default_rng(run.params.seed or 0)

    def propose(self, context: Sequence[int], k: int) -> TreeProposal:
        self._seed(context)
        if not self.levels:  # the first level: context tokens (Jacobi starts from anything)
            self.levels = [[int(t) for t in self._rng.choice(context, self.settings.W)]]
        tree = TreeProposal(source=self.source, details=[])
        for rest, origin in self.pool.candidates(context[-1])[: self.settings.G]:
            _add_path(tree, rest[:k], origin)
        tree.side = self._window()
        return tree

    def side_logits(self, logits: np.ndarray) -> None:
        """One Jacobi iteration: the top level's argmax is the next level."""
        top = len(self.levels) - 1
        w = self.settings.W
        new = [int(t) for t in np.argmax(logits[top * w : (top + 1) * w], axis=1)]
        self._new = 0
        if len(self.levels) < self.settings.N - 1:
            self.levels.append(new)
            return
        for i in range(self.settings.W):
            column = [level[i] for level in self.levels] + [new[i]]
            self._new += self.pool.add(column, "Jacobi window")
        self.levels = [*self.levels[1:], new]

    def lookahead_state(self) -> Lookahead:
        text = self.run.token_text if self.run and self.run.token_text else str
        window = tuple(tuple(text(t) for t in level) for level in self.levels)
        return Lookahead(len(self.pool), window, self._new)

    def _window(self) -> SideBranch:
        tokens, depths, visible = [], [], []
        for level, row in enumerate(self.levels):
            for i, tok in enumerate(row):
                tokens.append(tok)
                depths.append(1 + i + level)
                if level == 0:
                    visible.append(list(range(i)))
                else:
                    w = self.settings.W
                    visible.append([*range(i + 1), *(lv * w + i for lv in range(1, level))])
        return SideBranch(tokens, depths, visible)

    def _seed(self, context: Sequence[int]) -> None:
        """Add the context's n-grams (prompt and output) that are not in the pool yet."""
        n = self.settings.N
        for end in range(max(self._seeded, n), len(context) + 1):
            self.pool.add(context[end - n : end], "context")
        self._seeded = len(context)


def _add_path(tree: TreeProposal, tokens: Sequence[int], origin: str) -> None:
    """Merge a candidate continuation into the tree (shared prefixes become shared nodes)."""
    parent = -1
    for tok in tokens:
        child = next((i for i, (t, p) in enumerate(zip(tree.tokens, tree.parents))
                      if t == tok and p == parent), None)
        if child is None:
            tree.tokens.append(tok)
            tree.parents.append(parent)
            tree.details.append(f"n-gram from the {origin}")
            child = len(tree) - 1
        parent = child


def build(parts: BuildParts) -> LookaheadOracle:
    return LookaheadOracle(**parts.settings)
