"""Early-exit self-speculation: the target's first layers draft, the whole target verifies."""

from __future__ import annotations

import pytest

from specviz.engines import events as ev
from specviz.engines.errors import SpecvizError
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.oracles import make_oracle
from specviz.engines.sampling import SamplingParams

PROMPT = "def add(a, b):\n    return a + b\nfor i in range(10):\n"


def run(backend, oracle, prompt=PROMPT, k=4, n=40, chat=False, **kw):
    session = Session(backend, oracle, RunSettings(prompt, chat=chat, k=k, max_tokens=n, **kw))
    steps = [e for e in session if isinstance(e, ev.StepEvent)]
    return steps, session.summary


def test_early_exit_is_lossless_and_leaves_the_cache_as_it_was(tiny_backend):
    _, plain = run(tiny_backend, make_oracle("none"), k=0)
    steps, summary = run(tiny_backend, make_oracle("early-exit", target=tiny_backend,
                                                   settings={"exit_layer": 1}))
    assert summary.text == plain.text
    assert summary.totals.proposed > 0
    first = steps[0].proposed[0]
    assert first.source == "early-exit" and first.detail == "layer 1/2"
    assert first.p_draft is not None


def test_exiting_after_the_last_layer_is_the_target_itself(tiny_backend):
    """All layers: the draft is the target, so every proposal is accepted; this also shows the
    shared cache is restored exactly after each draft (else the target's logits would move)."""
    steps, summary = run(tiny_backend, make_oracle("early-exit", target=tiny_backend,
                                                   settings={"exit_layer": 2}), k=5)
    assert summary.totals.accepted == summary.totals.proposed > 0
    assert all(s.target.kind == ev.TARGET_BONUS for s in steps[:-1])


def test_sampled_early_exit_carries_q_rows(tiny_backend):
    oracle = make_oracle("early-exit", target=tiny_backend, settings={"exit_layer": 1})
    steps, _ = run(tiny_backend, oracle, params=SamplingParams(0.8, seed=1), n=12)
    judged = [t for s in steps for t in s.proposed if t.accept_prob is not None]
    assert judged and all(0 <= t.accept_prob <= 1 for t in judged)


def test_the_exit_layer_is_a_knob_and_checked(tiny_backend):
    oracle = make_oracle("early-exit", target=tiny_backend)
    assert oracle.knobs() == {"exit_layer": 0}
    oracle.set_knob("exit_layer", 1)
    assert oracle.settings.exit_layer == 1
    with pytest.raises(SpecvizError, match=r"outside 1\.\.2"):
        oracle.set_knob("exit_layer", 3)
    with pytest.raises(SpecvizError, match="outside"):
        make_oracle("early-exit", target=tiny_backend, settings={"exit_layer": 7})


def test_early_exit_on_llama_cpp_says_to_use_transformers():
    class LlamaLike:  # a backend that declares no hidden states
        name = "llama"
        provides = frozenset()

    with pytest.raises(SpecvizError, match="--backend transformers"):
        make_oracle("early-exit", target=LlamaLike())


@pytest.mark.model
def test_smollm2_early_exit_is_lossless(smol_hf):
    prompt = ("Add type hints:\ndef scale(values, factor):\n"
              "    return [v * factor for v in values]\n")
    _, plain = run(smol_hf, make_oracle("none"), prompt, k=0, n=16, chat=True)
    oracle = make_oracle("early-exit", target=smol_hf, settings={"exit_layer": 24})
    _, summary = run(smol_hf, oracle, prompt, k=3, n=16, chat=True)
    assert summary.text == plain.text
    assert summary.totals.accepted > 0
