"""Medusa: the candidate tree, heads that save and load, training on the tiny model, and a
medusa oracle that stays lossless."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import math

import numpy as np
import pytest
import torch
from model_fixtures import assert_lossless, batches_round_alike, prompt_ids_of
from tiny_model import like, on_cpu_in_float32

from specviz.app.cli.main import main
from specviz.engines import events as ev
from specviz.engines.bench.compare import NEAR_TIE, batch_noise, compare
from specviz.engines.corpus import read_prompts
from specviz.engines.errors import SpecvizError
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.medusa.heads import (
    CONFIG_FILE,
    HeadsConfig,
    MedusaHeads,
    heads_dir,
    lm_head_of,
    load_heads,
    save_heads,
    target_id,
)
from specviz.engines.medusa.tree import ROOT, build_tree
from specviz.engines.oracles import make_oracle
from specviz.engines.sampling import SamplingParams
from specviz.engines.training import answers as ta
from specviz.engines.training import medusa as tr

PROMPT = "def add(a, b):\n    return a + b\n\nThe quick brown fox jumps over the lazy dog. def"

# ---------------------------------------------------------------- the candidate tree


def test_tree_keeps_the_best_candidates_and_is_a_tree():
    rng = np.random.default_rng(1)
    tokens = [list(rng.choice(1000, 3, replace=False)) for _ in range(4)]
    probs = [sorted(rng.dirichlet(np.ones(6))[:3], reverse=True) for _ in range(4)]
    tree = build_tree(tokens, probs, budget=12)
    assert len(tree) == 12
    # Brute force: every candidate path of every depth, scored by its product.
    every = {}
    for depth in range(1, 5):
        for ranks in itertools.product(range(3), repeat=depth):
            every[ranks] = math.prod(probs[d][r] for d, r in enumerate(ranks))
    best = sorted(every.values(), reverse=True)[:12]
    assert sorted(tree.scores, reverse=True) == pytest.approx(best)
    for i in range(len(tree)):
        parent = tree.parents[i]
        assert parent < i  # parents come first
        assert tree.depths[i] == (1 if parent == ROOT else tree.depths[parent] + 1)
        assert tree.tokens[i] in tokens[tree.depths[i] - 1]
        assert tree.scores[i] <= (1.0 if parent == ROOT else tree.scores[parent])
    paths = [tuple(tree.path(i)) for i in range(len(tree))]
    assert len(set(paths)) == len(paths)  # no duplicate nodes
    # With the budget for it, the chain of every head's top token is in the tree.
    assert tuple(t[0] for t in tokens) in paths


def test_tree_budget_and_edge_cases():
    assert len(build_tree([[5, 6]], [[0.7, 0.3]], budget=0)) == 0
    assert len(build_tree([], [], budget=8)) == 0
    small = build_tree([[5, 6], [7, 8]], [[0.7, 0.3], [0.9, 0.1]], budget=100)
    assert len(small) == 2 + 4  # every candidate fits
    assert small.path(small.leaves()[0]) == [5, 7]
    assert small.children(ROOT) == [0, 1]
    with pytest.raises(ValueError):
        build_tree([[1]], [], budget=3)


# ---------------------------------------------------------------- heads


def test_heads_start_close_to_the_next_token_head():
    heads = MedusaHeads(16, 3)
    h = torch.randn(5, 16)
    feats = heads.features(h)
    assert feats.shape == (5, 3, 16)
    for k, block in enumerate(heads.blocks):  # zero weights: h + SiLU(bias)
        assert torch.allclose(feats[:, k], h + torch.nn.functional.silu(block.linear.bias))


def test_labels_look_k_tokens_ahead():
    answer = ta.Answer(torch.zeros(4, 2), [10, 11, 12, 13])
    assert tr.labels(answer, 2).tolist() == [[11, 12], [12, 13], [13, -100], [-100, -100]]


def test_a_stopped_answering_goes_on_from_its_last_batch_and_is_then_reused(tiny_backend,
                                                                           tmp_path):
    from specviz.engines.training import cache

    settings = ta.TrainSettings(tokens=40, max_new=10, chat=False, prompt_batch=1)
    prompts = ["def add(a, b):", "The quick", "import os", "class A:"]
    whole, seconds = cache.answers(tiny_backend, prompts, settings, tmp_path / "a", True)
    assert seconds is not None and len(whole) == 4
    said = []
    again, seconds = cache.answers(tiny_backend, prompts, settings, tmp_path / "a", True,
                                   say=said.append)
    assert seconds is None and said[0].startswith("reusing the target's answers")
    assert [a.tokens for a in again] == [a.tokens for a in whole]
    # A run stopped after two prompts left its partial file: the next one writes the rest.
    key = next((tmp_path / "a").glob("answers-*.safetensors")).name
    partial = tmp_path / "b" / key.replace(".safetensors", ".partial.safetensors")
    partial.parent.mkdir()
    ta.save_answers(whole[:2], partial, prompts_used=2)
    said = []
    resumed, _ = cache.answers(tiny_backend, prompts, settings, tmp_path / "b", True,
                               say=said.append)
    assert said == [f"going on from 2 answers in {partial}"] and not partial.exists()
    assert [a.tokens for a in resumed] == [a.tokens for a in whole]


def test_hidden_rows_are_what_the_lm_head_read(tiny_backend):
    settings = ta.TrainSettings(tokens=30, max_new=15, chat=False)
    answers = ta.generate_answers(tiny_backend, ["def add(a, b):", "The quick"], settings)
    assert [len(a.tokens) for a in answers] == [15, 15]
    head = lm_head_of(tiny_backend.model)
    with torch.no_grad():
        for a in answers:  # greedy: row i's next-token argmax is the token written at i
            assert head(like(a.hidden, head)).argmax(-1).tolist() == a.tokens


def test_batched_answers_are_plain_greedy_decoding(tiny_backend):
    """Left-padded prompts answered together write what each writes alone."""
    prompts = ["def add(a, b):", "The quick brown fox jumps over", "El niño"]
    settings = ta.TrainSettings(tokens=100, max_new=12, chat=False, prompt_batch=3)
    together = {tuple(a.prompt): a for a in ta.generate_answers(tiny_backend, prompts,
                                                                 settings)}
    for prompt in prompts:
        plain = Session(tiny_backend, make_oracle("none"),
                        RunSettings(prompt, chat=False, k=0, max_tokens=12))
        steps = [e for e in plain if isinstance(e, ev.StepEvent)]
        answer = together[tuple(plain.prompt_ids)]
        alike_or_near_tie(tiny_backend, plain.prompt_ids, answer.tokens, steps)
    alone = ta.generate_answers(tiny_backend, prompts, dataclasses.replace(settings,
                                                                          prompt_batch=1))
    if not batches_round_alike(tiny_backend):
        return  # half precision: padded batches round apart; their tokens checked above
    for b in alone:
        a = together[tuple(b.prompt)]
        assert a.tokens == b.tokens
        assert torch.allclose(a.hidden, b.hidden, atol=1e-4)


def alike_or_near_tie(backend, prompt_ids, tokens, plain_steps) -> None:
    """An answer written in a padded batch against plain decoding's: the same tokens, or (in
    half precision, where a batch's rows round apart) the same up to a token where plain
    decoding's top two lay within the batch noise measured on that context."""
    want = [t for s in plain_steps for t in s.emitted_ids]
    first = next((i for i, (a, b) in enumerate(zip(tokens, want)) if a != b), None)
    if first is None:
        assert tokens == want[:len(tokens)] and len(tokens) == len(want)
        return
    assert not batches_round_alike(backend), (tokens, want)
    noise = batch_noise(backend, [*prompt_ids, *want[:first + 1]])
    assert plain_steps[first].target.margin < max(NEAR_TIE, noise), (first, noise)


def test_prompts_are_batched_with_prompts_of_their_length(tiny_backend, monkeypatch):
    """A batch is padded to its longest prompt: within a group of batches, short prompts
    go together and long ones together, and every prompt is answered once."""
    widths = []
    answer_batch = ta._answer_batch

    def spy(target, prompts, *args, **kwargs):
        widths.append(sorted(len(p) for p in prompts))
        return answer_batch(target, prompts, *args, **kwargs)

    monkeypatch.setattr(ta, "_answer_batch", spy)
    long = "The quick brown fox jumps over the lazy dog " * 4
    prompts = [long, "def add(a, b):", long + "again", "El niño"]
    settings = ta.TrainSettings(tokens=1000, max_new=4, chat=False, prompt_batch=2)
    answers = ta.generate_answers(tiny_backend, prompts, settings)
    assert len(widths) == 2 and max(widths[0]) < min(widths[1])  # short ones, then long
    assert len(answers) == 4


def test_writing_resumes_after_the_last_saved_group_of_batches(tiny_backend):
    prompts = ["def add(a, b):", "The quick brown fox", "El niño", "x = 1", "import os", "a"]
    settings = ta.TrainSettings(tokens=1000, max_new=4, chat=False, prompt_batch=1)
    saved = []
    whole = ta.generate_answers(tiny_backend, prompts, settings,
                                on_batch=lambda a, used: saved.append((list(a), used)))
    assert [used for _, used in saved] == [ta.CHUNK_BATCHES, len(prompts)]
    resumed = ta.generate_answers(tiny_backend, prompts, settings, resume=saved[0])
    assert [a.tokens for a in resumed] == [a.tokens for a in whole]


def test_backend_keeps_hidden_states_only_when_asked_and_drops_rolled_back_rows(tiny_backend):
    ids = tiny_backend.tokenize("def add(a, b):")
    tiny_backend.reset()
    tiny_backend.forward(ids, "all")
    assert tiny_backend.hidden_at(len(ids) - 1) is None  # off by default
    tiny_backend.keep_hidden(True)
    try:
        tiny_backend.reset()
        logits = tiny_backend.forward(ids, 3)  # rows for the last 3 positions only
        head = lm_head_of(tiny_backend.model)
        with torch.no_grad():
            rows = torch.stack([tiny_backend.hidden_at(i) for i in range(len(ids) - 3, len(ids))])
            assert torch.allclose(head(rows).float().cpu(), torch.from_numpy(logits), atol=1e-5)
        assert tiny_backend.hidden_at(len(ids) - 4) is None
        tiny_backend.truncate(len(ids) - 1)
        assert tiny_backend.hidden_at(len(ids) - 1) is None  # rolled back
        assert tiny_backend.hidden_at(len(ids) - 2) is not None
    finally:
        tiny_backend.keep_hidden(False)
        tiny_backend.reset()


def overfit_heads(backend, prompt: str, n_heads: int = 3, steps: int = 60,
                  precision: str = "fp32"):
    """Heads trained on the greedy answer to one prompt: they know it by heart."""
    settings = ta.TrainSettings(n_heads=n_heads, tokens=40, max_new=40, chat=False,
                                steps=steps, lr=5e-2, batch=40, precision=precision)
    answer = ta.generate_answers(backend, [prompt], settings)[0]
    return tr.train(backend, [answer, answer], settings)


@pytest.fixture(scope="module")
def learned(tiny_backend, tmp_path_factory):
    """(training result, folder) of heads that know the PROMPT's answer, trained once."""
    result = overfit_heads(tiny_backend, PROMPT)
    return result, save_heads(result.heads, result.config, tmp_path_factory.mktemp("heads"))


def test_training_learns_and_heads_load_back_identical(tiny_backend, learned):
    result, folder = learned
    assert np.mean(result.losses[-10:]) < 0.5 * np.mean(result.losses[:10])
    assert result.config.accuracy["top1"][0] > 0.5  # the answer seen in training
    loaded, config = load_heads(tiny_backend.model, tiny_backend.model_path, folder)
    assert config == result.config
    head = lm_head_of(tiny_backend.model)
    h = like(torch.randn(7, result.heads.hidden), head)
    trained = copy.deepcopy(result.heads).to(h.device, h.dtype)  # trained on the CPU
    with torch.no_grad():
        assert torch.equal(loaded.logits(h, head), trained.logits(h, head))


def test_heads_trained_in_bfloat16_learn_too(tiny_backend, learned):
    result = overfit_heads(tiny_backend, PROMPT, precision="bf16")
    assert result.config.training["precision"] == "bf16"
    assert result.losses != learned[0].losses
    assert np.mean(result.losses[-10:]) < 0.5 * np.mean(result.losses[:10])
    assert result.config.accuracy["top1"][0] > 0.5
    assert {p.dtype for p in result.heads.parameters()} == {torch.float32}


def test_loading_names_the_fix(tiny_backend, tmp_path):
    with pytest.raises(SpecvizError, match="specviz train-heads --target"):
        load_heads(tiny_backend.model, tiny_backend.model_path, tmp_path / "none")
    result = overfit_heads(tiny_backend, "The quick", steps=2)
    folder = save_heads(result.heads, result.config, tmp_path / "heads")
    data = json.loads((folder / CONFIG_FILE).read_text())
    data["target"]["fingerprint"] = "0" * 16
    (folder / CONFIG_FILE).write_text(json.dumps(data))
    with pytest.raises(SpecvizError, match=r"trained for .* not this model"):
        load_heads(tiny_backend.model, tiny_backend.model_path, folder)


def test_heads_live_beside_the_model(tmp_path):
    gguf = tmp_path / "m.Q4.gguf"
    assert heads_dir(gguf) == tmp_path / "m.Q4.medusa"
    assert heads_dir(tmp_path) == tmp_path / "medusa"  # a model folder keeps them inside


def test_corpus_reads_spec_bench_jsonl_and_text(tmp_path):
    (tmp_path / "q.jsonl").write_text('{"turns": ["first", "second"]}\n\n{"prompt": "p"}\n')
    (tmp_path / "a.txt").write_text("a text prompt\n")
    assert read_prompts([tmp_path]) == ["a text prompt", "first", "p"]
    (tmp_path / "bad.jsonl").write_text('{"nothing": 1}\n')
    with pytest.raises(SpecvizError, match="line 1"):
        read_prompts([tmp_path / "bad.jsonl"])


# ---------------------------------------------------------------- the oracle


def run(backend, oracle, k=3, n=40, **kw):
    session = Session(backend, oracle, RunSettings(PROMPT, chat=False, k=k, max_tokens=n, **kw))
    events = list(session)
    return [e for e in events if isinstance(e, ev.StepEvent)], events[-1]


@pytest.fixture
def medusa(tiny_backend, learned):
    """A medusa oracle on the tiny model with heads that know the PROMPT's answer."""
    oracle = make_oracle("medusa", target=tiny_backend, medusa_heads=learned[1])
    yield oracle
    oracle.close()
    assert tiny_backend.hidden_at(len(PROMPT)) is None  # plain runs pay nothing afterwards


def test_medusa_is_lossless_and_accepts_what_it_learned(tiny_backend, medusa):
    plain_steps, plain = run(tiny_backend, make_oracle("none"), k=0)
    steps, summary = run(tiny_backend, medusa)
    assert_lossless(tiny_backend, prompt_ids_of(tiny_backend, PROMPT), (steps, summary),
                    (plain_steps, plain))
    assert summary.totals.proposed > 0
    assert summary.totals.mean_accepted_tokens > 1.5  # the heads learned this answer
    assert {t.source for s in steps for t in s.proposed} == {"medusa"}
    assert steps[1].proposed[0].detail == "head 1"


def test_medusa_is_lossless_with_untrained_heads_and_a_long_k(tiny_backend, tmp_path):
    result = overfit_heads(tiny_backend, "The quick", steps=1)
    folder = save_heads(result.heads, result.config, tmp_path / "heads")
    oracle = make_oracle("medusa", target=tiny_backend, medusa_heads=folder)
    try:
        plain = run(tiny_backend, make_oracle("none"), k=0)
        steps, summary = run(tiny_backend, oracle, k=8)
        assert_lossless(tiny_backend, prompt_ids_of(tiny_backend, PROMPT), (steps, summary),
                        plain)
        assert max(len(s.proposed) for s in steps) == 3  # one token per head, at most
    finally:
        oracle.close()


def test_medusa_drafts_as_deep_as_its_heads_chain_or_tree(medusa):
    assert medusa.n_heads > 1 and medusa.tree_depth() == medusa.n_heads  # the top chain
    medusa.set_knob("budget", 1)
    assert medusa.tree_depth() == 1  # a one-node tree


def test_the_int8_knob_drafts_through_an_int8_lm_head_losslessly(tiny_backend, medusa):
    import torch

    from specviz.engines.machine.precision import available_engines

    if not available_engines():
        pytest.skip("this PyTorch has no quantized CPU kernels")
    if reason := on_cpu_in_float32(tiny_backend):
        pytest.skip(reason)
    assert medusa.knobs()["int8"] == 1
    assert type(medusa._lm_head) is not torch.nn.Linear  # the int8 copy
    int8_steps, _ = run(tiny_backend, medusa)
    medusa.set_knob("int8", 0)
    assert medusa._lm_head is medusa._lm_heads.float
    float_steps, _ = run(tiny_backend, medusa)
    assert compare(int8_steps, float_steps).identical  # the target verifies both
    assert sum(len(s.proposed) for s in int8_steps) > 0


def test_sampled_medusa_gives_its_distributions(tiny_backend, medusa):
    steps, _ = run(tiny_backend, medusa, params=SamplingParams(0.8, seed=2))
    judged = [t for s in steps for t in s.proposed if t.reject_reason != ev.REJECT_AFTER]
    assert judged and all(t.p_draft is not None and t.accept_prob is not None for t in judged)


def test_medusa_tree_holds_the_linear_proposal(tiny_backend, medusa):
    session = Session(tiny_backend, medusa, RunSettings(PROMPT, chat=False, k=3, max_tokens=4))
    session.run_to_end()
    tree = medusa.tree(session.context, top_k=3, budget=10)
    chain = medusa.propose(session.context, 3).tokens
    assert len(tree) == 10
    assert chain in [tree.path(i) for i in range(len(tree))]


def test_medusa_needs_the_transformers_backend(smol_llama):
    with pytest.raises(SpecvizError, match="--backend transformers"):
        make_oracle("medusa", target=smol_llama)


# ---------------------------------------------------------------- the command line


def test_train_heads_then_run_from_the_command_line(capsys, tiny_model_dir, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"turns": [p]}) for p in
                                ["def add(a, b):", "The quick brown fox", "for i in range(3):"]))
    out = tmp_path / "heads"
    assert main(["train-heads", "--target", str(tiny_model_dir), "--corpus", str(corpus),
                 "--tokens", "60", "--max-new", "20", "--heads", "2", "--steps", "5",
                 "--held-out", "0.34", "--precision", "bf16", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "top-1" in printed and f"saved to {out}" in printed and "s in bf16" in printed
    config = json.loads((out / CONFIG_FILE).read_text())
    assert len(config["accuracy"]["top1"]) == 2 and config["training"]["steps"] == 5
    assert config["training"]["precision"] == "bf16"
    assert main(["run", "--backend", "transformers", "--target", str(tiny_model_dir),
                 "--oracle", "medusa", "--medusa-heads", str(out), "--prompt", "def add(",
                 "--max-tokens", "12", "--k", "3", "--baseline", "--json", "--no-chat"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["identical_to_baseline"] and result["oracle"] == "medusa"
    assert main(["train-heads", "--target", str(tiny_model_dir), "--corpus", str(corpus),
                 "--tokens", "60", "--max-new", "20", "--heads", "2", "--steps", "5",
                 "--held-out", "0.34", "--out", str(out)]) == 0
    assert "reusing the target's answers" in capsys.readouterr().err


def test_train_heads_refuses_bad_input(capsys, tiny_model_dir, tmp_path):
    assert main(["train-heads", "--target", str(tiny_model_dir), "--corpus",
                 str(tmp_path / "missing.jsonl")]) == 2
    assert "corpus not found" in capsys.readouterr().err
    assert main(["train-heads", "--target", str(tiny_model_dir), "--heads", "0"]) == 2
    assert "--heads must be at least 1" in capsys.readouterr().err


@pytest.mark.model
def test_medusa_is_lossless_on_smollm2(smol_hf, tmp_path):
    # Untrained heads (training is tested on the tiny model): this checks the hidden-state
    # plumbing and rollback on a real model, where the heads still propose real tokens.
    model = smol_hf.model
    config = HeadsConfig(target_id(model, smol_hf.model_path), 3, model.config.hidden_size)
    folder = save_heads(MedusaHeads(config.hidden_size, 3), config, tmp_path / "heads")
    oracle = make_oracle("medusa", target=smol_hf, medusa_heads=folder)
    try:
        prompt = "def fib(n):\n    "
        plain = Session(smol_hf, make_oracle("none"), RunSettings(prompt, k=0, max_tokens=24))
        spec = Session(smol_hf, oracle, RunSettings(prompt, k=3, max_tokens=24))
        plain_steps = [e for e in plain if isinstance(e, ev.StepEvent)]
        steps = [e for e in spec if isinstance(e, ev.StepEvent)]
        assert spec.summary.totals.proposed > 0
        assert compare(steps, plain_steps).identical
    finally:
        oracle.close()


def test_answers_to_one_prompt_are_held_out_together():
    def answer(prompt, n):
        return ta.Answer(torch.zeros(n, 2), list(range(n)), list(prompt))

    distinct = [answer([p], 3) for p in range(10)]
    train, test = ta.split(distinct, 0.2, seed=0)
    order = np.random.default_rng(0).permutation(10)  # one answer a prompt: as ever
    assert [id(a) for a in test] == [id(distinct[i]) for i in order[:2]]
    assert [id(a) for a in train] == [id(distinct[i]) for i in order[2:]]
    sampled = [answer([p], 3 + s) for p in range(6) for s in range(3)]
    for seed in range(5):
        train, test = ta.split(sampled, 0.2, seed)
        assert {tuple(a.prompt) for a in train}.isdisjoint(tuple(a.prompt) for a in test)
        assert len(test) >= round(0.2 * len(sampled)) and len(train) + len(test) == 18
    alike = [answer([1], 3), answer([1], 4)]  # one prompt: its answers split alone
    assert [len(x) for x in ta.split(alike, 0.5, 0)] == [1, 1]
    with pytest.raises(SpecvizError, match="at least two answers"):
        ta.split(alike[:1], 0.5, 0)


def test_train_heads_writes_several_sampled_answers_a_prompt(capsys, tiny_model_dir,
                                                           tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"turns": [p]}) for p in
                                ["def add(a, b):", "The quick brown fox", "for i in range(3):"]))
    args = ["train-heads", "--target", str(tiny_model_dir), "--corpus", str(corpus),
            "--tokens", "120", "--max-new", "10", "--heads", "2", "--steps", "2",
            "--held-out", "0.34", "--samples", "3", "--out", str(tmp_path / "heads")]
    assert main(args) == 2
    assert "--samples above 1 needs --temperature" in capsys.readouterr().err
    assert main([*args, "--temperature", "1.0"]) == 0
    cached = ta.load_answers(next((tmp_path / "heads").glob("answers-*.safetensors")))
    prompts = [tuple(a.prompt) for a in cached]
    assert len(set(prompts)) == 3 and all(prompts.count(p) == 3 for p in set(prompts))
    assert len({tuple(a.tokens) for a in cached}) > 3  # sampled: not one answer thrice
    config = json.loads((tmp_path / "heads" / CONFIG_FILE).read_text())
    assert config["training"]["held_out_answers"] == 3  # one prompt's three answers


def test_answers_round_trip_through_the_disk_cache(tmp_path):
    answers = [ta.Answer(torch.randn(3, 4), [1, 2, 3]), ta.Answer(torch.randn(2, 4), [7, 8])]
    ta.save_answers(answers, tmp_path / "a.safetensors")
    back = ta.load_answers(tmp_path / "a.safetensors")
    assert [a.tokens for a in back] == [a.tokens for a in answers]
    assert all(torch.equal(a.hidden, b.hidden) for a, b in zip(answers, back))


def test_medusa_tree_verification_is_lossless_and_accepts_at_least_the_chain(tiny_backend,
                                                                             medusa):
    plain_steps, plain = run(tiny_backend, make_oracle("none"), k=0)
    _chain_steps, chain = run(tiny_backend, medusa)
    medusa.set_knob("budget", 12)
    steps, summary = run(tiny_backend, medusa)
    assert_lossless(tiny_backend, prompt_ids_of(tiny_backend, PROMPT), (steps, summary),
                    (plain_steps, plain))
    assert all(s.tree is not None and len(s.tree) <= 12 for s in steps[1:]
               if s.declined != ev.DECLINE_END)  # the run's last token leaves no room
    assert {n.detail for s in steps[1:] for n in s.tree or ()} <= {"head 1", "head 2",
                                                                    "head 3"}
    # The tree holds the chain, so it accepts at least as much per step.
    assert summary.totals.mean_accepted_tokens >= chain.totals.mean_accepted_tokens


def test_sampled_medusa_tree_runs_and_keeps_hidden_rows_in_step(tiny_backend, medusa):
    medusa.set_knob("budget", 8)
    steps, summary = run(tiny_backend, medusa, params=SamplingParams(0.8, seed=3))
    assert summary.totals.tokens == sum(len(s.emitted_ids) for s in steps)
    assert any(s.tree for s in steps)
