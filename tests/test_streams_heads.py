"""Medusa's and EAGLE's heads in a batch of streams (engines/backends/hf_stream_rows.py): each
stream's heads read that stream's own hidden states out of the batch's padded passes, so
they guess as they would alone, and every stream stays plain decoding's text."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import TEST_DEVICE
from test_eagle import PROMPT, answers_to, layers_of
from test_medusa import overfit_heads
from test_streams import PROMPTS, single, stream_steps

from specviz.app.cli.main import main
from specviz.engines.bench.compare import check_stream_against_plain
from specviz.engines.loop.session import RunSettings
from specviz.engines.loop.streams import StreamsSession
from specviz.engines.medusa.heads import save_heads
from specviz.engines.oracles import make_oracle
from specviz.engines.sampling import SamplingParams
from specviz.engines.training import eagle as et

# The prompt the heads learned sits second, so a stream reading row 0 (or its neighbour's
# rows) guesses from the wrong context and stops matching its run alone.
STREAM_PROMPTS = [PROMPTS[1], PROMPT, PROMPTS[2]]
HEAD_INPUT = {"medusa": "medusa_heads", "eagle": "eagle_head"}
HEAD_FLAG = {"medusa": "--medusa-heads", "eagle": "--eagle-head"}


@pytest.fixture(scope="module")
def target(tiny_model_dir):
    from specviz.engines.backends.hf import TransformersBackend

    backend = TransformersBackend(tiny_model_dir, device=TEST_DEVICE, threads=1)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def heads(target, tmp_path_factory):
    """Folders of Medusa heads and an EAGLE head that know PROMPT's answer by heart."""
    medusa = overfit_heads(target, PROMPT)
    answer = answers_to(target, [PROMPT])[0]
    eagle = et.train(target, [answer] * 3, et.EagleSettings(steps=120, lr=3e-3, batch=2,
                                                            chat=False, precision="fp32"),
                     layers=layers_of(target))
    return {"medusa": save_heads(medusa.heads, medusa.config, tmp_path_factory.mktemp("m")),
            "eagle": et.save(eagle, target, tmp_path_factory.mktemp("e"))}


def runs(k: int = 3, n: int = 24) -> list[RunSettings]:
    return [RunSettings(p, chat=False, k=k, max_tokens=n) for p in STREAM_PROMPTS]


@pytest.mark.parametrize("name", ["medusa", "eagle"])
def test_each_stream_guesses_from_its_own_hidden_states(target, heads, name):
    """Three streams of head oracles in one batch: each stream guesses, after each context
    it shares with its run alone, what its oracle guesses alone, accepts what the heads
    learned on the prompt they learned, and writes plain decoding's text."""
    batch, views = target.stream_targets(3)
    oracles = [make_oracle(name, target=v, **{HEAD_INPUT[name]: heads[name]}) for v in views]
    settings = runs()
    events = list(StreamsSession(batch, oracles, settings))
    for oracle in oracles:
        oracle.close()
    compared = 0  # steps made after the same context alone and in the batch
    for i, run in enumerate(settings):
        steps = stream_steps(events, i)
        alone = make_oracle(name, target=target, **{HEAD_INPUT[name]: heads[name]})
        _, alone_steps, _ = single(target, run, alone)
        alone.close()
        batched, by_itself = guesses(steps), guesses(alone_steps)
        shared = batched.keys() & by_itself.keys()
        assert all(batched[p] == by_itself[p] for p in shared), (name, i)
        compared += len(shared)
        _, plain_steps, _ = single(target, run)
        result = check_stream_against_plain(target, target.encode_prompt(run.prompt, False),
                                            steps, plain_steps, 3)
        assert result.identical or result.near_tie, (name, i, result.note)
    assert compared >= 20
    learned = events[-1].summaries[1].totals
    assert learned.mean_accepted_tokens > 1.5, learned  # the heads know this answer


@pytest.mark.parametrize("name", ["medusa", "eagle"])
def test_sampled_streams_with_heads_draw_as_each_would_alone(target, heads, name):
    """Each stream samples with its own generator from its own heads' rows: a sampled stream
    writes what it writes alone from the same seed (Medusa: a single run; EAGLE, whose
    single run verifies a whole tree and so draws otherwise: a batch of that stream only)."""
    settings = [RunSettings(p, chat=False, k=3, max_tokens=20,
                            params=SamplingParams(temperature=0.8, seed=i))
                for i, p in enumerate(STREAM_PROMPTS)]
    summary = sampled_batch(target, heads, name, settings)
    for run, got in zip(settings, summary.summaries):
        if name == "medusa":
            alone = make_oracle(name, target=target, **{HEAD_INPUT[name]: heads[name]})
            assert got.text == single(target, run, alone)[2].text
            alone.close()
        else:
            assert got.text == sampled_batch(target, heads, name, [run]).summaries[0].text
    assert summary.summaries[1].totals.accepted > 0


def sampled_batch(target, heads, name: str, settings: list[RunSettings]):
    batch, views = target.stream_targets(len(settings))
    oracles = [make_oracle(name, target=v, **{HEAD_INPUT[name]: heads[name]}) for v in views]
    try:
        return StreamsSession(batch, oracles, settings).run_to_end()
    finally:
        for oracle in oracles:
            oracle.close()


def guesses(steps) -> dict[int, int]:
    """Each step's first guess by the context it was made after: a tree's first child of its
    root (the head's likeliest next token), as a batch verifies a tree's first chain."""
    out = {}
    for s in steps:
        if s.tree:
            out[s.position] = next(n.id for n in s.tree if n.parent == -1)
        elif s.proposed:
            out[s.position] = s.proposed[0].id
    return out


def test_the_batchs_rows_are_each_streams_own(target):
    """What a padded batched pass hands each stream (the LM head's input for Medusa, the
    layers' inputs for EAGLE) is what the stream's tokens give alone, at the stream's own
    positions; a rollback cuts them, a stream that leaves has none."""
    layers = layers_of(target)
    ids = [target.tokenize(p) for p in STREAM_PROMPTS]
    batch, views = target.stream_targets(3)
    for view in views:
        view.keep_hidden(True)
        view.keep_features(layers)
    cache = batch.stream_cache(3)
    for s, tokens in enumerate(ids):
        cache.forward({s: tokens[:-1]}, "last")
    cache.forward({s: tokens[-1:] + [5] * s for s, tokens in enumerate(ids)})  # ragged
    for s, tokens in enumerate(ids):
        alone = single_rows(target, tokens + [5] * s, layers)
        n = len(tokens) + s
        assert alike(views[s].features(0, n), alone[1])
        for position in range(len(tokens) - 1, n):
            assert alike(views[s].hidden_at(position), alone[0][position])
        assert views[s].hidden_at(n) is None
    cache.truncate(2, len(ids[2]))
    assert views[2].hidden_at(len(ids[2])) is None
    assert views[2].features(0, len(ids[2]) + 1) is None
    assert views[2].features(0, len(ids[2])) is not None
    cache.drop(1)
    assert views[1].hidden_at(len(ids[1]) - 1) is None and views[1].features(0, 1) is None
    cache.close()
    for view in views:
        view.keep_hidden(False)
        view.keep_features(None)
    assert not batch.rows.wanted


def alike(got, alone) -> bool:
    """Equal but for a batched pass's rounding (the tiny model's activations reach ~100)."""
    return got.shape == alone.shape and float((got - alone).abs().max()) <= 1e-5 * float(
        alone.abs().max())


def single_rows(target, tokens: list[int], layers: list[int]):
    """The LM head's input and the layers' inputs at every position, one sequence alone."""
    target.keep_hidden(True)
    target.keep_features(layers)
    try:
        target.reset()
        target.forward(tokens, "all")
        hidden = [target.hidden_at(p) for p in range(len(tokens))]
        return hidden, target.features(0, len(tokens))
    finally:
        target.keep_hidden(False)
        target.keep_features(None)
        target.reset()


def test_a_pass_leaves_no_hook_on_the_model(target):
    """The batch's hooks live for its own passes only: the model holds none between them,
    so a head's own use of the LM head, or a batch never closed, catches nothing."""
    batch, views = target.stream_targets(1)
    views[0].keep_hidden(True)
    views[0].keep_features(layers_of(target))
    head = target.model.get_output_embeddings()
    before = len(head._forward_pre_hooks)
    cache = batch.stream_cache(1)
    cache.forward({0: target.tokenize("def add(")})
    assert len(head._forward_pre_hooks) == before
    assert all(not layer._forward_pre_hooks
               for layer in target.model.get_decoder().layers)
    rows = views[0].hidden_at(0)
    head(rows[None])  # a head drafting through the LM head
    assert torch.equal(views[0].hidden_at(0), rows)
    cache.close()


def test_streams_of_different_heads_are_refused(target):
    _, views = target.stream_targets(2)
    views[0].keep_features([0, 1])
    with pytest.raises(ValueError, match="every stream's head must read the same"):
        views[1].keep_features([1])


@pytest.mark.parametrize("name", ["medusa", "eagle"])
def test_run_streams_with_heads_from_the_command_line(tiny_model_dir, heads, capsys, name):
    """`specviz run --streams` takes the heads' oracles, beside their plain baseline."""
    args = ["run", "--target", str(tiny_model_dir), "--backend", "transformers", "--threads",
            "1", "--no-chat", "--prompt", PROMPT, "--oracle", name, HEAD_FLAG[name],
            str(heads[name]), "--k", "3", "--max-tokens", "12", "--streams", "2", "--json",
            "--baseline", "--rounds", "1"]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["streams"] == 2 and result["failures"] == []
    assert all(s["tokens"] == 12 for s in result["streams_detail"])
    assert sum(s["accepted"] for s in result["streams_detail"]) > 0
    assert np.isfinite(result["speedup"])


@pytest.mark.parametrize("name", ["medusa", "eagle"])
def test_auto_k_starts_from_the_heads_held_out_acceptance(target, heads, name, tmp_path,
                                                         monkeypatch):
    """What the heads' training measured on held-out answers, by depth (Medusa's top-1 of
    each head, EAGLE's acceptance given the depths before held), is what auto K's odds start
    from and learning them is priced at, alone and in a batch."""
    from steady_timing import steady_forwards

    from specviz.engines.host.k_policy import chain_measured, k_policy
    from specviz.engines.host.run_spec import LaneSpec, ModelChoice

    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    steady_forwards(monkeypatch)
    saved = json.loads(next(heads[name].glob("*.json")).read_text())
    recorded = (saved["accuracy"]["top1"] if name == "medusa"
                else saved["specviz"]["accuracy"]["conditional"])
    oracle = make_oracle(name, target=target, **{HEAD_INPUT[name]: heads[name]})
    try:
        assert recorded and oracle.measured_accept() == recorded
        model = ModelChoice(str(target.model_path), "transformers", TEST_DEVICE, 1)
        policy = k_policy(LaneSpec(name, auto_k=True), model, oracle, target, None)
        # EAGLE alone sends trees, which hold more than the chain measured; a batch verifies
        # its first chain, so there both start from the held-out figures.
        assert policy.known_accept == (recorded if name == "medusa" else None)
        assert chain_measured(oracle, chains=True) == recorded
    finally:
        oracle.close()
    assert make_oracle("prompt-lookup").measured_accept() is None
