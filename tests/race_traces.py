"""Traces of a three-lane race on a tiny random model, for the export tests."""

from __future__ import annotations

from pathlib import Path

from specviz.app.cli.main import main

# Repeats, so prompt lookup and the n-gram cache find something to copy even from a random model.
PROMPT = "x = [1, 2, 3]\ny = [1, 2, 3]\nz = [1, 2, 3]\nw = [1, 2"
ORACLES = ("none", "prompt-lookup", "ngram")


def record_race(model_dir: Path, folder: Path, max_tokens: int) -> list[Path]:
    """One trace per oracle of ORACLES, of PROMPT, in `folder`: on transformers for a model
    folder, on llama.cpp for a .gguf file (the backend its format calls for)."""
    paths = []
    for oracle in ORACLES:
        path = folder / f"{oracle}.jsonl"
        assert main(["run", "--target", str(model_dir), "--no-chat", "--prompt", PROMPT,
                     "--max-tokens", str(max_tokens), "--k", "3", "--oracle", oracle,
                     "--trace", str(path)]) == 0
        paths.append(path)
    return paths
