"""Tree and lookahead oracles in the session: lossless greedy, tree events, traces."""

from __future__ import annotations

import copy

import pytest
from model_fixtures import batches_round_alike, rejections
from test_session import CODE_EDIT, run, tokens_of

from specviz.engines import events as ev
from specviz.engines.bench.compare import check_against_plain, compare
from specviz.engines.oracles import make_oracle
from specviz.engines.sampling import SamplingParams


def tree_oracles(target, draft):
    return [make_oracle("tree", target=target, draft=draft, settings={"split": 0.05}),
            make_oracle("lookahead", settings={"W": 4, "N": 3, "G": 4})]


def test_tree_oracles_are_lossless_on_the_tiny_model(tiny_backend, disagreeing_draft_backend):
    """Branches are refused (the tree's draft is a sibling that misses some tokens) and the
    text is still plain decoding's."""
    plain_steps, plain = run(tiny_backend, make_oracle("none"), k=0, n=60)
    for oracle in tree_oracles(tiny_backend, disagreeing_draft_backend):
        steps, summary = run(tiny_backend, oracle, k=4, n=60)
        assert rejections(steps) > 0, oracle.name  # branches refused and rolled back
        assert summary.totals.accepted > 0 or oracle.name != "tree"  # and some taken
        assert compare(steps, plain_steps).identical, oracle.name
        assert summary.text == plain.text, oracle.name
        assert all(s.tree is not None for s in steps if s.k), oracle.name


def test_tree_step_events_describe_the_tree(tiny_backend, tiny_draft_backend):
    oracle = make_oracle("tree", target=tiny_backend, draft=tiny_draft_backend,
                         settings={"split": 0.05, "budget": 12})
    steps, summary = run(tiny_backend, oracle, k=4, n=40)
    steps = [s for s in steps if s.k]  # the last step has no room to speculate
    assert summary.totals.proposed == sum(len(s.tree) for s in steps)  # every node counts
    assert summary.totals.accepted == sum(len(s.path) for s in steps)
    assert any(len({n.parent for n in s.tree}) < len(s.tree) for s in steps)  # it branched
    for s in steps:
        assert len(s.tree) <= 12 and all(n.parent < i for i, n in enumerate(s.tree))
        states = [n.state for n in s.tree]
        assert [i for i, st in enumerate(states) if st == ev.NODE_ACCEPTED] == sorted(s.path)
        assert [t.id for t in s.accepted] == [s.tree[i].id for i in s.path]
        assert s.text == "".join(t.text for t in s.accepted) + s.target.text
        for i in s.path[1:] if s.path else ():
            assert s.tree[i].parent in s.path
    # the draft is the target itself: its first choice is always right
    assert summary.totals.tokens / summary.totals.steps > 3


def test_sampled_tree_run_is_reproducible(tiny_backend, tiny_draft_backend):
    def once():
        oracle = make_oracle("tree", target=tiny_backend, draft=tiny_draft_backend)
        return run(tiny_backend, oracle, k=3, n=30, params=SamplingParams(0.8, seed=4))

    steps, summary = once()
    judged = [n for s in steps for n in s.tree or () if n.state != ev.NODE_UNREACHED]
    assert judged and all(n.accept_prob is not None and n.draw is not None for n in judged)
    assert once()[1].text == summary.text


def test_tree_events_round_trip_through_json(tiny_backend):
    steps, _ = run(tiny_backend, make_oracle("lookahead"), k=4, n=30)
    for step in steps[:-1]:
        assert ev.from_dict(ev.to_dict(step)) == step
        assert step.lookahead is not None and step.lookahead.pool_size > 0
    old = ev.to_dict(steps[3])
    for key in ("tree", "path", "lookahead"):
        old.pop(key, None)
    linear = ev.from_dict(old)  # a trace written before trees existed
    assert linear.tree is None and linear.path is None and linear.lookahead is None


# ------------------------------------------------------------------ smollm2-135m


def twin(backend):
    """A second transformers backend on the same weights, with a cache of its own (loading
    the GGUF again would take a minute on a busy CI machine)."""
    other = copy.copy(backend)
    other._cache, other._tokens, other._nodes = None, [], None
    return other


_PLAIN: dict = {}  # plain decoding per backend, computed once


@pytest.mark.model
@pytest.mark.parametrize("backend", ["smol_llama", "smol_hf"])
@pytest.mark.parametrize("oracle_name", ["tree", "lookahead"])
def test_smollm2_tree_oracles_are_lossless(backend, oracle_name, request, smollm2_path):
    from specviz.engines.backends import load_backend

    target = request.getfixturevalue(backend)
    if backend not in _PLAIN:
        _PLAIN[backend] = run(target, make_oracle("none"), CODE_EDIT, k=0, n=32, chat=True)
    plain_steps, plain = _PLAIN[backend]
    draft = None
    if oracle_name == "tree":  # the model drafts for itself: trees of its top choices
        draft = (load_backend("llama", smollm2_path, n_ctx=2048) if target.name == "llama"
                 else twin(target))
    knobs = {"budget": 8} if oracle_name == "tree" else {"W": 3, "N": 3, "G": 3}
    oracle = make_oracle(oracle_name, target=target, draft=draft, settings=knobs)
    steps, summary = run(target, oracle, CODE_EDIT, k=3, n=32, chat=True)
    oracle.close()
    if oracle_name == "tree" and target.name == "llama":
        draft.close()  # (a twin shares the target's weights: never close it)
    result = check_against_plain(target, tokens_of(target, CODE_EDIT), steps, plain_steps)
    assert summary.totals.accepted > 0
    if not batches_round_alike(target):
        # Half precision, or llama.cpp on a GPU: a batch rounds unlike one row, so a near-tie
        # may flip; it must be one the measured batch noise explains.
        assert result.identical or result.margin < result.tie_threshold, result.note
        return
    assert result.identical, result.note  # tree batches are exact in float32 on the CPU
    assert summary.text == plain.text
