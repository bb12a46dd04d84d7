"""An n-gram cache over the context, in the manner of llama.cpp's lookup example.

Counts, for n-grams of 1..max_ngram tokens, which token followed them. Drafting extends the
context one token at a time with the most frequent continuation of the longest n-gram seen
often enough, and stops at the first position where no n-gram is confident. A shorter n-gram
says less about what comes next, so it must have been seen more often: one token shorter than
the longest, one more sighting (with max_ngram 4 and min_count 1: a 4-gram once, a 1-gram four
times; llama.cpp's lookup likewise asks more of its short n-grams). In the code-edit bench
(Qwen2.5-Coder-1.5B, 15 prompts, 256 tokens) that took K = 4 from 1.12x to 1.21x of plain
decoding and auto K from 1.51x to 1.55x. (Among equally frequent continuations the oldest
wins; preferring the latest was tried in a replay of those runs and lost.) A corpus file
can seed a static cache that is consulted when the context has no confident answer.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from .base import BuildParts, Proposal, RunContext
from .verbatim import CopyingOracle, check_sizes, verbatim_length

NGram = tuple[int, ...]
# match_length extends the latest this many occurrences of the n-gram: bounded work where a
# phrase repeats hundreds of times.
SOURCES_CHECKED = 8


class _Continuations:
    """What `best` reads: each n-gram's likeliest continuation, for sizes min_n..max_n."""

    min_n: int
    max_n: int

    def best(self, context: Sequence[int], min_count: int, min_share: float):
        """(token, n, count, share) of the longest confident n-gram, or None. An n-gram d
        tokens shorter than the longest needs min_count + d sightings of its continuation."""
        for n in range(min(self.max_n, len(context)), self.min_n - 1, -1):
            top = self._top(tuple(context[-n:]))
            if top is None:
                continue
            token, count, total = top
            share = count / total
            if count >= min_count + self.max_n - n and share >= min_share:
                return token, n, count, share
        return None

    def _top(self, gram: NGram) -> tuple[int, int, int] | None:
        """The n-gram's likeliest continuation (the oldest among equals), its count, and the
        count of all its continuations."""
        raise NotImplementedError


class NGramCache(_Continuations):
    """Continuation counts for n-grams of sizes min_n..max_n; with `positions`, also where
    each max_n-gram was followed (the index of the token after it).

    Each n-gram's likeliest continuation is kept up to date as tokens come, so a lookup reads
    it instead of scanning the counts (a frequent token's 1-gram has hundreds of
    continuations, and a lookup reads up to max_n n-grams): on a fast GPU's 1.2 ms step the
    cache's lookups and indexing were 4% of a step. One plain dict an n-gram, as one Counter
    was (each is an object the garbage collector walks): its continuations' counts under the
    token ids, and under negative keys the total, the likeliest token and its count. A
    Counter's missing key went through Python code, half of the indexing's time."""

    def __init__(self, min_n: int, max_n: int, positions: bool = False) -> None:
        self.min_n, self.max_n = min_n, max_n
        self.stats: dict[NGram, dict[int, int]] = {}
        self.after: dict[NGram, list[int]] | None = defaultdict(list) if positions else None

    def add(self, tokens: Sequence[int], start: int = 0) -> None:
        """Count continuations of every n-gram whose next token lies at index >= start."""
        stats, lo, hi, after = self.stats, self.min_n, self.max_n, self.after
        for nxt in range(max(start, 1), len(tokens)):
            token = tokens[nxt]
            for n in range(lo, min(hi, nxt) + 1):
                gram = tuple(tokens[nxt - n : nxt])
                seen = stats.get(gram)
                if seen is None:
                    stats[gram] = {TOTAL: 1, TOP: token, TOP_COUNT: 1, token: 1}
                else:
                    _count(seen, token)
            if after is not None and nxt >= hi:
                after[tuple(tokens[nxt - hi : nxt])].append(nxt)

    def grams(self) -> Iterable[NGram]:
        return self.stats.keys()

    def _top(self, gram: NGram) -> tuple[int, int, int] | None:
        seen = self.stats.get(gram)
        return None if seen is None else (seen[TOP], seen[TOP_COUNT], seen[TOTAL])


TOTAL, TOP, TOP_COUNT = -1, -2, -3  # an n-gram's own figures, beside its tokens' (ids >= 0)


def _count(seen: dict[int, int], token: int) -> None:
    """One more `token` after an n-gram; its likeliest continuation kept as a Counter's
    most_common(1) gives it: the highest count, the first seen among equals."""
    count = seen.get(token, 0) + 1
    seen[token] = count
    seen[TOTAL] += 1
    top = seen[TOP]
    if token == top:
        seen[TOP_COUNT] = count
    elif count > seen[TOP_COUNT] or (count == seen[TOP_COUNT] and _seen_first(seen, token, top)):
        seen[TOP], seen[TOP_COUNT] = token, count


def _seen_first(seen: dict[int, int], a: int, b: int) -> bool:
    """Whether `a` followed the n-gram before `b` did (dicts keep their keys' order)."""
    return next(key for key in seen if key in (a, b)) == a


class CorpusNGrams(_Continuations):
    """A corpus's continuations, counted once: only each n-gram's likeliest is kept, as a
    tuple. A corpus of 60k tokens has some 140k n-grams, and as Counters the garbage collector
    walked them all on each full pass (about 20 ms, inside a step)."""

    def __init__(self, min_n: int, max_n: int, tokens: Sequence[int]) -> None:
        self.min_n, self.max_n = min_n, max_n
        counted = NGramCache(min_n, max_n)
        counted.add(tokens)
        self.tops = {gram: counted._top(gram) for gram in counted.grams()}

    def _top(self, gram: NGram) -> tuple[int, int, int] | None:
        return self.tops.get(gram)


class NGramOracle(CopyingOracle):
    name = "ngram"
    source = "ngram"
    # A verbatim length holds more often in some texts than in others (code edits more than
    # prose, prose far more than math), so auto K follows the last ~50 judgments per length,
    # not all of them (docs/auto-k.md has the replays that chose it).
    evidence_decay = 0.02
    # Its prior, draft cap and minimum gain are prompt lookup's (verbatim.CopyingOracle).

    def __init__(self, corpus_ids: Sequence[int] | None = None, **settings) -> None:
        super().__init__(**settings)
        check_sizes(self.settings)
        min_ngram, max_ngram = self.settings.min_ngram, self.settings.max_ngram
        self._static = CorpusNGrams(min_ngram, max_ngram, corpus_ids or ())
        self._dynamic = NGramCache(min_ngram, max_ngram, positions=True)
        self._counted = 0

    def start(self, run: RunContext) -> None:
        """The prompt is counted here, with the run's prompt processing (its prefill time),
        as suffix decoding indexes its prompt and a draft model reads it: counted at the
        first lookup instead, 16 streams' prompts took 5 ms of a step that is timed against
        plain decoding's."""
        super().start(run)
        self._dynamic = NGramCache(self.settings.min_ngram, self.settings.max_ngram, positions=True)
        self._counted = 0
        self._index(run.prompt_ids)

    def observe(self, context: Sequence[int]) -> None:
        """Nothing yet: the context's new tokens are counted when it is next asked. A batch
        that rests asks its streams every few steps only; counted a token at a time after
        each step, a batch of 16 streams' new tokens cost 17 us each, a few at a time 7 us."""

    def _index(self, context: Sequence[int]) -> None:
        if self._counted < len(context):
            self._dynamic.add(context, self._counted)
            self._counted = len(context)

    def match_length(self, context: Sequence[int]) -> int | None:
        """How far the context's end repeats, verbatim, an earlier passage that the first
        guess followed: at least the n of its n-gram (0: no guess). Auto K learns how often
        guesses after each length hold, as it does for prompt lookup. (The n alone, first
        used, is nearly always max_ngram, so one early failure of a 4-gram guess condemned
        them all: a summary copying its article ran plain to the end, at 0.83 of the best
        fixed K. The verbatim length grows as the copy goes on, whatever was drafted.)"""
        self._index(context)
        hit = self._dynamic.best(context, self.settings.min_count, self.settings.min_share)
        if hit is None:
            hit = self._static.best(context, 1, self.settings.min_share)
            return hit[1] if hit else 0
        token, n = hit[0], hit[1]
        if n < self.settings.max_ngram:
            return n  # positions are kept for max_ngram-grams only
        ends = self._dynamic.after.get(tuple(context[-n:]), [])[-SOURCES_CHECKED:]
        return max((verbatim_length(context, end, n) for end in ends
                    if end < len(context) and context[end] == token), default=n)

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        self._index(context)
        work = list(context)
        tokens: list[int] = []
        details: list[str | None] = []
        while len(tokens) < k:
            hit = self._dynamic.best(work, self.settings.min_count, self.settings.min_share)
            label = "context"
            if hit is None:
                hit, label = self._static.best(work, 1, self.settings.min_share), "corpus"
            if hit is None:
                break
            token, n, count, share = hit
            tokens.append(token)
            details.append(f"{label} {n}-gram, seen {count}x ({share:.0%})")
            work.append(token)
        return Proposal(tokens, self.source, details=details)


def build(parts: BuildParts) -> NGramOracle:
    return NGramOracle(parts.inputs.get("ngram_corpus"), **parts.settings)
