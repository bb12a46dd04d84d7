"""Models already on this machine, found in each tool's store laid out as that tool lays it out
(the Hugging Face cache filled by huggingface_hub itself from the stand-in Hub)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specviz.app.cli.main import main
from specviz.engines.models import hub, resolve, side_folder
from specviz.engines.models import local as local_models
from specviz.engines.models.hub_names import parse
from specviz.engines.models.local import Places
from tests.hub_server import HubServer, Repo

GGUF = b"GGUF" + b"\0" * 300


def ollama_store(root: Path) -> Path:
    """Ollama's layout: a manifest per model:tag naming its GGUF blob and its config blob."""
    blobs = root / "blobs"
    blobs.mkdir(parents=True)
    (blobs / "sha256-aaa").write_bytes(GGUF)
    (blobs / "sha256-bbb").write_bytes(GGUF + b"b")
    (blobs / "sha256-ccc").write_text(json.dumps({"model_format": "gguf", "file_type": "Q4_K_M"}))
    manifest = {"schemaVersion": 2, "config": {"digest": "sha256:ccc"},
                "layers": [{"mediaType": "application/vnd.ollama.image.model",
                            "digest": "sha256:aaa", "size": len(GGUF)},
                           {"mediaType": "application/vnd.ollama.image.template",
                            "digest": "sha256:ttt", "size": 10}]}
    for where, blob in (("registry.ollama.ai/library/llama3.2/1b", "aaa"),
                        ("hf.co/org/tiny-GGUF/Q4_K_M", "bbb")):
        path = root / "manifests" / where
        path.parent.mkdir(parents=True)
        layers = [{**manifest["layers"][0], "digest": f"sha256:{blob}"}, manifest["layers"][1]]
        path.write_text(json.dumps({**manifest, "layers": layers}))
    gone = root / "manifests" / "registry.ollama.ai/library/gone/latest"
    gone.parent.mkdir(parents=True)
    gone.write_text(json.dumps({**manifest, "layers": [{**manifest["layers"][0],
                                                        "digest": "sha256:zzz"}]}))
    return root


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A home with every tool's store; the Hub cache filled from the stand-in Hub."""
    home = tmp_path / "home"
    repos = {"org/tiny": Repo({"config.json": b"{}", "model.safetensors": b"w" * 100}),
             "org/tiny-GGUF": Repo({"tiny-Q8_0.gguf": GGUF, "mmproj-tiny.gguf": GGUF})}
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    with HubServer(repos) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        hub.pull(parse("org/tiny"))
        hub.pull(parse("org/tiny-GGUF:Q8_0"))
    lm = home / ".lmstudio" / "models" / "lmstudio-community" / "Qwen-GGUF"
    lm.mkdir(parents=True)
    (lm / "Qwen-Q4_K_M-00001-of-00002.gguf").write_bytes(GGUF)
    (lm / "Qwen-Q4_K_M-00002-of-00002.gguf").write_bytes(b"x" * 100)
    llama = tmp_path / "llama-cache"
    llama.mkdir()
    (llama / "bartowski_Phi-GGUF_Phi-Q6_K.gguf").write_bytes(GGUF)
    mine = tmp_path / "mine"
    (mine / "hf-model").mkdir(parents=True)
    (mine / "hf-model" / "config.json").write_text("{}")
    (mine / "hf-model" / "model.safetensors").write_bytes(b"w" * 50)
    (mine / "m.eagle").mkdir()  # heads specviz trained: not a model
    (mine / "m.eagle" / "config.json").write_text('{"specviz": {}}')
    (mine / "m.eagle" / "model.safetensors").write_bytes(b"h")
    (mine / "deep" / "er").mkdir(parents=True)
    (mine / "deep" / "er" / "x.BF16.gguf").write_bytes(GGUF)
    env = {"LLAMA_CACHE": str(llama), "OLLAMA_MODELS": str(ollama_store(tmp_path / "ollama"))}
    monkeypatch.setenv("HOME", str(home))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Places.here([mine], env=env, home=home)


def test_every_store_is_found_with_format_size_quant_and_where(machine):
    found = {(m.where, m.name): m for m in local_models.find(machine)}
    assert set(found) == {
        ("Hugging Face cache", "org/tiny"), ("Hugging Face cache", "org/tiny-GGUF/tiny-Q8_0.gguf"),
        ("LM Studio", "lmstudio-community/Qwen-GGUF/Qwen-Q4_K_M-00001-of-00002.gguf"),
        ("llama.cpp cache", "bartowski_Phi-GGUF_Phi-Q6_K.gguf"),
        ("Ollama", "llama3.2:1b"), ("Ollama", "hf.co/org/tiny-GGUF:Q4_K_M"),
        ("folder", "hf-model"), ("folder", "deep/er/x.BF16.gguf"),
    }
    split = found[("LM Studio", "lmstudio-community/Qwen-GGUF/Qwen-Q4_K_M-00001-of-00002.gguf")]
    assert split.size == len(GGUF) + 100 and split.quant == "Q4_K_M" and split.format == "gguf"
    ollama = found[("Ollama", "llama3.2:1b")]
    assert ollama.quant == "Q4_K_M" and ollama.path.name == "sha256-aaa"
    assert found[("Hugging Face cache", "org/tiny")].format == "transformers"
    assert found[("folder", "deep/er/x.BF16.gguf")].quant == "BF16"
    for model in found.values():  # each path is what --target takes, as it lies: nothing copied
        assert resolve(str(model.path)) == model.path


def test_nothing_there_is_nothing_found(tmp_path):
    empty = Places(tmp_path / "hf", (tmp_path / "lm",), tmp_path / "llama", (tmp_path / "o",))
    assert local_models.find(empty) == []


def test_models_list_local_prints_a_table(machine, capsys):
    assert main(["models", "list", "--local", "--folder", str(machine.folders[0])]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NAME", "FORMAT", "SIZE", "(MB)", "QUANT", "WHERE", "PATH"]
    assert any(line.startswith("llama3.2:1b") and "Ollama" in line and "Q4_K_M" in line
               for line in out)
    assert any(line.startswith("hf-model ") and "transformers" in line for line in out)


def test_a_vanished_file_is_one_line(machine, capsys):
    model = next(m for m in local_models.find(machine) if m.where == "llama.cpp cache")
    model.path.unlink()
    assert main(["models", "path", str(model.path)]) == 2
    assert capsys.readouterr().err.strip() == f"specviz: no such model file or folder: {model.path}"


def test_heads_for_a_model_in_another_tools_store_go_to_specvizs_cache(machine, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path / "sv"))
    snapshot = resolve("org/tiny")
    assert side_folder(snapshot, "eagle").is_relative_to(tmp_path / "sv" / "heads")
    blob = next(m.path for m in local_models.find(machine) if m.name == "llama3.2:1b")
    assert side_folder(blob, "medusa") == tmp_path / "sv" / "heads" / "sha256-aaa" / "medusa"
    mine = tmp_path / "mine" / "hf-model"
    assert side_folder(mine, "eagle") == mine / "eagle"
    assert side_folder(tmp_path / "m.Q4.gguf", "medusa") == tmp_path / "m.Q4.medusa"
