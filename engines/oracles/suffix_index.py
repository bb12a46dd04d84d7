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
import struct
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

GRAMS = 4  # n-grams up to this size are indexed; longer patterns filter a 4-gram's places
# A short pattern (a common token) occurs thousands of times in a large memory: its
# continuations are counted over its latest LATEST occurrences (a short match drafts a token
# or two, whose odds that many places settle).
LATEST = 1024
GROWN_KEPT = 4096  # growths remembered between changes of the index
# A place, (sequence, index after the pattern), is kept as one integer, packed with the
# others of its n-gram in a bytearray (the token after each in another): a memory of 60k
# tokens has some 140k n-grams, and the garbage collector walks every list, tuple and
# array.array it tracks on each full pass (about 100 ms, inside a step); a bytearray it
# does not track.
SEQ_SHIFT = 32
END_MASK = (1 << SEQ_SHIFT) - 1
PACKED_PLACE, PACKED_TOKEN = struct.Struct("q"), struct.Struct("i")
NOTHING_YET = PACKED_TOKEN.pack(-1)  # token ids are never negative


def place(seq: int, end: int) -> int:
    return seq << SEQ_SHIFT | end


def seq_end(p: int) -> tuple[int, int]:
    return p >> SEQ_SHIFT, p & END_MASK


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


def _latest(column: bytearray, kind: str) -> list[int]:
    """The last LATEST values of a packed column (its views released: it grows again)."""
    with memoryview(column) as raw, raw.cast(kind) as values:
        return values[-LATEST:].tolist()


def _latest_followed(column: bytearray, nexts: bytearray) -> int | None:
    """The latest place of a packed column that a token has followed (None: none has)."""
    with memoryview(column) as raw, raw.cast("q") as places, \
            memoryview(nexts) as raw_next, raw_next.cast("i") as following:
        for i in range(len(following) - 1, max(-1, len(following) - 1 - LATEST), -1):
            if following[i] >= 0:
                return places[i]
    return None


class SuffixIndex:
    """Sequences of tokens and where each n-gram (n <= GRAMS) occurs in them."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.sequences: list[list[int]] = []
        self._after: dict[tuple[int, ...], bytearray] = {}  # places (`place`), packed
        # The token after each of those places (-1: none yet), alongside, so that a growth
        # counts a frequent pattern's continuations in C; and, per sequence, the entries its
        # next token fills.
        self._next: dict[tuple[int, ...], bytearray] = {}
        self._open: list[list[tuple[bytearray, int]]] = []
        # Growths by (pattern, limit, min_prob, tree), valid until the index changes:
        # the memory of earlier runs does not change during a run, and its common short
        # patterns (a frequent token: up to LATEST places) come back step after step.
        self._grown: dict[tuple, Speculation] = {}

    def __len__(self) -> int:
        return sum(len(s) for s in self.sequences)

    def add(self, tokens: Sequence[int]) -> int:
        """A new sequence; its id."""
        self.sequences.append([])
        self._open.append([])
        self.extend(len(self.sequences) - 1, tokens)
        return len(self.sequences) - 1

    def extend(self, seq: int, tokens: Sequence[int]) -> None:
        """More tokens at the end of sequence `seq` (a run's output, as it grows)."""
        s = self.sequences[seq]
        self._grown.clear()
        after, following = self._after, self._next
        for token in tokens:
            for nexts, at in self._open[seq]:
                PACKED_TOKEN.pack_into(nexts, at, token)
            s.append(token)
            end = len(s)
            here = PACKED_PLACE.pack(place(seq, end))
            opened = self._open[seq] = []
            for n in range(1, min(GRAMS, end) + 1):
                key = tuple(s[end - n:])
                places = after.get(key)
                if places is None:
                    places = after[key] = bytearray()
                    following[key] = bytearray()
                nexts = following[key]
                places += here
                opened.append((nexts, len(nexts)))
                nexts += NOTHING_YET

    def speculate(self, context: Sequence[int], max_tokens, min_token_prob: float,
                  tree: bool, live: int | None = None, beat: float = 0.0) -> Speculation:
        """The best-scoring speculation over every pattern length that occurs. `max_tokens`
        maps a match length to the most tokens its speculation may hold. `live` names the
        sequence that is the context itself: the pattern's place at its end is where the
        guess goes, not a place that ended there, and is not counted. Only a speculation
        that scores above `beat` (another index's best) is looked for: where none does, an
        empty one comes back."""
        best, bar = Speculation(), beat
        # Longest first: a tie goes to the longer match, and a shorter run whose limit is at
        # most the bar cannot beat it (each token counts at most 1), so the frequent short
        # patterns, with the most places, are mostly never grown.
        for shortest, places, nexts, limits in reversed(list(
                self._runs(context, max_tokens, live))):
            limit = max(limits.values())
            if limit <= bar:
                continue
            spec = self._grown_from(context, shortest, places, nexts, limit, min_token_prob,
                                    tree, live)
            if not spec.nodes or spec.score <= bar:
                continue
            # Every length of the run whose limit holds the whole speculation grows the same
            # one: the longest such wins, as a tie goes to the longer match.
            spec.match = max(m for m, limit in limits.items() if limit >= len(spec.nodes))
            best, bar = spec, spec.score
        return best

    def longest(self, context: Sequence[int]) -> tuple[int, int | None]:
        """The longest pattern at the context's end (up to max_depth - 1 tokens) that some
        token has followed, and the latest such place (0, None: none has). What a copy would
        continue, found without growing a speculation: most steps send nothing, and auto K
        needs only this to say so. The context's own place at the end of the run's own index
        has no token after it yet, so it does not count."""
        top = min(GRAMS, len(context), self.max_depth - 1)
        for n in range(top, 0, -1):
            key = tuple(context[len(context) - n:])
            column = self._after.get(key)
            latest = None if column is None else _latest_followed(column, self._next[key])
            if latest is None:
                continue
            if n < top:  # n + 1 tokens were never followed: no longer pattern was either
                return n, latest
            places = [p for p, token in zip(_latest(column, "q"), _latest(self._next[key], "i"))
                      if token >= 0]
            break
        else:
            return 0, None
        # A longer pattern's places are among these, filtered by the token before each.
        m, longest = n, min(len(context), self.max_depth - 1)
        while m < longest:
            longer, _ = self._places(context, m + 1, places)
            if not longer:
                break
            places, m = longer, m + 1
        return m, places[-1]

    def _runs(self, context: Sequence[int], max_tokens, live: int | None):
        """The pattern lengths that occur, grouped into runs that occur in the same places
        (a long copy's lengths mostly do: one growth serves them all), each with its
        lengths' draft limits. Growing once per run rather than once per length keeps a step's
        drafting time flat as matches and the memory grow."""
        places: list[int] | None = None
        run: list[int] | None = None
        run_nexts: list[int] | None = None
        limits: dict[int, int] = {}
        shortest = 1  # the run's shortest pattern: its tokens name the run's places
        longest = min(len(context), self.max_depth - 1)
        here = None if live is None else place(live, len(self.sequences[live]))
        for m in range(1, longest + 1):
            places, nexts = self._places(context, m, places)
            if here is not None and here in places:  # only the run's own index holds it
                i = places.index(here)
                places = places[:i] + places[i + 1:]
                nexts = None if nexts is None else nexts[:i] + nexts[i + 1:]
            if not places:
                break
            if places != run:
                if limits:
                    yield shortest, run, run_nexts, limits
                run, run_nexts, limits, shortest = places, nexts, {}, m
            limit = min(max_tokens(m), self.max_depth - m)
            if limit > 0:
                limits[m] = limit
        if limits:
            yield shortest, run, run_nexts, limits

    def _places(self, context: Sequence[int], m: int, shorter: list[int] | None
                ) -> tuple[list[int], list[int] | None]:
        """Where the context's last m tokens occur (`place`: the sequence, the index after
        them), and for indexed n-grams the token after each place (-1: none yet)."""
        if m <= GRAMS:
            key = tuple(context[len(context) - m:])
            places = self._after.get(key)
            if places is None:
                return [], []
            return _latest(places, "q"), _latest(self._next[key], "i")
        token, sequences = context[-m], self.sequences
        return [p for p in shorter or () if (end := p & END_MASK) >= m
                and sequences[p >> SEQ_SHIFT][end - m] == token], None

    def _grown_from(self, context: Sequence[int], m: int, places: list[int],
                    nexts: list[int] | None, limit: int, min_prob: float, tree: bool,
                    live: int | None) -> Speculation:
        """`_grow`, remembered: the places are the index's for the context's last m tokens.
        The run's own index (`live`) changes every step: nothing of it is kept."""
        if live is not None:
            return self._grow(places, nexts, limit, min_prob, tree)
        key = (tuple(context[len(context) - m:]), limit, min_prob, tree)
        spec = self._grown.get(key)
        if spec is None:
            if len(self._grown) >= GROWN_KEPT:
                self._grown.clear()
            spec = self._grown[key] = self._grow(places, nexts, limit, min_prob, tree)
        return dataclasses.replace(spec, nodes=list(spec.nodes))  # its match is set apart

    def _grow(self, places: Sequence[int], nexts: Sequence[int] | None, limit: int,
              min_prob: float, tree: bool) -> Speculation:
        """Best-first, as the reference grows it from a trie of the places' continuations
        (a node's probability: its places over the pattern's), but a node's children are
        counted only when the node is taken, and at most `limit` are: a frequent pattern has
        up to LATEST places, on most steps of a run, and a step that drafts nothing must
        cost what a plain one does. `nexts`, where given, is the token after each place."""
        total = len(places)
        spec = Speculation(occurrences=total)
        heap: list[tuple] = []
        order = 0  # ties: the likelier child first, then the first seen

        def push(members: Sequence[int], following: Sequence[int], parent: int,
                 depth: int) -> None:
            nonlocal order
            counts = Counter(following)
            counts.pop(-1, None)
            likely = sorted([(token, count) for token, count in counts.items()
                             if count / total >= min_prob], key=lambda kv: -kv[1])
            for token, count in likely if tree else likely[:1]:
                heapq.heappush(heap, (-count / total, order, token, members, following,
                                      parent, depth))
                order += 1

        push(places, self._following(places, 0) if nexts is None else nexts, -1, 0)
        while heap and len(spec.nodes) < limit:
            neg_prob, _, token, members, following, parent, depth = heapq.heappop(heap)
            latest = len(following) - 1 - following[::-1].index(token)
            seq, end = seq_end(members[latest])
            spec.nodes.append(Node(token, parent, -neg_prob, (seq, end + depth)))
            if len(spec.nodes) < limit:
                mine = [p for p, t in zip(members, following) if t == token]
                push(mine, self._following(mine, depth + 1), len(spec.nodes) - 1, depth + 1)
        return spec

    def _following(self, places: Sequence[int], depth: int) -> list[int]:
        """The token `depth` after each place (-1: the sequence ends before it)."""
        sequences, tokens = self.sequences, []
        for p in places:
            s, at = sequences[p >> SEQ_SHIFT], (p & END_MASK) + depth
            tokens.append(s[at] if at < len(s) else -1)
        return tokens
