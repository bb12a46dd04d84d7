"""Hub names: parsed, resolved and fetched with huggingface_hub's real client from a stand-in Hub
on 127.0.0.1 (tests/hub_server.py); nothing here reaches the internet."""

from __future__ import annotations

import hashlib
import socket
import threading

import pytest

from specviz.engines.errors import ModelError
from specviz.engines.models import hub, hub_names
from specviz.engines.models.hub_names import HubName, parse, pick_gguf, quant_of
from tests.hub_server import HubServer, Repo

TOKEN = "hf_secret_token_for_tests"
WEIGHTS = bytes(range(256)) * 8  # an LFS-sized file


def transformers_repo(**kw) -> Repo:
    return Repo({"config.json": b'{"model_type": "llama"}', "tokenizer.json": b"{}",
                 "tokenizer_config.json": b"{}", "model.safetensors": WEIGHTS,
                 "README.md": b"# card", "onnx/model.onnx": b"x" * 100,
                 "pytorch_model.bin": b"p" * 100}, **kw)


def gguf_repo() -> Repo:
    return Repo({"README.md": b"# card",
                 "tiny-Q8_0.gguf": b"GGUF" + b"8" * 200,
                 "tiny-Q4_K_M.gguf": b"GGUF" + b"4" * 150,
                 "mmproj-tiny-f16.gguf": b"GGUF" + b"m" * 100,
                 "big/tiny-F16-00001-of-00002.gguf": b"GGUF" + b"a" * 100,
                 "big/tiny-F16-00002-of-00002.gguf": b"b" * 100})


REPOS = {"org/tiny": transformers_repo(), "org/tiny-GGUF": gguf_repo(),
         "org/gated": transformers_repo(gated=True), "org/docs": Repo({"README.md": b"hi"})}


@pytest.fixture
def served(monkeypatch, tmp_path):
    with HubServer(REPOS, token=TOKEN) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no stored login
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield server


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


# --- names --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("Qwen/Qwen2.5-0.5B-Instruct", HubName("Qwen/Qwen2.5-0.5B-Instruct")),
    ("Qwen/Qwen2.5-0.5B-Instruct@v1.0", HubName("Qwen/Qwen2.5-0.5B-Instruct", "v1.0")),
    ("org/repo-GGUF:Q4_K_M", HubName("org/repo-GGUF", None, "Q4_K_M")),
    ("org/repo-GGUF@abc123:q8_0", HubName("org/repo-GGUF", "abc123", "q8_0")),
    ("org/repo-GGUF/model-Q4_0.gguf", HubName("org/repo-GGUF", None, None, "model-Q4_0.gguf")),
    ("org/repo@dev/sub/m.gguf", HubName("org/repo", "dev", None, "sub/m.gguf")),
    ("hf.co/org/repo:Q4_K_M", HubName("org/repo", None, "Q4_K_M")),
    ("https://huggingface.co/org/repo", HubName("org/repo")),
    ("smollm2-135m", None), ("./org/repo", None), ("/abs/org/repo", None),
    ("~/models/x", None), ("a/b/c", None), ("model.gguf", None), ("org/model.gguf", None),
])
def test_parse(text, expected):
    assert parse(text) == expected
    if expected:
        assert parse(str(expected)) == expected  # the name survives a round trip


@pytest.mark.parametrize("filename, quant", [
    ("qwen2.5-coder-7b-instruct-q4_k_m.gguf", "Q4_K_M"),
    ("Model-IQ2_XXS-00001-of-00003.gguf", "IQ2_XXS"), ("m.Q8_0.gguf", "Q8_0"),
    ("m-bf16.gguf", "BF16"), ("Q4_K_M/m-Q4_K_M-00002-of-00002.gguf", "Q4_K_M"),
    ("gemma-3-270m-it-F16.gguf", "F16"), ("plain.gguf", None),
])
def test_quant_of(filename, quant):
    assert quant_of(filename) == quant


def test_pick_gguf_quant_default_split_and_listing():
    files = sorted(gguf_repo().files)
    assert pick_gguf(HubName("o/r", quant="q8_0"), files) == ["tiny-Q8_0.gguf"]
    assert pick_gguf(HubName("o/r"), files) == ["tiny-Q4_K_M.gguf"]  # llama.cpp's default
    assert pick_gguf(HubName("o/r", quant="F16"), files) == [
        "big/tiny-F16-00001-of-00002.gguf", "big/tiny-F16-00002-of-00002.gguf"]
    with pytest.raises(ModelError, match=r"^o/r has no Q2_K GGUF; its quants: F16, Q4_K_M, Q8_0$"):
        pick_gguf(HubName("o/r", quant="Q2_K"), files)
    with pytest.raises(ModelError, match="is not there"):
        pick_gguf(HubName("o/r", quant="F16"), [f for f in files if "F16-00002" not in f])


def test_transformers_files_only_what_a_model_needs():
    files = sorted(transformers_repo().files)
    assert hub_names.transformers_files(files) == [
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]


# --- against the stand-in Hub -------------------------------------------------------------------


def test_transformers_repo_fetched_into_the_hub_cache_and_found_offline(served, monkeypatch):
    name = parse("org/tiny")
    seen = []
    path = hub.pull(name, progress=lambda d, t, m: seen.append((d, t)))
    assert (path / "config.json").exists() and (path / "model.safetensors").read_bytes() == WEIGHTS
    assert not (path / "README.md").exists() and not (path / "onnx").exists()
    assert not (path / "pytorch_model.bin").exists()  # safetensors preferred
    assert seen[-1][0] == seen[-1][1] > len(WEIGHTS)
    assert str(path).startswith(str(hub.cache_root()))
    monkeypatch.setenv("HF_ENDPOINT", closed_port())
    assert hub.cached(name) == path
    assert hub.pull(name) == path  # offline: the cached copy, said in one progress line
    record = hub.identify(name, path)
    assert record["hub"]["repo"] == "org/tiny"
    assert record["hub"]["revision"] == REPOS["org/tiny"].commit
    assert record["hub"]["files"]["model.safetensors"] == hashlib.sha256(WEIGHTS).hexdigest()


def test_gguf_by_quant_tag_with_split_parts(served):
    path = hub.pull(parse("org/tiny-GGUF:F16"))
    assert path.name == "tiny-F16-00001-of-00002.gguf"
    assert (path.parent / "tiny-F16-00002-of-00002.gguf").read_bytes() == b"b" * 100
    default = hub.pull(parse("org/tiny-GGUF"))
    assert default.name == "tiny-Q4_K_M.gguf"
    record = hub.identify(parse("org/tiny-GGUF:F16"), path)
    assert list(record["hub"]["files"]) == ["big/tiny-F16-00001-of-00002.gguf",
                                            "big/tiny-F16-00002-of-00002.gguf"]
    assert record["sha256"] == hashlib.sha256(b"GGUF" + b"a" * 100).hexdigest()


def test_gguf_by_file_name(served):
    path = hub.pull(parse("org/tiny-GGUF/tiny-Q8_0.gguf"))
    assert path.read_bytes() == b"GGUF" + b"8" * 200


@pytest.mark.parametrize("text, line", [
    ("org/nope", "no such repository on the Hub: org/nope (or it is private"),
    ("org/tiny-GGUF:Q2_K", "org/tiny-GGUF has no Q2_K GGUF; its quants: "),
    ("org/tiny-GGUF/missing.gguf", "org/tiny-GGUF has no file missing.gguf; its GGUF files: "),
    ("org/docs", "org/docs is neither a transformers model (no config.json) nor has a GGUF"),
    ("org/tiny@v9", "org/tiny has no revision 'v9'"),
    ("org/gated", "org/gated is gated: accept its terms on "),
])
def test_one_clear_line_each(served, text, line):
    with pytest.raises(ModelError) as caught:
        hub.pull(parse(text))
    message = str(caught.value)
    assert message.startswith(line) and "\n" not in message


def test_gated_repo_with_token_and_the_token_never_shown(served, monkeypatch, capfd):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    path = hub.pull(parse("org/gated"))
    assert (path / "config.json").exists()
    assert any(auth == f"Bearer {TOKEN}" for _, _, auth in served.requests)
    out, err = capfd.readouterr()
    assert TOKEN not in out + err + str(hub.identify(parse("org/gated"), path))


def test_offline_says_so_and_what_is_cached(served, monkeypatch):
    hub.pull(parse("org/tiny-GGUF:Q8_0"))
    monkeypatch.setenv("HF_ENDPOINT", closed_port())
    with pytest.raises(hub.HubOffline, match=r"^offline \(the Hub cannot be reached: .*\) and "
                       r"org/tiny-GGUF:F16 is not in the cache; cached of org/tiny-GGUF: "
                       r"tiny-Q8_0.gguf$"):
        hub.pull(parse("org/tiny-GGUF:F16"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(hub.HubOffline, match="HF_HUB_OFFLINE is set"):
        hub.pull(parse("org/nothing-here"))
    assert hub.pull(parse("org/tiny-GGUF:Q8_0")).name == "tiny-Q8_0.gguf"


def test_cancel_stops_the_download(served):
    REPOS["org/slow"] = Repo({"config.json": b"{}", "model.safetensors": b"s" * (64 << 20)})
    cancel = threading.Event()

    def progress(done, total, message):
        cancel.set()

    from specviz.engines.models import DownloadCancelled

    with pytest.raises(DownloadCancelled, match=r"^download cancelled$"):
        hub.pull(parse("org/slow"), progress=progress, cancel=cancel)
    assert hub.cached(parse("org/slow")) is None
