"""Oracles in isolation: what they propose, and where it came from."""

from __future__ import annotations

import gc
import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specviz.engines.errors import IncompatibleModels
from specviz.engines.oracles.base import RunContext
from specviz.engines.oracles.draft import check_compatible
from specviz.engines.oracles.ngram import CorpusNGrams, NGramCache, NGramOracle
from specviz.engines.oracles.prompt_lookup import PromptLookupOracle
from specviz.engines.sampling import SamplingParams


def run_context(prompt_ids, chars=None):
    chars = chars or tuple((i * 2, i * 2 + 2) for i in range(len(prompt_ids)))
    return RunContext(tuple(prompt_ids), "", chars, SamplingParams(), np.random.default_rng(0))


def test_prompt_lookup_proposes_what_followed_the_latest_match():
    prompt = [5, 6, 7, 8, 9, 1, 2, 6, 7, 3, 4]
    oracle = PromptLookupOracle(max_ngram=2, min_ngram=1)
    oracle.start(run_context(prompt))
    context = [*prompt, 6, 7]  # "6 7" occurs at 1..2 and at 7..8: the latest wins
    proposal = oracle.propose(context, 3)
    assert proposal.tokens == [3, 4, 6]
    spans = proposal.spans
    assert [s.tok_start for s in spans] == [9, 10, 11]
    assert (spans[0].chr_start, spans[0].chr_end) == (18, 20)  # inside the prompt: chars
    assert spans[2].chr_start is None  # copied from generated text: no prompt chars


def test_prompt_lookup_can_copy_after_the_first_match_instead():
    prompt = [5, 6, 7, 8, 9, 1, 2, 6, 7, 3, 4]
    oracle = PromptLookupOracle(max_ngram=2, min_ngram=1, earliest=True)
    oracle.start(run_context(prompt))
    context = [*prompt, 6, 7]
    assert oracle.propose(context, 3).tokens == [8, 9, 1]  # "6 7" first occurs at 1..2
    context += [3, 6, 7]  # a third "6 7", indexed as the context grows: the first still wins
    assert oracle.propose(context, 3).tokens == [8, 9, 1]
    latest = PromptLookupOracle(max_ngram=2, min_ngram=1)
    latest.start(run_context(prompt))
    assert latest.propose(context, 3).tokens == [3, 6, 7]


def test_prompt_lookup_prefers_the_longest_ngram():
    prompt = [1, 2, 3, 9, 7, 3, 8]
    oracle = PromptLookupOracle(max_ngram=3, min_ngram=1)
    oracle.start(run_context(prompt))
    assert oracle.propose([*prompt, 1, 2, 3], 2).tokens == [9, 7]  # not "3 -> 8"
    assert oracle.propose([*prompt, 4], 2).tokens == []  # no match at all


def test_prompt_lookup_finds_the_answer_in_a_real_prompt(tiny_backend):
    code = "def scale(values, factor):\n    return [v * factor for v in values]\n"
    prompt_text = f"Add type hints.\n{code}\nAnswer:\n"
    ids = tiny_backend.tokenize(prompt_text, False)
    from specviz.engines.loop.session import _token_chars

    chars = _token_chars(tiny_backend, ids)
    oracle = PromptLookupOracle(max_ngram=3)
    oracle.start(RunContext(tuple(ids), prompt_text, chars, SamplingParams(),
                            np.random.default_rng(0)))
    # The answer starts by repeating the code: its first tokens match the prompt's.
    j = next(i for i, (a, _) in enumerate(chars) if a >= prompt_text.index("scale"))
    proposal = oracle.propose(ids + ids[j - 1 : j + 2], 6)
    assert proposal.tokens == ids[j + 2 : j + 8]
    assert [s.tok_start for s in proposal.spans] == list(range(j + 2, j + 8))
    first = proposal.spans[0]
    assert prompt_text[first.chr_start:first.chr_end] == tiny_backend.detokenize(
        [proposal.tokens[0]])
    assert "3-gram" in proposal.details[0]


def test_ngram_proposes_the_most_frequent_continuation():
    oracle = NGramOracle(max_ngram=2, min_ngram=1, min_share=0.5)
    context = [1, 2, 3, 1, 2, 3, 1, 2, 4, 1]
    oracle.start(run_context(context))
    assert oracle.propose(context, 3).tokens == [2, 3, 1]


def test_ngram_stops_where_it_is_not_confident():
    oracle = NGramOracle(max_ngram=1, min_ngram=1, min_share=0.6)
    context = [1, 2, 1, 3, 1]  # 1 -> 2 or 3: 50% each
    oracle.start(run_context(context))
    assert oracle.propose(context, 4).tokens == []


def test_ngram_match_length_is_the_verbatim_repeat_its_first_guess_extends():
    oracle = NGramOracle(max_ngram=3, min_ngram=1, min_share=0.6)
    context = [1, 2, 3, 1, 2, 3, 1, 2]
    oracle.start(run_context(context))
    assert oracle.match_length(context) == 5  # (3, 1, 2) -> 3, and [1, 2] before it too
    # (9, 1, 2) was followed by 3 once, by 4 twice: the guess (4) follows the short repeats
    context = [5, 9, 1, 2, 3, 7, 9, 1, 2, 4, 6, 9, 1, 2, 4, 8, 5, 9, 1, 2]
    oracle.start(run_context(context))
    assert oracle.propose(context, 1).tokens == [4] and oracle.match_length(context) == 3
    shorter = NGramOracle(max_ngram=3, min_ngram=1, min_count=1)
    context = [7, 1, 2, 8, 6, 1, 2, 8, 3, 1, 2]  # no 3-gram seen before: the 2-gram's n
    shorter.start(run_context(context))
    assert shorter.match_length(context) == 2
    unsure = NGramOracle(max_ngram=1, min_ngram=1, min_share=0.6)
    unsure.start(run_context([1, 2, 1, 3, 1]))
    assert unsure.match_length([1, 2, 1, 3, 1]) == 0  # 1 -> 2 or 3: not confident


def test_ngram_asks_more_sightings_of_shorter_ngrams():
    oracle = NGramOracle(max_ngram=3, min_ngram=1)
    context = [5, 6, 7, 8, 9, 6, 7]  # (6, 7) -> 8 seen once; (5, 6, 7) never again
    oracle.start(run_context(context))
    assert oracle.propose(context, 2).tokens == []  # a 2-gram needs two sightings here
    twice = [5, 6, 7, 8, 1, 6, 7, 8, 2, 6, 7]  # now twice
    oracle.start(run_context(twice))
    assert oracle.propose(twice, 1).tokens == [8]
    longest = [5, 6, 7, 8, 9, 5, 6, 7]  # the 3-gram (5, 6, 7) -> 8: once is enough
    oracle.start(run_context(longest))
    assert oracle.propose(longest, 1).tokens == [8]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=2, max_size=60), st.integers(1, 6),
       st.integers(0, 2**16))
def test_ngram_counts_the_tokens_since_it_was_last_asked_whenever_it_is_asked(
        tokens, every, seed):
    """A resting batch asks its streams every few steps only, and the cache counts what came
    since when asked: asked every `every` steps, its answers are those of a cache asked at
    every step, each token counted once."""
    steps = random.Random(seed)
    prompt, rest = tokens[:2], tokens[2:]
    asked_always, asked_now_and_then = (NGramOracle(max_ngram=3, min_ngram=1) for _ in "ab")
    for oracle in (asked_always, asked_now_and_then):
        oracle.start(run_context(prompt))
    context, step = list(prompt), 0
    while rest:
        taken = steps.randint(1, 3)  # a step keeps its accepted guesses and one token
        context += rest[:taken]
        rest = rest[taken:]
        for oracle in (asked_always, asked_now_and_then):
            oracle.observe(context)
        step += 1
        expected = (asked_always.match_length(context), asked_always.propose(context, 4).tokens)
        if step % every == 0:
            assert (asked_now_and_then.match_length(context),
                    asked_now_and_then.propose(context, 4).tokens) == expected
    counted = NGramCache(1, 3, positions=True)
    counted.add(context)
    for oracle in (asked_always, asked_now_and_then):
        oracle.match_length(context)
        assert oracle._dynamic.stats == counted.stats
        assert oracle._dynamic.after == counted.after


def test_ngram_counts_the_prompt_when_it_starts():
    """The prompt is counted with the run's prompt processing, not at a step's first
    lookup (a step is timed against plain decoding's); a new run starts a new count."""
    oracle = NGramOracle(max_ngram=3, min_ngram=1)
    prompt = [1, 2, 3, 1, 2, 3, 4]
    oracle.start(run_context(prompt))
    counted = NGramCache(1, 3, positions=True)
    counted.add(prompt)
    assert oracle._dynamic.stats == counted.stats and oracle._counted == len(prompt)
    oracle.start(run_context([5, 6]))
    assert set(oracle._dynamic.stats) == {(5,)} and oracle._counted == 2


def test_prompt_lookup_indexes_the_prompt_when_it_starts():
    """As the n-gram cache counts it: at start, the index a first lookup would build."""
    prompt = [4, 5, 6, 4, 5, 7, 4, 5]
    started, asked = PromptLookupOracle(max_ngram=2, min_ngram=1), PromptLookupOracle(
        max_ngram=2, min_ngram=1)
    started.start(run_context(prompt))
    assert started._indexed == len(prompt) - 1
    asked._extend_index(prompt)
    assert started._index == asked._index
    assert started.propose(prompt, 2).tokens == [7, 4]


def test_ngram_corpus_seeds_a_static_cache():
    oracle = NGramOracle(max_ngram=2, corpus_ids=[7, 8, 9, 7, 8, 9])
    oracle.start(run_context([1, 7]))
    proposal = oracle.propose([1, 7], 3)
    assert proposal.tokens == [8, 9, 7] and "corpus" in proposal.details[0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=10, max_size=80),
       st.lists(st.integers(0, 3), max_size=8), st.integers(1, 3),
       st.sampled_from([0.0, 0.3, 0.6]), st.integers(1, 4))
def test_a_corpus_keeps_only_each_n_grams_likeliest_continuation_and_answers_the_same(
        corpus, context, min_count, min_share, max_n):
    counted = NGramCache(1, max_n)
    counted.add(corpus)
    assert (CorpusNGrams(1, max_n, corpus).best(context, min_count, min_share)
            == counted.best(context, min_count, min_share))



@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=2, max_size=120), st.integers(1, 119),
       st.integers(1, 4))
def test_each_n_grams_kept_likeliest_continuation_is_what_counting_them_all_gives(
        tokens, split, max_n):
    """The cache keeps each n-gram's top continuation as tokens come; counted afresh with a
    Counter, the highest count, the first seen among equals, must be the same, whichever
    way the tokens were added (all at once, or one by one as a run grows)."""
    cache = NGramCache(1, max_n)
    cut = min(split, len(tokens))
    cache.add(tokens[:cut])
    for end in range(cut + 1, len(tokens) + 1):
        cache.add(tokens[:end], end - 1)
    counts: dict[tuple, Counter] = {}
    for nxt in range(1, len(tokens)):
        for n in range(1, min(max_n, nxt) + 1):
            counts.setdefault(tuple(tokens[nxt - n:nxt]), Counter())[tokens[nxt]] += 1
    assert set(cache.grams()) == set(counts)
    for gram, counter in counts.items():
        token, count = counter.most_common(1)[0]
        assert cache._top(gram) == (token, count, sum(counter.values()))

def test_a_corpus_gives_the_garbage_collector_nothing_to_walk():
    """A full collection walks every tracked object: a 60k-token corpus as Counters took
    20 ms more a pass, inside a step."""
    rng = random.Random(0)
    corpus = [rng.randrange(500) for _ in range(20_000)]
    cache = CorpusNGrams(1, 4, corpus)
    gc.collect()
    tracked = sum(gc.is_tracked(top) for top in cache.tops.values())
    assert len(cache.tops) > 20_000 and tracked == 0


def test_bad_ngram_sizes_are_refused():
    with pytest.raises(ValueError):
        PromptLookupOracle(max_ngram=1, min_ngram=2)


class FakeVocab:
    def __init__(self, words, eos=frozenset({0})):
        self.words, self.eos_ids = words, eos

    @property
    def n_vocab(self):
        return len(self.words)

    def token_text_raw(self, i):
        self.looked_up = getattr(self, "looked_up", 0) + 1
        return self.words[i]


def test_draft_with_another_tokenizer_is_refused_saying_what_differs():
    target = FakeVocab(["<eos>", "a", "b", "c"])
    with pytest.raises(IncompatibleModels, match=r"token 2: 'x' .*'b'"):
        check_compatible(target, FakeVocab(["<eos>", "a", "x", "c"]))
    with pytest.raises(IncompatibleModels, match="300 tokens, the target's 4"):
        check_compatible(target, FakeVocab(["w"] * 300))
    check_compatible(target, FakeVocab(["<eos>", "a", "b", "c", "pad"]))  # padding is fine


def test_a_checked_vocabulary_is_not_scanned_again():
    target, draft = FakeVocab(["<eos>", "a", "b"]), FakeVocab(["<eos>", "a", "b"])
    check_compatible(target, draft)
    assert (target.looked_up, draft.looked_up) == (3, 3)
    check_compatible(target, draft)
    assert (target.looked_up, draft.looked_up) == (3, 3)
    with pytest.raises(IncompatibleModels, match="token 1"):
        check_compatible(target, FakeVocab(["<eos>", "z", "b"]))
