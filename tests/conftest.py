"""Shared fixtures: a tiny random model built here, and the real smollm2-135m (fetched once)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).parent))  # helper modules beside the tests

from model_fixtures import smollm2_path  # noqa: E402,F401  (a fixture, used by name)
from tiny_model import build_tiny_model  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer random Llama with a real byte-level BPE tokenizer, saved to a temp folder."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tiny_backend(tiny_model_dir):
    from specviz.engines.backends.hf import TransformersBackend

    return TransformersBackend(tiny_model_dir, device="cpu")


@pytest.fixture(scope="session")
def tiny_draft_backend(tiny_model_dir):
    """A second instance of the same model: a draft that should agree with the target."""
    from specviz.engines.backends.hf import TransformersBackend

    return TransformersBackend(tiny_model_dir, device="cpu")


@pytest.fixture(scope="session")
def smol_llama(smollm2_path):
    from specviz.engines.backends import load_backend

    return load_backend("llama", smollm2_path, n_ctx=2048)


@pytest.fixture(scope="session")
def smol_hf(smollm2_path):
    from specviz.engines.backends import load_backend

    return load_backend("transformers", smollm2_path, device="cpu")
