"""Suffix decoding's trees (SuffixDecoding, Oliaro et al. 2024; Arctic Inference's
`suffix_decoding`), kept as an index of token positions instead of a suffix tree.

A suffix tree of depth D over some sequences answers one question for speculation: for the
last m tokens of the context (a pattern), in how many places do they occur, and what follows
each, up to D - m tokens. Here every sequence is kept whole, with the positions after each
n-gram of up to GRAMS tokens; a longer pattern's occurrences are the shorter one's filtered
by the token before them. The counts are the tree's: an occurrence at the very end of a
sequence counts, with nothing after it, so a continuation's probability is its share of all
occurrences. (The reference counts the pattern's own place at the end of the context too,
which halves every probability of a copy seen once before; here it is left out: it is where
the guess goes, not evidence about it.)

From a pattern's occurrences a speculation is grown as the reference grows it: best-first
by probability (a node's occurrences over the pattern's), every token at least
`min_token_prob` likely, at most `max_tokens` of them; as a tree, or as the single likeliest
chain. Its score is the sum of its tokens' probabilities (the tokens it expects accepted).
Every pattern length that occurs gets a speculation of its own (longer matches may draft
more: `max_tokens` grows with the match), and the best score wins, the longer match on a tie.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

GRAMS = 4  # n-grams up to this size are indexed; longer patterns filter a 4-gram's places
# A short pattern (a common token) occurs thousands of times in a large memory: its
# continuations are counted over its latest LATEST occurrences (a short match drafts a token
# or two, whose odds that many places settle).
LATEST = 1024
GROWN_KEPT = 4096  # growths remembered between changes of the index


@dataclass
class Node:
    """A token of a speculation: its parent (-1: the pattern), how likely, and one place
    it was seen (the latest), as (sequence, index of the token)."""

    token: int
    parent: int
    prob: float
    seen_at: tuple[int, int]


@dataclass
class Speculation:
    nodes: list[Node] = field(default_factory=list)
    match: int = 0  # the pattern's length
    occurrences: int = 0  # of the pattern

    @property
    def score(self) -> float:
        return sum(n.prob for n in self.nodes)


class SuffixIndex:
    """Sequences of tokens and where each n-gram (n <= GRAMS) occurs in them."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.sequences: list[list[int]] = []
        self._after: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        # Growths by (pattern, limit, min_prob, tree), valid until the index changes:
        # the memory of earlier runs does not change during a run, and its common short
        # patterns (a frequent token: up to LATEST places) come back step after step.
        self._grown: dict[tuple, Speculation] = {}

    def __len__(self) -> int:
        return sum(len(s) for s in self.sequences)

    def add(self, tokens: Sequence[int]) -> int:
        """A new sequence; its id."""
        self.sequences.append([])
        self.extend(len(self.sequences) - 1, tokens)
        return len(self.sequences) - 1

    def extend(self, seq: int, tokens: Sequence[int]) -> None:
        """More tokens at the end of sequence `seq` (a run's output, as it grows)."""
        s = self.sequences[seq]
        self._grown.clear()
        for token in tokens:
            s.append(token)
            end = len(s)
            for n in range(1, min(GRAMS, end) + 1):
                self._after.setdefault(tuple(s[end - n:]), []).append((seq, end))

    def speculate(self, context: Sequence[int], max_tokens, min_token_prob: float,
                  tree: bool, live: int | None = None) -> Speculation:
        """The best-scoring speculation over every pattern length that occurs. `max_tokens`
        maps a match length to the most tokens its speculation may hold. `live` names the
        sequence that is the context itself: the pattern's place at its end is where the
        guess goes, not a place that ended there, and is not counted."""
        best = Speculation()
        for shortest, places, limits in self._runs(context, max_tokens, live):
            spec = self._grown_from(context, shortest, places, max(limits.values()),
                                    min_token_prob, tree, live)
            if not spec.nodes or spec.score < best.score:
                continue
            # Every length of the run whose limit holds the whole speculation grows the same
            # one: the longest such wins, as a tie goes to the longer match.
            spec.match = max(m for m, limit in limits.items() if limit >= len(spec.nodes))
            best = spec
        return best

    def _runs(self, context: Sequence[int], max_tokens, live: int | None):
        """The pattern lengths that occur, grouped into runs that occur in the same places
        (a long copy's lengths mostly do: one growth serves them all), each with its
        lengths' draft limits. Growing once per run rather than once per length keeps a step's
        drafting time flat as matches and the memory grow."""
        places: list[tuple[int, int]] | None = None
        run: list[tuple[int, int]] | None = None
        limits: dict[int, int] = {}
        shortest = 1  # the run's shortest pattern: its tokens name the run's places
        longest = min(len(context), self.max_depth - 1)
        here = None if live is None else (live, len(self.sequences[live]))
        for m in range(1, longest + 1):
            places = self._places(context, m, places)
            if here is not None:  # only the run's own index holds the context itself
                places = [p for p in places if p != here]
            if not places:
                break
            if places != run:
                if limits:
                    yield shortest, run, limits
                run, limits, shortest = places, {}, m
            limit = min(max_tokens(m), self.max_depth - m)
            if limit > 0:
                limits[m] = limit
        if limits:
            yield shortest, run, limits

    def _places(self, context: Sequence[int], m: int,
                shorter: list[tuple[int, int]] | None) -> list[tuple[int, int]]:
        """Where the context's last m tokens occur: (sequence, index after them)."""
        if m <= GRAMS:
            return self._after.get(tuple(context[len(context) - m:]), [])[-LATEST:]
        token = context[-m]
        return [(seq, end) for seq, end in shorter or ()
                if end - m >= 0 and self.sequences[seq][end - m] == token]

    def _grown_from(self, context: Sequence[int], m: int, places: list[tuple[int, int]],
                    limit: int, min_prob: float, tree: bool, live: int | None) -> Speculation:
        """`_grow`, remembered: the places are the index's for the context's last m tokens.
        The run's own index (`live`) changes every step: nothing of it is kept."""
        if live is not None:
            return self._grow(places, 0, limit, min_prob, tree)
        key = (tuple(context[len(context) - m:]), limit, min_prob, tree)
        spec = self._grown.get(key)
        if spec is None:
            if len(self._grown) >= GROWN_KEPT:
                self._grown.clear()
            spec = self._grown[key] = self._grow(places, 0, limit, min_prob, tree)
        return dataclasses.replace(spec, nodes=list(spec.nodes))  # its match is set apart

    def _grow(self, places: list[tuple[int, int]], m: int, limit: int, min_prob: float,
              tree: bool) -> Speculation:
        if limit == 1:
            return self._grow_one(places, m, min_prob)
        return self._grow_trie(places, m, limit, min_prob, tree)

    def _grow_one(self, places: list[tuple[int, int]], m: int, min_prob: float) -> Speculation:
        """What `_grow_trie` grows with room for one token, counted without a trie: a one-token
        match of a frequent token has up to LATEST places, on most steps of a run, and a step
        that drafts nothing must cost what a plain one does."""
        counts: dict[int, int] = {}
        latest: dict[int, tuple[int, int]] = {}
        sequences = self.sequences
        for seq, end in places:
            s = sequences[seq]
            if end < len(s):
                token = s[end]
                counts[token] = counts.get(token, 0) + 1
                latest[token] = (seq, end)
        spec = Speculation(match=m, occurrences=len(places))
        if counts:
            token = max(counts, key=counts.__getitem__)  # the first seen among equals
            prob = counts[token] / len(places)
            if prob >= min_prob:
                spec.nodes.append(Node(token, -1, prob, latest[token]))
        return spec

    def _grow_trie(self, places: list[tuple[int, int]], m: int, limit: int, min_prob: float,
                   tree: bool) -> Speculation:
        total = len(places)
        trie = _Trie()
        for seq, end in places:  # oldest first: a node's place ends as its latest
            s = self.sequences[seq]
            trie.insert(s, seq, end, min(len(s), end + limit))
        spec = Speculation(match=m, occurrences=total)
        heap: list[tuple[float, int, _Trie, int]] = []
        order = 0  # ties: the likelier child first, then as inserted

        def push(node: _Trie, parent: int) -> None:
            nonlocal order
            children = sorted(node.children.items(), key=lambda kv: -kv[1].count)
            for _token, child in children if tree else children[:1]:
                if child.count / total >= min_prob:
                    heapq.heappush(heap, (-child.count / total, order, child, parent))
                    order += 1

        push(trie, -1)
        while heap and len(spec.nodes) < limit:
            neg_prob, _, node, parent = heapq.heappop(heap)
            spec.nodes.append(Node(node.token, parent, -neg_prob, node.seen_at))
            push(node, len(spec.nodes) - 1)
        return spec


class _Trie:
    __slots__ = ("children", "count", "seen_at", "token")

    def __init__(self, token: int = -1) -> None:
        self.token = token
        self.count = 0
        self.children: dict[int, _Trie] = {}
        self.seen_at = (-1, -1)

    def insert(self, s: list[int], seq: int, start: int, stop: int) -> None:
        node = self
        node.count += 1
        for i in range(start, stop):
            node = node.children.setdefault(s[i], _Trie(s[i]))
            node.count += 1
            node.seen_at = (seq, i)
