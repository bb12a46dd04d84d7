"""Medusa's candidate tree: the heads' top tokens combined into shared-prefix continuations.

Head d proposes its top-k tokens for depth d. A candidate is a path that picks one of them at
each depth; its score is the product of the picked tokens' probabilities. The tree keeps the
`budget` best candidates. A child never scores above its parent, so taking candidates best
first from a heap always yields a tree (each node's parent is already in it). Node order is
by depth, then by score: parents come before children, siblings best first.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

ROOT = -1  # parent index of depth-1 nodes: they follow the pending (last verified) token


@dataclass(frozen=True)
class CandidateTree:
    tokens: tuple[int, ...]
    parents: tuple[int, ...]  # index of each node's parent in this tree, or ROOT
    depths: tuple[int, ...]  # 1 = the token right after the pending one
    scores: tuple[float, ...]  # product of head probabilities along the path

    def __len__(self) -> int:
        return len(self.tokens)

    def path(self, node: int) -> list[int]:
        """Tokens from the root down to `node`, inclusive."""
        out: list[int] = []
        while node != ROOT:
            out.append(self.tokens[node])
            node = self.parents[node]
        return out[::-1]

    def children(self, node: int) -> list[int]:
        return [i for i, p in enumerate(self.parents) if p == node]

    def leaves(self) -> list[int]:
        has_child = set(self.parents)
        return [i for i in range(len(self)) if i not in has_child]


def build_tree(top_tokens: Sequence[Sequence[int]], top_probs: Sequence[Sequence[float]],
               budget: int) -> CandidateTree:
    """The best `budget` candidates from per-depth top-k lists (best first in each list).

    `top_tokens[d][r]` is head d+1's r-th best token, with probability `top_probs[d][r]`.
    """
    if len(top_tokens) != len(top_probs):
        raise ValueError("need as many probability lists as token lists")
    if budget < 0:
        raise ValueError(f"node budget must be >= 0, got {budget}")
    depth_max = len(top_tokens)
    # Heap entries: (-score, tie-break order, rank path); the path names a node uniquely.
    heap: list[tuple[float, int, tuple[int, ...]]] = []
    order = 0

    def push(path: tuple[int, ...], score: float) -> None:
        nonlocal order
        heapq.heappush(heap, (-score, order, path))
        order += 1

    if depth_max:
        for r, p in enumerate(top_probs[0]):
            push((r,), float(p))
    chosen: dict[tuple[int, ...], float] = {}
    while heap and len(chosen) < budget:
        neg, _, path = heapq.heappop(heap)
        chosen[path] = -neg
        depth = len(path)
        if depth < depth_max:
            for r, p in enumerate(top_probs[depth]):
                push((*path, r), -neg * float(p))
    return _flatten(chosen, top_tokens)


def _flatten(chosen: dict[tuple[int, ...], float],
             top_tokens: Sequence[Sequence[int]]) -> CandidateTree:
    paths = sorted(chosen, key=lambda path: (len(path), -chosen[path]))
    index = {path: i for i, path in enumerate(paths)}
    tokens = tuple(int(top_tokens[len(p) - 1][p[-1]]) for p in paths)
    parents = tuple(index[p[:-1]] if len(p) > 1 else ROOT for p in paths)
    return CandidateTree(tokens, parents, tuple(len(p) for p in paths),
                         tuple(chosen[p] for p in paths))
