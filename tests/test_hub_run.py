"""A pair named by Hub names, fetched from the stand-in Hub and run end to end from the command
line: the backend follows the format, the trace records repo, revision and files, never the
token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specviz.app.cli.main import main
from tests.hub_server import HubServer, Repo
from tests.tiny_gguf import write_tiny_gguf

TOKEN = "hf_token_that_must_not_leak"


def folder_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def hub_with_models(tiny_model_dir, tmp_path, monkeypatch):
    gguf = write_tiny_gguf(tmp_path / "tiny-Q4_0.gguf")
    repos = {"org/tiny-llama": Repo(folder_files(tiny_model_dir), gated=True),
             "org/tiny-GGUF": Repo({"tiny-Q4_0.gguf": gguf.read_bytes(), "README.md": b"x"})}
    with HubServer(repos, token=TOKEN) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        monkeypatch.delenv("SPECVIZ_NO_FETCH", raising=False)
        yield server


def run_draft_lane(draft: str, trace: Path) -> int:
    """A draft lane on the Hub target, against plain decoding, its trace written."""
    return main(["run", "--target", "org/tiny-llama", "--oracle", "draft", "--draft", draft,
                 "--k", "3", "--prompt", "def add(", "--max-tokens", "10", "--baseline",
                 "--json", "--no-chat", "--trace", str(trace)])


def test_a_transformers_pair_by_hub_names(hub_with_models, tmp_path, capsys):
    trace = tmp_path / "run.jsonl"
    assert run_draft_lane("org/tiny-llama", trace) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["identical_to_baseline"] and result["oracle"] == "draft"
    assert "org/tiny-llama is not downloaded yet; fetching it" in captured.err
    text = trace.read_text()
    header = json.loads(text.splitlines()[0])
    target = header["target"]
    assert target["hub"]["repo"] == "org/tiny-llama" and len(target["hub"]["revision"]) == 40
    assert TOKEN not in text + captured.out + captured.err


def test_a_gguf_by_quant_tag_runs_on_llama_cpp(hub_with_models, capsys):
    assert main(["run", "--target", "org/tiny-GGUF:Q4_0", "--oracle", "prompt-lookup",
                 "--k", "3", "--prompt", "def x", "--max-tokens", "6", "--json",
                 "--no-chat"]) == 0
    assert json.loads(capsys.readouterr().out)["oracle"] == "prompt-lookup"
    assert main(["models", "path", "org/tiny-GGUF:Q4_0"]) == 0
    assert capsys.readouterr().out.strip().endswith("tiny-Q4_0.gguf")


def test_no_fetch_names_the_pull_command(hub_with_models, capsys):
    assert main(["run", "--target", "org/tiny-GGUF:Q4_0", "--no-fetch", "--prompt", "x"]) == 2
    assert capsys.readouterr().err.strip() == (
        "specviz: org/tiny-GGUF:Q4_0 is not downloaded yet; fetch it with `specviz models pull "
        f"org/tiny-GGUF:Q4_0` (from {hub_with_models.url})")


def test_a_hub_draft_with_another_tokenizer_is_routed_to_cross_draft(
        hub_with_models, tiny_model_dir, tmp_path, capsys):
    from tests.tiny_model import build_tiny_model

    other = build_tiny_model(tmp_path / "other", seed=1, vocab_size=360,
                             extra_corpus=("zebra quartz jukebox vexing waltz " * 3,))
    hub_with_models.repos["org/other-vocab"] = Repo(folder_files(other))
    trace = tmp_path / "routed.jsonl"
    assert run_draft_lane("org/other-vocab", trace) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["identical_to_baseline"]
    assert ("org/other-vocab does not share the target's tokenizer (" in captured.err
            and "this lane drafts through text instead (cross-draft)" in captured.err)
    header = json.loads(trace.read_text().splitlines()[0])
    assert header["oracle"] == "cross-draft" and header["draft"]["hub"]["repo"] == "org/other-vocab"
