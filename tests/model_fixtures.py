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


TINY_FIXTURES = {"llama": ("tiny_backend", "disagreeing_draft_backend"),
                 "qwen2": ("tiny_qwen2_backend", "qwen2_disagreeing_draft_backend")}


def tiny_target_and_draft(request, arch: str):
    """(the tiny target of `arch`, a disagreeing sibling draft of it) on the transformers
    backend."""
    return tuple(request.getfixturevalue(name) for name in TINY_FIXTURES[arch])


def batches_round_alike(backend) -> bool:
    """Whether a tree's batch gives each node the logits its path's own batch gives, bit for
    bit (up to float32 rounding on transformers). True in float32 on the CPU for both backends
    and for transformers on CUDA; not in half precision, nor for llama.cpp on a GPU, whose
    kernels change with the batch's size (on an H200: tree rows up to 2.7 logits from their
    path's batch on smollm2's Q4_1)."""
    if getattr(backend, "dtype", None) in ("bfloat16", "float16"):
        return False
    return not (backend.name == "llama" and backend.device != "cpu")


def assert_lossless(backend, prompt_ids, spec, plain, what: str = "") -> None:
    """Speculation's run against plain decoding's, each (steps, summary): the same tokens, as
    many of them, ended for the same reason, where the backend's batches round alike;
    elsewhere that, or parted at a near-tie below the batch noise measured on that context
    (half precision on a CPU, whose kernels change with the rows' count; llama.cpp on a GPU),
    reported and never hidden. A run that ends early, or runs on past plain decoding's end,
    fails here even where every token both runs made agrees."""
    from specviz.engines.bench.compare import check_against_plain, emitted

    (steps, summary), (plain_steps, plain_summary) = spec, plain
    result = check_against_plain(backend, prompt_ids, steps, plain_steps)
    if not batches_round_alike(backend) and not result.identical:
        assert result.margin < result.tie_threshold, (what, result.note)
        return  # parted at a near-tie: what follows is another text, of its own length
    assert result.identical, (what, result.note)
    ours, theirs = emitted(steps), emitted(plain_steps)
    assert len(ours) == len(theirs), (what, f"{len(ours)} tokens against plain decoding's "
                                            f"{len(theirs)}")
    assert summary.totals.tokens == plain_summary.totals.tokens == len(theirs), what
    assert summary.reason == plain_summary.reason, (what, summary.reason, plain_summary.reason)
    assert summary.text == plain_summary.text, what


def rejections(steps) -> int:
    """How many proposed tokens (a tree's refused children among them) the target judged and
    refused in `steps`: a lossless check proves the rollback only where this is not 0."""
    from specviz.engines import events as ev

    return sum(1 for s in steps for t in s.proposed
               if t.reject_reason in (ev.REJECT_MISMATCH, ev.REJECT_SAMPLED))


def prompt_ids_of(backend, prompt: str, chat: bool = False) -> list[int]:
    """The ids a session starts from for `prompt`."""
    from specviz.engines.loop.session import RunSettings, Session
    from specviz.engines.oracles import make_oracle

    return list(Session(backend, make_oracle("none"), RunSettings(prompt, chat=chat)).prompt_ids)
