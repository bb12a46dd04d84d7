"""EAGLE heads exported as GGUFs for llama-server's draft-eagle3: through llama.cpp's own
converter (from the sources llama-server is built from), loaded and drafted with by that
llama-server on smollm2-135m; and heads for another target refused, nothing written.

The heads have random weights of smollm2's shape: what is tested is the layout, the
conversion and llama.cpp's loading and drafting, not what a trained head accepts (that is
measured in docs/results/eagle-llama-server.md)."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
import torch
from llama_server import RunningServer

from specviz.app.cli.main import main
from specviz.engines.eagle import gguf_export, llama_convert
from specviz.engines.eagle.checkpoint import default_layers, save_head
from specviz.engines.eagle.head import EagleHead, HeadShape
from specviz.engines.errors import SpecvizError
from specviz.engines.medusa.heads import TargetId

WIDTH, VOCAB, LAYERS = 576, 49152, 30  # smollm2-135m's
DRAFT_VOCAB = 512


def shape(width: int = WIDTH, draft_vocab: int | None = DRAFT_VOCAB) -> HeadShape:
    return HeadShape(width, 1536, 9, 3, width // 9, width, VOCAB, draft_vocab, 1e-5, 100000.0)


def random_head(s: HeadShape, seed: int = 0) -> EagleHead:
    torch.manual_seed(seed)
    head = EagleHead(s)
    if s.draft_vocab_size:
        ids = torch.sort(torch.randperm(VOCAB)[: s.draft_vocab_size]).values
        head.d2t.copy_(ids - torch.arange(len(ids)))
    return head


def specviz_head(folder, s: HeadShape, layers=None):
    """A head in the layout `specviz train-heads --kind eagle` saves."""
    target = TargetId("SmolLM2-135M-Instruct.Q4_1.gguf", "0" * 16, s.target_hidden_size,
                      s.vocab_size)
    return save_head(random_head(s), layers or default_layers(LAYERS), folder, target, {}, {})


def published_head(folder, layers):
    """A head as EAGLE-3's authors publish them: pytorch_model.bin with t2d beside d2t, the
    layers it reads under eagle_config, no specviz block."""
    s = shape()
    head = random_head(s, seed=1)
    state = dict(head.state_dict())
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[head.d2t + torch.arange(DRAFT_VOCAB)] = True
    state["t2d"] = t2d
    folder.mkdir(parents=True)
    torch.save(state, folder / "pytorch_model.bin")
    config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
              "hidden_size": WIDTH, "intermediate_size": 1536, "num_attention_heads": 9,
              "num_key_value_heads": 3, "num_hidden_layers": 1, "rms_norm_eps": 1e-5,
              "rope_theta": 100000.0, "vocab_size": VOCAB, "draft_vocab_size": DRAFT_VOCAB,
              "max_position_embeddings": 2048,
              "eagle_config": {"eagle_aux_hidden_state_layer_ids": layers}}
    (folder / "config.json").write_text(json.dumps(config))
    return folder, head


@pytest.fixture(scope="module")
def converter():
    try:
        return llama_convert.sources()
    except SpecvizError as exc:
        pytest.skip(str(exc))


def fields(path):
    from gguf import GGUFReader

    reader = GGUFReader(path)
    values = {f.name: f.contents() for f in reader.fields.values()}
    tensors = {t.name: t for t in reader.tensors}
    return values, tensors


@pytest.mark.parametrize("draft_vocab", [DRAFT_VOCAB, None], ids=["own-vocab", "whole-vocab"])
def test_a_trained_head_drafts_in_llama_server(converter, smollm2_path, tmp_path, capsys,
                                               monkeypatch, draft_vocab):
    server = llama_convert.server_binary()
    if server is None:
        pytest.skip("llama-server is not built here (specviz llama-server build)")
    head = specviz_head(tmp_path / "head", shape(draft_vocab=draft_vocab))
    out = tmp_path / "head.gguf"
    code = main(["heads", "export-gguf", str(head), "--target", str(smollm2_path),
                 "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert capsys.readouterr().out.strip() == str(out)

    values, tensors = fields(out)
    assert values["general.architecture"] == "eagle3"
    assert list(values["eagle3.target_layers"]) == default_layers(LAYERS)
    assert values["eagle3.target_hidden_size"] == WIDTH
    if draft_vocab:  # d2t is written as the target's own ids, the head's lm_head beside it
        d2t = np.asarray(tensors["d2t"].data).reshape(-1)
        expected = random_head(shape()).d2t + torch.arange(DRAFT_VOCAB)
        assert d2t.tolist() == expected.tolist()
        assert "output.weight" in tensors
    else:  # drafted through the target's own output layer, as specviz does
        assert "d2t" not in tensors and "output.weight" not in tensors

    # OpenMP's threads spin between the target's and the head's small graphs: on a busy
    # 2-core machine that took draft-eagle3 from 19 to 4 tokens/s and its start to 6 s.
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    running = RunningServer(server, smollm2_path, "-md", str(out), "--spec-type",
                            "draft-eagle3", "--spec-draft-n-max", "3")
    try:
        reply = httpx.post(running.url + "/completion", timeout=60, json={
            "prompt": "def add(a, b):\n", "n_predict": 12, "temperature": 0,
            "cache_prompt": False}).json()
    finally:
        running.close()
    assert reply["tokens_predicted"] == 12
    assert reply["timings"]["draft_n"] > 0  # the head drafted


def test_a_published_head_converts_with_the_layers_it_names(converter, smollm2_path, tmp_path):
    folder, head = published_head(tmp_path / "published", [1, 14, 26])
    out = gguf_export.export_gguf(folder, smollm2_path, tmp_path / "published.gguf")
    values, tensors = fields(out)
    assert list(values["eagle3.target_layers"]) == [1, 14, 26]  # not the default 2, 15, 27
    assert "t2d" not in tensors
    d2t = np.asarray(tensors["d2t"].data).reshape(-1)
    assert d2t.tolist() == (head.d2t + torch.arange(DRAFT_VOCAB)).tolist()


def test_the_converters_refusal_is_one_line_and_nothing_is_written(converter, smollm2_path,
                                                                   tmp_path):
    head = specviz_head(tmp_path / "head", shape())
    from safetensors.torch import load_file, save_file

    weights = load_file(head / "model.safetensors")
    weights["d2t"] = torch.zeros(DRAFT_VOCAB, dtype=torch.long)  # each draft id -> itself
    weights["d2t"][1] = -1  # draft id 1 -> target id 0 again: a duplicate
    save_file(weights, head / "model.safetensors")
    out = tmp_path / "out" / "head.gguf"
    with pytest.raises(SpecvizError, match=r"converter refused .*duplicate target ids"):
        gguf_export.export_gguf(head, smollm2_path, out)
    assert list(out.parent.iterdir()) == []


def another_target(folder, width: int = WIDTH, layers: int = LAYERS):
    """A transformers folder's config: all the export reads of a target before converting."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({
        "hidden_size": width, "num_hidden_layers": layers, "vocab_size": VOCAB,
        "max_position_embeddings": 2048}))
    return folder


@pytest.mark.parametrize("target, says", [
    ({"width": 960}, "reads a target of width 576; target has 960"),
    ({"layers": 32}, "was trained on a 30-layer target; target has 32 layers"),
    ({"layers": 24}, "reads target layers [2, 15, 27]; target has 24"),
])
def test_a_head_for_another_target_is_refused_in_one_line(tmp_path, capsys, target, says):
    head = specviz_head(tmp_path / "head", shape())
    model = another_target(tmp_path / "target", **target)
    out = tmp_path / "out" / "head.gguf"
    code = main(["heads", "export-gguf", str(head), "--target", str(model), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("specviz: the EAGLE head in") and says in err, err
    assert not out.parent.exists()


def test_a_published_heads_layers_must_fit_the_target(tmp_path):
    folder, _ = published_head(tmp_path / "published", [2, 15, 31])
    with pytest.raises(SpecvizError, match=r"reads target layers \[2, 15, 31\]; target has 30"):
        gguf_export.layout_for(folder, gguf_export.target_facts(another_target(
            tmp_path / "target")))


def test_a_folder_without_a_head_is_one_line(tmp_path, capsys):
    model = another_target(tmp_path / "target")
    code = main(["heads", "export-gguf", str(tmp_path / "nothing"), "--target", str(model)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("specviz: no EAGLE head in"), err
