"""EAGLE heads: the head drafts as it was trained (the oracle's cached rows and tree nodes equal
the training rollout), training learns and resumes, published EAGLE-3 checkpoints load, the
oracle is lossless, and bad heads are one line with nothing loaded."""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest
import torch
from model_fixtures import assert_lossless
from tiny_model import on_cpu_in_float32

from specviz.app.cli.main import main
from specviz.engines import events as ev
from specviz.engines.bench.compare import compare
from specviz.engines.cost.auto_k import AutoK
from specviz.engines.cost.profile import Profile
from specviz.engines.eagle.checkpoint import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    default_layers,
    head_dir,
    shape_for,
)
from specviz.engines.eagle.head import EagleHead
from specviz.engines.errors import SpecvizError
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.machine.precision import available_engines, int8_engine, training_precision
from specviz.engines.oracles import make_oracle
from specviz.engines.sampling import SamplingParams
from specviz.engines.training import answers as ta
from specviz.engines.training import eagle as et

PROMPT = "def add(a, b):\n    return a + b\n\nThe quick brown fox jumps over the lazy dog. def"


def layers_of(backend) -> list[int]:
    return default_layers(int(backend.model.config.num_hidden_layers))


def answers_to(backend, prompts, tokens=40, max_new=40):
    settings = et.EagleSettings(tokens=tokens, max_new=max_new, chat=False)
    return ta.generate_answers(backend, prompts, settings, layers=layers_of(backend))


def untrained(backend, folder):
    torch.manual_seed(0)
    result = et.EagleResult(et.new_head(backend.model), layers_of(backend), {}, {})
    return et.save(result, backend, folder)


def run(backend, oracle, k=4, n=40, **kw):
    session = Session(backend, oracle, RunSettings(PROMPT, chat=False, k=k, max_tokens=n, **kw))
    events = list(session)
    return [e for e in events if isinstance(e, ev.StepEvent)], events[-1]


def test_the_layers_read_are_low_middle_and_high():
    assert default_layers(30) == [2, 15, 27]
    assert default_layers(24) == [2, 12, 21]
    assert default_layers(2) == [0, 1, 1]  # a shallow model: what it has


def test_answers_keep_the_layer_features_of_every_position(tiny_backend):
    answer = answers_to(tiny_backend, [PROMPT], tokens=12, max_new=12)[0]
    seq = answer.prompt + answer.tokens
    assert answer.features.shape[0] == len(seq) - 1
    tiny_backend.reset()
    tiny_backend.keep_features(layers_of(tiny_backend))
    try:
        tiny_backend.forward(seq[:-1])
        fresh = tiny_backend.features(0, len(seq) - 1)
    finally:
        tiny_backend.keep_features(None)
        tiny_backend.reset()
    assert torch.allclose(answer.features.float(), fresh.float().cpu(), rtol=1e-2,
                          atol=1e-2)  # float16


def test_the_oracle_drafts_as_the_head_was_trained(tiny_backend, tmp_path):
    """Depth 1 from the oracle's cached rows equals the training rollout's step 0 over the
    whole sequence; depth 2 (a tree node's own row) equals step 1 fed the depth-1 guess."""
    folder = untrained(tiny_backend, tmp_path / "eagle")
    oracle = make_oracle("eagle", target=tiny_backend, eagle_head=folder)
    try:
        steps, _ = run(tiny_backend, oracle, k=2, n=6)
        context = tiny_backend.tokenize(PROMPT, add_special=False)
        context += [t for s in steps for t in s.emitted_ids]
        tree = oracle.propose(context, 2)
        frozen = et.Frozen.of(tiny_backend.model)  # float32 copies on the CPU, as trained
        feats = tiny_backend.features(0, len(context) - 1).float().cpu()
        head = copy.deepcopy(oracle.head).float().cpu()
        tokens = torch.tensor([*context[1:], 0, 0])[None]
        rows = torch.ones(1, len(context) - 1, dtype=torch.bool)
        first = tree.tokens[0]

        def own(_k, _out):
            ids = tokens[:, 1 : 1 + rows.shape[1]].clone()
            ids[0, -1] = first
            return ids

        with torch.no_grad():
            outs = [out for _k, out in et.rollout(head, frozen, feats[None], tokens, rows, 2,
                                                  own)]
        ranked_alike([t for t, p in zip(tree.tokens, tree.parents) if p == -1],
                     frozen.logits(head, outs[0][0, -1]), tiny_backend.dtype)
        ranked_alike([t for t, p in zip(tree.tokens, tree.parents) if p == 0],
                     frozen.logits(head, outs[1][0, -1]), tiny_backend.dtype)
    finally:
        oracle.close()


def ranked_alike(got: list[int], reference, dtype: str) -> None:
    """The oracle's candidates against the float32 reference's top ones: the same, in the
    same order; in half precision each may instead be a token the reference scores within
    1/64 of its logits' range of the one it ranks there (the head's few layers round to 8
    bits each: on an H200 two siblings of a bfloat16 head came in the other order)."""
    reference = reference.detach()
    want = reference.topk(len(got)).indices.tolist()
    if dtype == "float32":
        assert got == want
        return
    tolerance = float(reference.max() - reference.min()) / 64
    gaps = [abs(float(reference[g] - reference[w])) for g, w in zip(got, want)]
    assert len(set(got)) == len(got) and max(gaps) <= tolerance, (got, want, gaps, tolerance)


@pytest.fixture(scope="module")
def learned(tiny_backend, tmp_path_factory):
    """A head that knows the PROMPT's answer by heart."""
    answer = answers_to(tiny_backend, [PROMPT])[0]
    settings = et.EagleSettings(steps=120, lr=3e-3, batch=2, chat=False, precision="fp32")
    result = et.train(tiny_backend, [answer, answer, answer], settings,
                      layers=layers_of(tiny_backend))
    return result, et.save(result, tiny_backend, tmp_path_factory.mktemp("eagle"))


def test_training_in_bfloat16_learns_as_well_and_keeps_float32_weights(tiny_backend, learned):
    answer = answers_to(tiny_backend, [PROMPT])[0]
    settings = et.EagleSettings(steps=120, lr=3e-3, batch=2, chat=False, precision="bf16")
    result = et.train(tiny_backend, [answer, answer, answer], settings,
                      layers=layers_of(tiny_backend))
    assert result.training["precision"] == "bf16"
    assert learned[0].training["precision"] == "fp32"
    assert result.losses != learned[0].losses  # the products did run in bfloat16
    assert np.mean(result.losses[-10:]) < 0.5 * np.mean(result.losses[:10])
    assert result.accuracy["acceptance"][0] > 0.8
    assert {p.dtype for p in result.head.parameters()} == {torch.float32}


def test_training_takes_bfloat16_where_the_cpu_multiplies_it():
    assert training_precision("auto", {"avx2", "avx512f", "avx512_bf16"}) == "bf16"
    assert training_precision("auto", {"avx2", "amx_tile", "amx_bf16"}) == "bf16"
    assert training_precision("auto", {"avx2", "fma", "avx512f"}) == "fp32"  # emulated: slower
    assert training_precision("auto", {"asimd"}) == "fp32"
    assert training_precision("bf16", set()) == "bf16"
    assert training_precision("fp32", {"avx512_bf16"}) == "fp32"
    with pytest.raises(ValueError, match="precision must be one of"):
        training_precision("fp16", set())


def test_training_learns_and_the_head_drafts_what_it_learned(tiny_backend, learned):
    result, folder = learned
    assert np.mean(result.losses[-10:]) < 0.5 * np.mean(result.losses[:10])
    assert result.accuracy["acceptance"][0] > 0.8  # the held-out copy of the same answer
    config = json.loads((folder / CONFIG_FILE).read_text())
    assert config["specviz"]["accuracy"]["acceptance"] == result.accuracy["acceptance"]
    oracle = make_oracle("eagle", target=tiny_backend, eagle_head=folder)
    try:
        plain_steps, plain = run(tiny_backend, make_oracle("none"), k=0)
        steps, summary = run(tiny_backend, oracle)
        assert compare(steps, plain_steps).identical and summary.text == plain.text
        assert summary.totals.mean_accepted_tokens > 2.0
        nodes = [n for s in steps if s.tree for n in s.tree]
        assert nodes and all(n.p_draft is not None for n in nodes)
        assert {t.source for s in steps for t in s.proposed} == {"eagle"}
    finally:
        oracle.close()
    assert tiny_backend.features(0, 1) is None  # plain runs pay nothing afterwards


class ProfilePaced(AutoK):
    """Auto K that sees every step take what the profile says for its rows (no drafting or
    overhead): the pricing then decides the same on any machine, under any load (live
    timings on a busy machine had made a 16-node tree look worth its rows)."""

    def observe(self, event: ev.StepEvent) -> None:
        rows = len(event.tree) + 1 if event.tree else len(event.proposed) + 1
        ms = self.profile.cost_ms(rows, event.position)
        super().observe(dataclasses.replace(event, timing=ev.Timing(0.0, ms, 0.0)))


def test_priced_by_auto_k_the_head_sends_the_nodes_worth_their_rows(tiny_backend, learned):
    """Rows all but free: the whole budget, as with a fixed K; a row costing more than any
    node can bring: nothing, declined as auto K's; a run with auto K equals plain decoding."""
    oracle = make_oracle("eagle", target=tiny_backend, eagle_head=learned[1])
    try:
        steps, _ = run(tiny_backend, oracle, k=3, n=6)
        context = tiny_backend.tokenize(PROMPT, add_special=False)
        context += [t for s in steps for t in s.emitted_ids]
        whole = oracle.propose(context, 3)
        oracle.price_with(lambda rows, n_ctx: 10.0)
        assert oracle.propose(context, 3).tokens == whole.tokens and len(whole) == 16
        oracle.price_with(lambda rows, n_ctx: 10.0 if rows == 1 else 1e9)
        dear = oracle.propose(context, 3)
        assert len(dear) == 0 and dear.declined == ev.DECLINE_AUTO_K

        plain_steps, plain = run(tiny_backend, make_oracle("none"), k=0)
        # A 2-core CPU's shape: 4 rows cost 3.3 single ones, 16 rows 6.
        ms = [30, 52, 75, 99, 125, 150, 165, 180]
        profile = Profile("synthetic", "transformers", "cpu", 2, [512],
                          [1, 2, 3, 4, 6, 8, 12, 16], [ms])
        session = Session(tiny_backend, oracle, RunSettings(PROMPT, chat=False, k=2,
                                                            max_tokens=40),
                          k_policy=ProfilePaced(oracle, profile))
        steps = [e for e in session if isinstance(e, ev.StepEvent)]
        assert_lossless(tiny_backend, session.prompt_ids, (steps, session.summary),
                        (plain_steps, plain))
        sizes = {len(s.tree) for s in steps if s.tree}
        assert sizes and max(sizes) < 16  # a confident chain is worth its rows, the rest not
        assert session.summary.totals.accepted > 0
    finally:
        oracle.close()


def test_int8_heads_draft_where_the_cpu_has_quantized_kernels():
    assert int8_engine("cpu", ["qnnpack", "onednn", "x86", "fbgemm"]) == "x86"
    assert int8_engine("cpu", ["qnnpack"]) == "qnnpack"  # an ARM CPU
    assert int8_engine("cpu", ["none"]) is None
    assert int8_engine("cuda", ["x86", "fbgemm"]) is None and int8_engine("mps", ["x86"]) is None


def test_the_int8_knob_swaps_the_head_and_keeps_the_fusion_layer_in_float(tiny_backend,
                                                                          learned):
    if reason := on_cpu_in_float32(tiny_backend):
        pytest.skip(reason)
    oracle = make_oracle("eagle", target=tiny_backend, eagle_head=learned[1])
    try:
        assert oracle.knobs()["int8"] == 1 and available_engines()
        layer = oracle.head.midlayer
        assert type(layer.mlp.up_proj) is not torch.nn.Linear  # int8 weights
        assert type(layer.self_attn.q_proj) is not torch.nn.Linear
        assert type(oracle.head.fc) is torch.nn.Linear  # the raw features: float32
        int8_steps, _ = run(tiny_backend, oracle)
        oracle.set_knob("int8", 0)
        assert type(oracle.head.midlayer.mlp.up_proj) is torch.nn.Linear
        float_steps, _ = run(tiny_backend, oracle)
        assert compare(int8_steps, float_steps).identical  # both lossless
    finally:
        oracle.close()


def test_the_registry_describes_the_eagle_oracle(tiny_backend, tmp_path):
    from specviz.engines.oracles import ORACLE_INFO

    described = ORACLE_INFO["eagle"]
    oracle = make_oracle("eagle", target=tiny_backend,
                         eagle_head=untrained(tiny_backend, tmp_path / "eagle"))
    try:
        assert oracle.knobs() == {s.name: s.default for s in described.settings}
        assert (oracle.source,) == described.sources
    finally:
        oracle.close()


def test_an_untrained_head_is_lossless_deep_and_wide(tiny_backend, tmp_path):
    oracle = make_oracle("eagle", target=tiny_backend, eagle_head=untrained(
        tiny_backend, tmp_path / "eagle"), settings={"budget": 24, "top_k": 3})
    try:
        plain_steps, _ = run(tiny_backend, make_oracle("none"), k=0)
        steps, _ = run(tiny_backend, oracle, k=7)
        assert compare(steps, plain_steps).identical
        assert max(len(s.tree) for s in steps if s.tree) == 24
    finally:
        oracle.close()


def test_sampled_eagle_runs_with_its_tree_probabilities(tiny_backend, learned):
    oracle = make_oracle("eagle", target=tiny_backend, eagle_head=learned[1])
    try:
        steps, summary = run(tiny_backend, oracle, params=SamplingParams(0.8, seed=3))
        assert summary.totals.tokens == sum(len(s.emitted_ids) for s in steps)
        assert any(s.tree for s in steps) and summary.totals.accepted > 0
    finally:
        oracle.close()


def test_a_head_can_draft_from_a_reduced_vocabulary_of_the_commonest_tokens(tiny_backend,
                                                                           tmp_path):
    """EAGLE-3's reduced draft vocabulary: the target's LM head rows of the tokens its answers
    use most, frozen; the head drafts only those, through d2t, and stays lossless."""
    answers = answers_to(tiny_backend, [PROMPT, "for i in range(10):"], tokens=80,
                         max_new=40)
    settings = et.EagleSettings(steps=30, lr=3e-3, batch=2, chat=False, draft_vocab=24)
    result = et.train(tiny_backend, answers, settings)
    kept = set((result.head.d2t + torch.arange(24)).tolist())
    trained_on, _held_out = ta.split(answers, settings.held_out, settings.seed)
    written = {t for a in trained_on for t in a.tokens}
    assert len(kept) == 24 and (written <= kept or kept <= written)  # the commonest first
    assert 0 < result.training["draft_vocab_covers"] <= 1
    weight = tiny_backend.model.get_output_embeddings().weight
    assert torch.equal(result.head.lm_head.weight, weight[sorted(kept)].float().cpu())  # frozen
    folder = et.save(result, tiny_backend, tmp_path / "eagle")
    oracle = make_oracle("eagle", target=tiny_backend, eagle_head=folder)
    try:
        plain_steps, _ = run(tiny_backend, make_oracle("none"), k=0)
        steps, _ = run(tiny_backend, oracle, k=3)
        assert compare(steps, plain_steps).identical
        assert {n.id for s in steps if s.tree for n in s.tree} <= kept
    finally:
        oracle.close()


def test_training_resumes_from_its_saved_state(tiny_backend, tmp_path):
    answers = answers_to(tiny_backend, [PROMPT, "for i in range(10):"], tokens=60,
                         max_new=30)
    settings = et.EagleSettings(steps=6, checkpoint_every=2, chat=False, batch=1)
    seen = []

    def stop_at_3(step, _steps, _loss):
        seen.append(step)
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        et.train(tiny_backend, answers, settings, stop_at_3, state_dir=tmp_path)
    assert (tmp_path / et.CHECKPOINT).exists()
    seen.clear()
    result = et.train(tiny_backend, answers, settings, lambda s, *_: seen.append(s),
                      state_dir=tmp_path)
    assert seen == [2, 3, 4, 5] and len(result.losses) == 6  # from the step-2 save
    assert not (tmp_path / et.CHECKPOINT).exists()


def test_answers_with_features_round_trip_through_the_cache(tiny_backend, tmp_path):
    answers = answers_to(tiny_backend, [PROMPT, "for i in range(10):"], tokens=30, max_new=15)
    ta.save_answers(answers, tmp_path / "a.safetensors", prompts_used=2)
    back = ta.load_answers(tmp_path / "a.safetensors")
    assert ta.prompts_used(tmp_path / "a.safetensors") == 2
    for a, b in zip(answers, back):
        assert a.prompt == b.prompt and a.tokens == b.tokens
        assert torch.equal(a.features, b.features)


# ---------------------------------------------------------------- published checkpoints


def write_published(backend, folder, pickled=False, vocab=64):
    """An EAGLE-3 head as published: config.json, a reduced draft vocabulary with its lm_head
    and d2t, no embedding, no specviz block."""
    shape = shape_for(backend.model)
    shape.draft_vocab_size = vocab
    head = EagleHead(shape)
    used = torch.arange(0, 2 * vocab, 2)  # every other target id, ascending
    head.d2t.copy_(used - torch.arange(vocab))
    state = {k: v.contiguous() for k, v in head.state_dict().items()}
    state["t2d"] = torch.zeros(shape.vocab_size, dtype=torch.bool).index_fill_(0, used, True)
    folder.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "num_hidden_layers": 1, "hidden_size": shape.hidden_size,
              "intermediate_size": shape.intermediate_size,
              "num_attention_heads": shape.num_attention_heads,
              "num_key_value_heads": shape.num_key_value_heads,
              "rms_norm_eps": 1e-5, "vocab_size": shape.vocab_size,
              "draft_vocab_size": vocab, "torch_dtype": "float16"}
    (folder / CONFIG_FILE).write_text(json.dumps(config))
    if pickled:
        torch.save(state, folder / "pytorch_model.bin")
    else:
        from safetensors.torch import save_file

        save_file(state, str(folder / WEIGHTS_FILE))
    return folder, used


@pytest.mark.parametrize("pickled", [False, True])
def test_a_published_eagle3_head_loads_and_drafts_its_own_vocabulary(tiny_backend, tmp_path,
                                                                     pickled):
    folder, used = write_published(tiny_backend, tmp_path / "published", pickled)
    oracle = make_oracle("eagle", target=tiny_backend, eagle_head=folder)
    try:
        assert oracle.layers == layers_of(tiny_backend)  # no ids in its config: the default
        plain_steps, _ = run(tiny_backend, make_oracle("none"), k=0)
        steps, _ = run(tiny_backend, oracle, k=3)
        assert compare(steps, plain_steps).identical
        drafted = {n.id for s in steps if s.tree for n in s.tree}
        assert drafted and drafted <= set(used.tolist())  # mapped through d2t
    finally:
        oracle.close()


# ---------------------------------------------------------------- bad heads


def test_bad_heads_are_one_line_and_load_nothing(tiny_backend, tiny_model_dir, tmp_path):
    good = untrained(tiny_backend, tmp_path / "good")

    def refused(folder, match):
        with pytest.raises(SpecvizError, match=match) as caught:
            make_oracle("eagle", target=tiny_backend, eagle_head=folder)
        assert "\n" not in str(caught.value)
        assert tiny_backend.features(0, 1) is None

    refused(tmp_path / "none", "no EAGLE head in .*specviz train-heads --kind eagle")
    other = tmp_path / "other"
    other.mkdir()
    config = json.loads((good / CONFIG_FILE).read_text())
    config["specviz"]["target"]["fingerprint"] = "0123456789abcdef"
    (other / CONFIG_FILE).write_text(json.dumps(config))
    (other / WEIGHTS_FILE).write_bytes((good / WEIGHTS_FILE).read_bytes())
    refused(other, "was trained for .* not this model")
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / CONFIG_FILE).write_text((good / CONFIG_FILE).read_text())
    (corrupt / WEIGHTS_FILE).write_bytes(b"\x00garbage" * 10)
    refused(corrupt, "cannot read the EAGLE head's weights")
    from safetensors.torch import load_file, save_file

    lacking = tmp_path / "lacking"
    lacking.mkdir()
    (lacking / CONFIG_FILE).write_text((good / CONFIG_FILE).read_text())
    state = load_file(str(good / WEIGHTS_FILE))
    del state["midlayer.mlp.up_proj.weight"]
    save_file(state, str(lacking / WEIGHTS_FILE))
    refused(lacking, "lacks midlayer.mlp.up_proj.weight")
    wide = tmp_path / "wide"
    wide.mkdir()
    config = json.loads((good / CONFIG_FILE).read_text())
    config.pop("specviz")
    config["target_hidden_size"] = 4096
    (wide / CONFIG_FILE).write_text(json.dumps(config))
    refused(wide, "reads a target of width 4096")
    assert head_dir(tiny_model_dir) == tiny_model_dir / "eagle"


def test_eagle_needs_the_transformers_backend(smol_llama):
    with pytest.raises(SpecvizError, match="--backend transformers"):
        make_oracle("eagle", target=smol_llama)


def test_train_an_eagle_head_then_run_it_from_the_command_line(capsys, tiny_model_dir,
                                                                tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"turns": [p]}) for p in
                                ["def add(a, b):", "The quick brown fox", "for i in range(3):"]))
    out = tmp_path / "eagle"
    args = ["train-heads", "--kind", "eagle", "--target", str(tiny_model_dir), "--corpus",
            str(corpus), "--tokens", "60", "--max-new", "20", "--heads", "3", "--steps", "4",
            "--held-out", "0.34", "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "depth  accepted" in printed and f"saved to {out}" in printed
    config = json.loads((out / CONFIG_FILE).read_text())
    assert len(config["specviz"]["accuracy"]["acceptance"]) == 3
    assert config["specviz"]["training"]["steps"] == 4
    assert main(["run", "--backend", "transformers", "--target", str(tiny_model_dir),
                 "--oracle", "eagle", "--eagle-head", str(out), "--prompt", "def add(",
                 "--max-tokens", "12", "--k", "3", "--baseline", "--json", "--no-chat"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["identical_to_baseline"] and result["oracle"] == "eagle"
    assert main(args) == 0
    assert "reusing the target's answers" in capsys.readouterr().err
