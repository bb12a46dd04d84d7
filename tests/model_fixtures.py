"""Session fixtures for tests that need a real model; import them from conftest.py.

The model is fetched when the first test asks for it (never at import or collection time), into
the usual cache or $SPECVIZ_HOME, and then reused. Where it cannot be had, the tests are skipped,
except under CI=true where a missing model is a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specviz.engines.errors import ModelError
from specviz.engines.models import pull


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    try:
        return pull("smollm2-135m")  # returns at once when the model is already present
    except (ModelError, OSError) as error:
        reason = f"smollm2-135m is not available: {error}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


def batches_round_alike(backend) -> bool:
    """Whether a tree's batch gives each node the logits its path's own batch gives, bit for
    bit (up to float32 rounding on transformers). True in float32 on the CPU for both backends
    and for transformers on CUDA; not in half precision, nor for llama.cpp on a GPU, whose
    kernels change with the batch's size (on an H200: tree rows up to 2.7 logits from their
    path's batch on smollm2's Q4_1)."""
    if getattr(backend, "dtype", None) in ("bfloat16", "float16"):
        return False
    return not (backend.name == "llama" and backend.device != "cpu")
