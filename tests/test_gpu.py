"""On a CUDA GPU (SPECVIZ_TEST_DEVICE=cuda; benchmarks/gpu/gpu_run.py test runs these there):
the fixtures' models are on the card, llama.cpp offloads every layer, the card's own dtype
rule, and greedy speculation on smollm2 in the run's dtype (SPECVIZ_DTYPE: float32, then
bfloat16) is identical to plain decoding or its divergence is explained by the measured
batched-vs-single noise, never hidden. Skipped, with the reason, anywhere else."""

from __future__ import annotations

import pytest

from specviz.engines import events as ev
from specviz.engines.bench.compare import check_against_plain
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.machine.device_choice import DeviceFacts, torch_dtype
from specviz.engines.oracles import make_oracle

pytestmark = pytest.mark.gpu

CODE_EDIT = (
    "Add type hints to this function. Return the full code.\n\n"
    "def scale(values, factor):\n    result = []\n    for v in values:\n"
    "        result.append(v * factor)\n    return result\n"
)


def run(backend, oracle, k, n=96):
    session = Session(backend, oracle, RunSettings(CODE_EDIT, chat=True, k=k, max_tokens=n))
    events = list(session)
    return [e for e in events if isinstance(e, ev.StepEvent)], events[-1]


def test_the_model_fixtures_are_on_the_card(tiny_backend, tiny_draft_backend):
    for backend in (tiny_backend, tiny_draft_backend):
        assert backend.device.startswith("cuda")
        assert next(backend.model.parameters()).device.type == "cuda"


def test_auto_dtype_follows_the_cards_bfloat16():
    """The rule tested with injected facts (test_device_choice.py), on this card's own."""
    import torch

    facts = DeviceFacts.read()
    native = torch.cuda.get_device_capability()[0] >= 8  # Ampere and later
    assert facts.cuda and facts.cuda_bf16 == native
    assert torch_dtype("cuda", None, facts) == ("bfloat16" if native else "float16")


def test_llama_offloads_every_layer(smol_llama):
    """Every repeating layer on the card: llama.cpp may keep the token embeddings in host
    memory (they are looked up, not multiplied), so most of the weights, not all, are CUDA's."""
    buffers = smol_llama.weight_buffers
    on_card = sum(mib for name, mib in buffers.items() if name.startswith("CUDA"))
    assert smol_llama.device != "cpu", buffers
    assert on_card > 0.5 * sum(buffers.values()), buffers


@pytest.mark.parametrize("backend_name", ["smol_hf", "smol_llama"])
@pytest.mark.parametrize("oracle_name", ["prompt-lookup", "ngram"])
def test_greedy_speculation_is_lossless_or_explained(backend_name, oracle_name, request):
    backend = request.getfixturevalue(backend_name)
    plain_steps, plain = run(backend, make_oracle("none"), k=0)
    steps, summary = run(backend, make_oracle(oracle_name, target=backend), k=4)
    prompt_ids = backend.encode_prompt(backend.format_prompt(CODE_EDIT, True), True)
    result = check_against_plain(backend, prompt_ids, steps, plain_steps)
    dtype = getattr(backend, "dtype", "the GGUF's types")
    if result.identical:
        assert summary.text == plain.text
    else:  # reported with its margin, and within the noise measured on this card
        assert result.margin < result.tie_threshold, f"{dtype}: {result.note}"
        assert "near-tie" in result.note
    assert summary.totals.accepted > 0
