"""Drafting across tokenizers: the draft's text re-tokenized for the target."""

from __future__ import annotations

import pytest
from model_fixtures import rejections
from tiny_model import build_tiny_model

from specviz.engines import events as ev
from specviz.engines.errors import IncompatibleModels
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.oracles import make_oracle
from specviz.engines.oracles.draft import check_compatible
from specviz.engines.sampling import SamplingParams

PROMPT = "def add(a, b):\n    return a + b\n数据 模型 🚀 Café"


@pytest.fixture(scope="module")
def other_vocab_backend(tmp_path_factory):
    """A tiny model whose tokenizer learnt other merges: same bytes, other tokens from id 259."""
    from specviz.engines.backends.hf import TransformersBackend

    extra = ("zebra quartz jukebox vexing waltz " * 3, "résumé über straße 東京 🎉")
    folder = build_tiny_model(tmp_path_factory.mktemp("tiny-other"), seed=1, vocab_size=360,
                              extra_corpus=extra)
    return TransformersBackend(folder, device="cpu")


def run(backend, oracle, prompt=PROMPT, k=4, n=40, chat=False, **kw):
    session = Session(backend, oracle, RunSettings(prompt, chat=chat, k=k, max_tokens=n, **kw))
    steps = [e for e in session if isinstance(e, ev.StepEvent)]
    return steps, session.summary


def test_the_draft_check_offers_cross_draft(tiny_backend, other_vocab_backend):
    with pytest.raises(IncompatibleModels, match="--oracle cross-draft"):
        check_compatible(tiny_backend, other_vocab_backend)


def test_cross_draft_is_lossless_with_another_vocabulary(tiny_backend, other_vocab_backend):
    _, plain = run(tiny_backend, make_oracle("none"), k=0)
    oracle = make_oracle("cross-draft", target=tiny_backend, draft=other_vocab_backend)
    steps, summary = run(tiny_backend, oracle)
    assert rejections(steps) > 0  # another model's guesses: the rollback is tested
    assert summary.text == plain.text
    proposed = [t for s in steps for t in s.proposed]
    assert proposed and all(t.p_draft is None for t in proposed)


def test_sampled_cross_draft_verifies_point_masses(tiny_backend, other_vocab_backend):
    """No draft distribution: a proposal x is accepted with probability p(x) (q(x) = 1)."""
    oracle = make_oracle("cross-draft", target=tiny_backend, draft=other_vocab_backend)
    steps, _ = run(tiny_backend, oracle, params=SamplingParams(0.9, seed=2), n=24)
    judged = [t for s in steps for t in s.proposed if t.accept_prob is not None]
    assert judged and all(t.accept_prob == pytest.approx(t.p_target) for t in judged)


@pytest.mark.model
def test_smollm2_drafting_across_tokenizers(smol_llama, smollm2_path, tiny_backend):
    """smollm2 drafts for a target of another vocabulary (lossless), and for itself through
    text (most drafts accepted: the re-tokenization keeps the boundaries)."""
    from specviz.engines.backends import load_backend

    draft = load_backend("llama", smollm2_path, n_ctx=2048)
    try:
        _, plain = run(tiny_backend, make_oracle("none"), k=0, n=12)
        _, summary = run(tiny_backend, make_oracle("cross-draft", target=tiny_backend,
                                                   draft=draft), n=12)
        assert summary.text == plain.text and summary.totals.proposed > 0
        prompt = ("Add type hints:\ndef scale(values, factor):\n"
                  "    return [v * factor for v in values]\n")
        _, plain = run(smol_llama, make_oracle("none"), prompt, k=0, n=24, chat=True)
        oracle = make_oracle("cross-draft", target=smol_llama, draft=draft)
        _, summary = run(smol_llama, oracle, prompt, k=4, n=24, chat=True)
        assert summary.text == plain.text
        assert summary.totals.acceptance_rate > 0.6
    finally:
        draft.close()
