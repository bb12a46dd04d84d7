"""Suffix decoding: its trees' counts, lossless runs on both backends, memory across runs."""

from __future__ import annotations

import gc
import heapq
import json
import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_session import CODE_EDIT, run, tokens_of

from specviz.app.cli.main import main
from specviz.engines import events as ev
from specviz.engines.bench.compare import check_against_plain, compare
from specviz.engines.oracles import make_oracle
from specviz.engines.oracles.suffix_index import (
    GRAMS,
    Node,
    Speculation,
    SuffixIndex,
    place,
    seq_end,
)
from specviz.engines.oracles.suffix_memory import SuffixMemory, memory_path
from specviz.engines.sampling import SamplingParams

A = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]


def nodes(spec):
    return [(n.token, n.parent, round(n.prob, 3)) for n in spec.nodes]


# ---------------------------------------------------------------- the trees


def test_a_match_drafts_what_followed_it_with_its_share_of_the_places():
    index = SuffixIndex(max_depth=24)
    index.add([*A, 11, 12, *A, 13])
    spec = index.speculate([7, 8, 9, 10], lambda m: m, 0.1, tree=True)
    assert (spec.match, spec.occurrences) == (4, 2)
    # 10 is followed by 11 once and 13 once: a tree of both, likeliest first
    assert nodes(spec) == [(11, -1, 0.5), (13, -1, 0.5), (12, 0, 0.5), (1, 2, 0.5)]
    chain = index.speculate([7, 8, 9, 10], lambda m: m, 0.1, tree=False)
    assert nodes(chain) == [(11, -1, 0.5), (12, 0, 0.5), (1, 1, 0.5), (2, 2, 0.5)]
    assert chain.score == pytest.approx(2.0)


def test_a_place_at_the_end_of_a_sequence_counts_with_nothing_after_unless_it_is_the_context():
    index = SuffixIndex(max_depth=24)
    seq = index.add([5, 6, 7, 0, 5, 6])
    spec = index.speculate([5, 6], lambda m: 4, 0.1, tree=True)
    assert spec.occurrences == 2 and nodes(spec)[0] == (7, -1, 0.5)
    live = index.speculate([5, 6], lambda m: 4, 0.1, tree=True, live=seq)
    assert live.occurrences == 1 and nodes(live)[0] == (7, -1, 1.0)
    index.extend(seq, [7])  # the run goes on: now the earlier place continues with 0
    assert index.speculate([5, 6, 7], lambda m: 4, 0.1, True, live=seq).nodes[0].token == 0


def test_draft_size_follows_the_match_and_the_depth_bounds_both():
    index = SuffixIndex(max_depth=6)
    index.add(list(range(100, 140)))
    context = [0, 104, 105, 106]
    # depth 6: a 3-token match may draft 3, a 2-token match 4, which scores higher
    wide = index.speculate(context, lambda m: 2 * m, 0.1, True)
    assert (wide.match, len(wide.nodes)) == (2, 4)
    assert len(index.speculate(context, lambda m: m, 0.1, True).nodes) == 3
    assert len(index.speculate(context, lambda m: 1, 0.1, True).nodes) == 1
    assert index.speculate([7, 8], lambda m: 5, 0.1, True).nodes == []


def test_unlikely_tokens_are_left_out():
    index = SuffixIndex(max_depth=24)
    for tail in ([1] * 9 + [2]):
        index.add([8, 9, tail])
    spec = index.speculate([8, 9], lambda m: 4, min_token_prob=0.2, tree=True)
    assert nodes(spec) == [(1, -1, 0.9)]
    assert len(index.speculate([8, 9], lambda m: 4, 0.1, True).nodes) == 2


def test_a_longer_match_wins_a_tie_and_a_better_score_wins_over_it():
    index = SuffixIndex(max_depth=24)
    index.add([1, 2, 3, 4, 1, 9, 3, 5])  # after 3: 4 or 5; after 2 3: only 4
    spec = index.speculate([0, 2, 3], lambda m: 1, 0.1, True)
    assert spec.match == 2 and nodes(spec) == [(4, -1, 1.0)]


def trie_grown(index, places, limit, min_prob, tree):
    """The reference's growth, written plainly: a trie of every place's continuation (up to
    `limit` tokens), grown best-first."""
    total, root = len(places), {"children": {}}
    for seq, end in map(seq_end, places):  # oldest first: a node's place ends as its latest
        s, node = index.sequences[seq], root
        for i in range(end, min(len(s), end + limit)):
            node = node["children"].setdefault(s[i], {"children": {}, "count": 0})
            node["count"] += 1
            node["seen_at"] = (seq, i)
    spec, heap, order = Speculation(occurrences=total), [], 0

    def push(node, parent):
        nonlocal order
        ranked = sorted(node["children"].items(), key=lambda kv: -kv[1]["count"])
        for token, child in ranked if tree else ranked[:1]:
            if child["count"] / total >= min_prob:
                heapq.heappush(heap, (-child["count"] / total, order, token, child, parent))
                order += 1

    push(root, -1)
    while heap and len(spec.nodes) < limit:
        neg_prob, _, token, node, parent = heapq.heappop(heap)
        spec.nodes.append(Node(token, parent, -neg_prob, node["seen_at"]))
        push(node, len(spec.nodes) - 1)
    return spec


def per_length(index, context, max_tokens, min_prob, tree, live=None):
    """The reference's way: a speculation grown for every match length, the best kept (the
    longer on a tie). `speculate` grows one per run of lengths seen in the same places."""
    best, places = None, None
    here = None if live is None else place(live, len(index.sequences[live]))
    for m in range(1, min(len(context), index.max_depth - 1) + 1):
        places = [p for p in index._places(context, m, places)[0] if p != here]
        if not places:
            break
        limit = min(max_tokens(m), index.max_depth - m)
        if limit > 0:
            spec = trie_grown(index, places, limit, min_prob, tree)
            spec.match = m
            if spec.nodes and (best is None or spec.score >= best.score):
                best = spec
    return best


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), max_size=60), min_size=1, max_size=4),
       st.lists(st.integers(0, 5), min_size=1, max_size=30), st.integers(3, 24),
       st.sampled_from([0.0, 0.1, 0.4]), st.booleans(), st.integers(0, 3),
       st.integers(-2, 3))
def test_growing_once_per_run_of_lengths_is_growing_once_per_length(
        sequences, context, depth, min_prob, tree, factor, offset):
    index = SuffixIndex(max_depth=depth)
    for s in sequences:
        index.add(s)
    live = index.add(context)  # the run's own text, as the oracle's local tree holds it

    def max_tokens(m):
        return max(0, factor * m + offset)

    for at in (None, live):
        want = per_length(index, context, max_tokens, min_prob, tree, live=at)
        got = index.speculate(context, max_tokens, min_prob, tree, live=at)
        if want is None:
            assert got.nodes == []
        else:
            assert (got.match, got.occurrences, got.nodes) == (
                want.match, want.occurrences, want.nodes)
        # Asked only for what beats another index's score: the best where it does.
        for beat in (0.5, 1.0, 2.0):
            got = index.speculate(context, max_tokens, min_prob, tree, live=at, beat=beat)
            if want is not None and want.score > beat:
                assert (got.match, got.occurrences, got.nodes) == (
                    want.match, want.occurrences, want.nodes)
            else:
                assert got.nodes == []


def longest_by_search(index, context):
    """Every place a token followed the context's last m tokens, for the longest such m
    (up to max_depth - 1), found by looking at every position."""
    for m in range(min(len(context), index.max_depth - 1), 0, -1):
        found = [(seq, end) for seq, s in enumerate(index.sequences)
                 for end in range(m, len(s)) if s[end - m:end] == context[-m:]]
        if found:
            return m, found
    return 0, []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=40), min_size=1, max_size=3),
       st.lists(st.integers(0, 4), min_size=1, max_size=30), st.integers(2, 12),
       st.integers(1, 5))
@example([[2, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 4, 1]], [3, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4], 12, 3)
@example([[1, 2, 3, 4, 0, 1, 2, 3, 4, 0]], [4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4], 8, 2)
def test_the_longest_match_is_what_a_search_of_every_position_finds(
        sequences, context, depth, pieces):
    """What auto K reads on every step, without growing a speculation: the longest pattern
    some token followed, at its latest place (sequences growing in turns, as runs do; the
    context's own end, the run's own text, has nothing after it yet)."""
    index = SuffixIndex(max_depth=depth)
    ids = [index.add(s[:pieces]) for s in sequences]
    for at in range(pieces, max(map(len, sequences)), pieces):
        for seq, s in zip(ids, sequences):
            index.extend(seq, s[at:at + pieces])
    index.add(context)  # the live run
    m, at = index.longest(context)
    want, found = longest_by_search(index, context)
    assert m == want
    if m:
        assert seq_end(at) in found
        if len(sequences) == 1:  # one sequence grows in order: its latest place is its last
            assert seq_end(at) == max(found)
    else:
        assert at is None


def test_the_match_auto_k_reads_is_the_longer_of_the_run_and_the_memory():
    import numpy as np

    from specviz.engines.oracles.base import RunContext
    from specviz.engines.sampling import GREEDY

    memory = SuffixMemory()
    memory.add([9, 1, 2, 3, 4, 5, 6, 7, 8, 10], "earlier")  # 9 1 2 3 4 5 went on
    oracle = suffix(memory)
    prompt = [3, 4, 5, 0, 9, 1, 2, 3, 4, 5]  # the run's own text: only 3 4 5 went on
    oracle.start(RunContext(tuple(prompt), "", (), GREEDY, np.random.default_rng(0)))
    assert oracle.match_length(prompt) == 6
    assert oracle.propose(prompt, 2).tokens == [6, 7]  # and scores 4 against the run's 3
    alone = suffix(SuffixMemory())
    alone.start(RunContext(tuple(prompt), "", (), GREEDY, np.random.default_rng(0)))
    assert alone.match_length(prompt) == 3
    assert alone.match_length([*prompt, 8]) == 0  # 8 never came before: nothing to continue


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=20), min_size=1, max_size=3),
       st.lists(st.integers(0, 4), min_size=1, max_size=6), st.integers(1, 6),
       st.sampled_from([0.0, 0.1, 0.4, 0.6]), st.booleans(), st.integers(1, 5))
def test_a_growth_counts_only_the_nodes_it_takes_and_grows_what_the_trie_grows(
        sequences, pattern, limit, min_prob, tree, pieces):
    """With the tokens kept after each indexed place (filled in as a sequence grows, here
    in pieces) or read from the sequences (longer patterns): what a whole trie grows."""
    index = SuffixIndex(max_depth=12)
    ids = [index.add(s[:pieces]) for s in sequences]
    for at in range(pieces, max(map(len, sequences)), pieces):  # in turns, as runs interleave
        for seq, s in zip(ids, sequences):
            index.extend(seq, s[at:at + pieces])
    places = None
    for m in range(1, len(pattern) + 1):  # as `_runs` finds them
        places, nexts = index._places(pattern, m, places)
    assert (nexts is None) == (len(pattern) > GRAMS)
    want = trie_grown(index, places, limit, min_prob, tree)
    for got in (index._grow(places, nexts, limit, min_prob, tree),
                index._grow(places, None, limit, min_prob, tree)):
        assert (got.occurrences, got.nodes) == (want.occurrences, want.nodes)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=30), min_size=1, max_size=3),
       st.lists(st.integers(0, 4), min_size=1, max_size=20),
       st.lists(st.integers(0, 4), min_size=1, max_size=10), st.booleans())
def test_remembered_growths_are_the_fresh_ones_and_forgotten_when_the_index_grows(
        sequences, context, more, tree):
    """Growths are kept between steps (the memory of earlier runs does not change during a
    run): what a step drafts from them must be what a fresh index drafts, after the index
    grows too, and setting one speculation's match must not touch the next one's."""
    def max_tokens(m):
        return m + 1

    kept = SuffixIndex(max_depth=12)
    for s in sequences:
        kept.add(s)
    first = kept.speculate(context, max_tokens, 0.1, tree)
    first.match = -1
    again = kept.speculate(context, max_tokens, 0.1, tree)
    assert again.match != -1 or not again.nodes
    kept.extend(0, more)
    fresh = SuffixIndex(max_depth=12)  # the same index, never asked before
    for s in sequences:
        fresh.add(s)
    fresh.extend(0, more)
    for ctx in (context, context + more[:1], more):
        got = kept.speculate(ctx, max_tokens, 0.1, tree)
        want = fresh.speculate(ctx, max_tokens, 0.1, tree)
        assert (got.match, got.occurrences, got.nodes) == (want.match, want.occurrences,
                                                            want.nodes)


def test_a_large_memory_gives_the_garbage_collector_nothing_to_walk():
    """A full collection walks every tracked object: with 60k tokens' n-grams as tuples in
    lists it took about 100 ms, in the middle of a step."""
    rng = random.Random(0)
    tokens = [rng.randrange(500) for _ in range(20_000)]
    gc.collect()
    before = len(gc.get_objects())
    index = SuffixIndex(max_depth=64)
    index.add(tokens)
    index.speculate(tokens[:50], lambda m: m, 0.1, True)
    gc.collect()
    assert len(index._after) > 20_000
    assert len(gc.get_objects()) - before < 100


# ---------------------------------------------------------------- runs


def suffix(store=None, **settings):
    return make_oracle("suffix", suffix_memory=store if store is not None else SuffixMemory(),
                       settings=settings)


BRANCHY = "a = f(x, 1)\nb = f(x, 2)\nc = f(y, 1)\nd = f(y, 2)\ne = f(x, 1)\nf = f("


def test_suffix_is_lossless_on_the_tiny_model_greedy_and_sampled(tiny_backend):
    plain_steps, plain = run(tiny_backend, make_oracle("none"), k=0, n=60)
    for tree in (1, 0):
        steps, summary = run(tiny_backend, suffix(tree=tree), k=6, n=60)
        assert compare(steps, plain_steps).identical and summary.text == plain.text
        assert summary.totals.accepted > 0  # the random model repeats itself
    # a prompt whose lines part after the same start: branching speculations go as trees,
    # chains (and everything with tree 0) as linear drafts
    plain_steps, plain = run(tiny_backend, make_oracle("none"), BRANCHY, k=0, n=40)
    for tree in (1, 0):
        steps, summary = run(tiny_backend, suffix(tree=tree), BRANCHY, k=6, n=40)
        assert compare(steps, plain_steps).identical and summary.text == plain.text
        assert any(s.tree for s in steps) == bool(tree)
        assert any(s.proposed and not s.tree for s in steps)
    params = SamplingParams(0.8, seed=3)
    first = run(tiny_backend, suffix(tree=1), BRANCHY, k=4, n=40, params=params)[1]
    assert run(tiny_backend, suffix(tree=1), BRANCHY, k=4, n=40, params=params)[1].text == \
        first.text


def test_a_second_run_drafts_from_the_first_and_says_so(tiny_backend):
    memory = SuffixMemory()
    oracle = suffix(memory)
    _, first = run(tiny_backend, oracle, k=8, n=48)
    assert len(memory.runs) == 1 and len(memory.runs[0].tokens) == first.totals.tokens
    steps, second = run(tiny_backend, oracle, k=8, n=48)
    assert second.text == first.text  # greedy: the same answer, now mostly remembered
    assert second.totals.steps < first.totals.steps
    remembered = [t for s in steps for t in s.accepted if t.source == "memory"]
    assert remembered and all(t.span.run == memory.runs[0].label for t in remembered)
    token = remembered[0]
    assert f"«{token.text}»" in token.span.excerpt  # the earlier run's text around it
    assert memory.runs[0].tokens[token.span.tok_start] == token.id
    for step in steps:
        assert ev.from_dict(json.loads(ev.to_json(step))) == step


def test_the_shadow_draft_is_the_likeliest_chain_and_leaves_the_oracle_as_it_was():
    import numpy as np

    from specviz.engines.oracles.base import RunContext
    from specviz.engines.sampling import GREEDY

    prompt = [*A, 11, 12, *A[:6], 13, 14, *A[:4]]  # after 1 2 3 4: 5 6, then 7 or 13
    oracle = suffix(SuffixMemory())
    oracle.start(RunContext(tuple(prompt), "", (), GREEDY, np.random.default_rng(0)))
    chain = list(oracle.shadow_draft(prompt, 8))
    assert chain == [5, 6, 7]  # the first-seen branch of a tie, as the tree orders it
    assert oracle._trust.__dict__ == type(oracle._trust)().__dict__  # nothing judged or sent
    sent = oracle.propose(prompt, 8)  # the tree: the chain, and 13 beside 7
    assert (sent.tokens, sent.parents) == ([5, 6, 7, 13], [-1, 0, 1, 1])


def test_a_proposal_says_what_the_tree_it_was_chosen_over_expected():
    """A step asks the memory only for what beats the run's own tree; a proposal's details
    still give the memory's best, asked whole."""
    import numpy as np

    from specviz.engines.oracles.base import RunContext
    from specviz.engines.sampling import GREEDY

    memory = SuffixMemory()
    memory.add([1, 2, 3, 4, 20, 1, 2, 3, 4, 21, 22, 23], "earlier")
    oracle = suffix(memory)
    prompt = [*A, 11, *A[:4]]  # the run's own text goes on 5 6 7 8, the memory's splits
    oracle.start(RunContext(tuple(prompt), "", (), GREEDY, np.random.default_rng(0)))
    whole = oracle._global.speculate(prompt, oracle._max_tokens, 0.1, True)
    assert whole.nodes and whole.score < 4
    assert oracle.match_length(prompt) == 4  # as auto K asks first
    sent = oracle.propose(prompt, 8)
    assert sent.tokens == [5, 6, 7, 8]
    assert sent.details[0].endswith(f"chosen over earlier runs' tree, which expected "
                                    f"{whole.score:.2f} tokens against 4.00")


def test_the_memory_chosen_over_the_run_says_what_the_run_expected():
    import numpy as np

    from specviz.engines.oracles.base import RunContext
    from specviz.engines.sampling import GREEDY

    memory = SuffixMemory()
    memory.add([31, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "earlier")
    oracle = suffix(memory)
    prompt = [*A[:4], 30, 31, 1, 2, 3]  # the memory holds 31 1 2 3 4 and what followed
    oracle.start(RunContext(tuple(prompt), "", (), GREEDY, np.random.default_rng(0)))
    sent = oracle.propose([*prompt, 4], 8)  # the run: 1 2 3 4 went on 30 once, 4 tokens
    assert sent.tokens[:3] == [5, 6, 7] and sent.source == "memory"
    assert "chosen over this run's tree, which expected" in sent.details[0]
    alone = suffix(memory)  # a run whose own text has nothing to go on
    fresh = [40, 41, 2, 3, 4]
    alone.start(RunContext(tuple(fresh), "", (), GREEDY, np.random.default_rng(0)))
    sent = alone.propose(fresh, 8)
    assert sent.tokens[:2] == [5, 6] and "chosen over" not in sent.details[0]


def test_a_lane_that_opts_out_neither_reads_nor_writes_the_memory(tiny_backend):
    memory = SuffixMemory()
    run(tiny_backend, suffix(memory), k=8, n=32)
    steps, _ = run(tiny_backend, suffix(memory, memory=0), k=8, n=32)
    assert len(memory.runs) == 1
    assert not any(t.source == "memory" for s in steps for t in s.proposed)


def test_the_memory_file_is_bounded_and_survives_a_torn_line(tmp_path):
    path = tmp_path / "m.jsonl"
    memory = SuffixMemory.open(path, max_tokens=10)
    assert not memory.add([1, 2, 3, 4], "a")
    assert not memory.add([5, 6, 7, 8], "b")
    assert memory.add([9, 10, 11], "c")  # "a" dropped: a tree of the runs is built again
    assert [r.label for r in memory.runs] == ["b", "c"]
    assert [r.label for r in SuffixMemory.open(path, 10).runs] == ["b", "c"]
    path.write_text('{"run": "b", "tokens": [5, 6]}\n{"run": ', encoding="utf-8")
    reopened = SuffixMemory.open(path)  # the torn line dropped, the whole one kept
    assert [r.label for r in reopened.runs] == ["b"] and "cut off" in reopened.problem
    reopened.add([1, 2], "d")
    assert [r.label for r in SuffixMemory.open(path).runs] == ["b", "d"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.jsonl", "m.jsonl.lock"]


def test_two_writers_of_one_memory_file_keep_each_others_runs(tmp_path):
    path = tmp_path / "m.jsonl"
    lane_a, lane_b = SuffixMemory.open(path, 8), SuffixMemory.open(path, 8)
    assert not lane_a.add([1, 2, 3], "a1")
    assert lane_b.add([4, 5, 6], "b1")  # a1, saved by the other lane since, taken in
    assert [r.label for r in lane_b.runs] == ["a1", "b1"]
    assert lane_a.add([7, 8, 9], "a2")  # b1 taken in, a1 dropped past the bound
    assert [r.label for r in lane_a.runs] == ["b1", "a2"]
    assert [r.label for r in SuffixMemory.open(path, 8).runs] == ["b1", "a2"]


def test_a_memory_file_locked_by_another_writer_is_one_line_and_the_run_goes_on(
        tmp_path, monkeypatch):
    path = tmp_path / "m.jsonl"
    memory = SuffixMemory.open(path)
    add_while_locked(memory, [1, 2], "held", monkeypatch)
    assert "locked by another writer" in memory.problem
    assert [r.label for r in memory.runs] == ["held"] and not path.exists()


def test_memory_can_be_switched_off_for_every_run(monkeypatch):
    assert memory_path("model.gguf", 100) is not None
    monkeypatch.setenv("SPECVIZ_SUFFIX_MEMORY", "off")
    assert memory_path("model.gguf", 100) is None


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(map(str, argv)))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_line_remembers_across_runs(capsys, tiny_model_dir, tmp_path):
    memory = tmp_path / "memory.jsonl"
    args = ["run", "--target", tiny_model_dir, "--backend", "transformers", "--no-chat",
            "--prompt", "def add(a, b):", "--max-tokens", "32", "--oracle", "suffix", "--k", "8",
            "--suffix-memory", memory, "--json"]
    first = json.loads(run_cli(capsys, *args)[1])
    second = json.loads(run_cli(capsys, *args)[1])
    assert second["text"] == first["text"] and second["steps"] < first["steps"]
    assert len(memory.read_text().splitlines()) == 3  # the model's name, then two runs


def test_bad_suffix_input_is_one_line(capsys, tiny_model_dir, tmp_path):
    base = ["run", "--target", tiny_model_dir, "--backend", "transformers", "--no-chat",
            "--prompt", "x", "--max-tokens", "4", "--oracle", "suffix"]
    binary = tmp_path / "corpus.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    for extra, message in (
            (["--suffix-corpus", binary], "suffix corpus"),
            (["--min-token-prob", "1.5"], "min_token_prob 1.5 is outside 0.0..1.0"),
            (["--max-spec-factor", "-1"], "max_spec_factor -1.0 is outside")):
        code, _, err = run_cli(capsys, *base, *extra)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    text = tmp_path / "notes.txt"  # not a memory: refused, as it was
    text.write_text("not json\n")
    code, _, err = run_cli(capsys, *base, "--suffix-memory", text)
    assert code == 2 and "cannot be a suffix memory" in err and len(err.splitlines()) == 1
    assert text.read_text() == "not json\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "corpus.bin", "notes.txt"]


def test_a_memory_that_cannot_be_saved_is_said_as_the_run_ends(capsys, tiny_model_dir,
                                                                tmp_path):
    """The save fails at the run's end (its folder is a file): one line then, and the run's
    result stands."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    code, out, err = run_cli(capsys, "run", "--target", tiny_model_dir, "--backend",
                             "transformers", "--no-chat", "--prompt", "def add(a, b):",
                             "--max-tokens", "8", "--oracle", "suffix", "--json",
                             "--suffix-memory", blocker / "memory.jsonl")
    assert code == 0 and json.loads(out)["tokens"] == 8
    assert err.count("the suffix memory could not be saved") == 1, err


# ---------------------------------------------------------------- smollm2-135m


@pytest.mark.model
@pytest.mark.parametrize("backend", ["smol_llama", "smol_hf"])
def test_smollm2_suffix_is_lossless_and_remembers(backend, request):
    target = request.getfixturevalue(backend)
    plain_steps, plain = run(target, make_oracle("none"), CODE_EDIT, k=0, n=48, chat=True)
    memory = SuffixMemory()
    oracle = suffix(memory)
    first_steps, first = run(target, oracle, CODE_EDIT, k=6, n=48, chat=True)
    steps, second = run(target, oracle, CODE_EDIT, k=6, n=48, chat=True)
    for these, summary in ((first_steps, first), (steps, second)):
        result = check_against_plain(target, tokens_of(target, CODE_EDIT), these, plain_steps)
        assert result.identical, result.note
        assert summary.text == plain.text
    assert second.totals.steps < first.totals.steps
    assert any(t.source == "suffix" and t.span.chr_start is not None
               for s in first_steps for t in s.accepted)  # copied from the prompt, linked


def test_a_run_the_file_could_not_take_is_remembered_once_and_saved_with_the_next(
        tmp_path, monkeypatch):
    from specviz.engines.oracles import suffix_memory

    path = tmp_path / "m.jsonl"
    memory = SuffixMemory.open(path)
    memory.add([1, 2], "a")
    save = suffix_memory.SuffixMemory._save

    def full_disk(self, appended):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(suffix_memory.SuffixMemory, "_save", full_disk)
    memory.add([3, 4], "b")
    assert "No space left on device" in memory.problem
    assert [r.label for r in memory.runs] == ["a", "b"]  # once, not twice
    monkeypatch.setattr(suffix_memory.SuffixMemory, "_save", save)
    memory.add([5, 6], "c")
    memory.add([7, 8], "d")  # "b" is in the file now: not dropped as another writer's change
    assert [r.label for r in memory.runs] == ["a", "b", "c", "d"]
    assert [r.label for r in SuffixMemory.open(path).runs] == ["a", "b", "c", "d"]


def test_a_run_held_back_by_a_lock_is_saved_with_the_next_run(tmp_path, monkeypatch):
    path = tmp_path / "m.jsonl"
    memory = SuffixMemory.open(path)
    memory.add([1, 2], "a")
    add_while_locked(memory, [3, 4], "held", monkeypatch)
    memory.add([5, 6], "c")
    memory.add([7, 8], "d")
    assert [r.label for r in memory.runs] == ["a", "held", "c", "d"]
    assert [r.label for r in SuffixMemory.open(path).runs] == ["a", "held", "c", "d"]


def add_while_locked(memory: SuffixMemory, tokens: list[int], label: str, monkeypatch) -> None:
    """`memory.add` while another writer holds the file's lock (waited for 50 ms, not 10 s)."""
    from filelock import FileLock

    from specviz.engines.oracles import suffix_memory

    monkeypatch.setattr(suffix_memory, "LOCK_WAIT_S", 0.05)
    with FileLock(str(memory.path) + ".lock"):
        memory.add(tokens, label)


@pytest.mark.parametrize("tree", [0, 1])
def test_a_draft_auto_k_prices_out_is_declined_in_the_lanes_own_shape(tree):
    """A chain lane (tree 0, as `specviz advise` replays suffix decoding) never gets a tree,
    not even an empty declined one; a tree lane gets its tree."""
    import numpy as np

    from specviz.engines.oracles.base import Proposal, RunContext, TreeProposal
    from specviz.engines.sampling import GREEDY

    oracle = suffix(SuffixMemory(), tree=tree)
    prompt = [*A, 11, 12, *A[:4]]
    oracle.start(RunContext(tuple(prompt), "", (), GREEDY, np.random.default_rng(0)))
    oracle.price_with(lambda rows, n_ctx: 1.0 + 100.0 * (rows - 1))  # a draft never pays
    sent = oracle.propose(prompt, 8)
    assert sent.declined == ev.DECLINE_AUTO_K and not sent.tokens
    assert isinstance(sent, TreeProposal) == bool(tree)
    assert isinstance(sent, Proposal if not tree else TreeProposal)
