"""Typical acceptance (LOSSY, opt-in): the threshold rule, and events that say so."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specviz.app.cli.main import main
from specviz.engines import events as ev
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.loop.typical import TypicalAcceptance, verify_typical
from specviz.engines.loop.verify import verify
from specviz.engines.oracles import make_oracle
from specviz.engines.sampling import SamplingParams

RULE = TypicalAcceptance(epsilon=0.09, alpha=0.3)


def test_threshold_is_the_smaller_of_epsilon_and_alpha_times_exp_minus_entropy():
    assert RULE.threshold(np.full(4, 0.25)) == pytest.approx(0.3 / 4)  # exp(-ln 4) = 1/4
    assert RULE.threshold(np.array([1.0, 0.0])) == pytest.approx(0.09)  # no entropy: epsilon
    with pytest.raises(ValueError):
        TypicalAcceptance(epsilon=0.0)


def test_typical_tokens_are_kept_until_an_atypical_one():
    logits = np.log(np.array([[0.5, 0.45, 0.05], [0.6, 0.3, 0.1], [0.02, 0.9, 0.08],
                              [0.3, 0.3, 0.4]]))
    verdict = verify_typical([1, 1, 0], logits, SamplingParams(1.0), np.random.default_rng(0),
                             RULE)
    assert [j.accepted for j in verdict.judgements] == [True, True, False]
    assert verdict.judgements[2].reason == ev.REJECT_TYPICAL
    assert verdict.judgements[2].accept_prob == pytest.approx(RULE.threshold(
        np.array([0.02, 0.9, 0.08])))
    assert verdict.n_accepted == 2 and verdict.kind == ev.TARGET_CORRECTION


def test_greedy_typical_acceptance_is_exact_verification():
    logits = np.random.default_rng(1).normal(size=(4, 50)).astype(np.float32)
    greedy, rng = SamplingParams(), np.random.default_rng(0)
    proposal = [int(np.argmax(logits[0])), 3, 4]
    assert verify_typical(proposal, logits, greedy, rng, RULE) == verify(proposal, None, logits,
                                                                        greedy, rng)


def test_sampled_run_with_typical_acceptance_is_marked_lossy(tiny_backend, tiny_draft_backend):
    oracle = make_oracle("draft", target=tiny_backend, draft=tiny_draft_backend)
    settings = RunSettings("The quick brown fox", chat=False, k=3, max_tokens=12,
                           params=SamplingParams(0.8, seed=1), typical=RULE)
    steps = [e for e in Session(tiny_backend, oracle, settings) if isinstance(e, ev.StepEvent)]
    assert steps and all(s.lossy for s in steps)
    back = ev.from_dict(json.loads(ev.to_json(steps[0])))
    assert back == steps[0] and back.lossy
    old = {k: v for k, v in ev.to_dict(steps[0]).items() if k != "lossy"}
    assert not ev.from_dict(old).lossy  # traces written before the field load as exact


def test_cli_labels_typical_acceptance_lossy(capsys, tiny_model_dir):
    argv = ["run", "--backend", "transformers", "--target", str(tiny_model_dir), "--no-chat",
            "--prompt", "The quick", "--max-tokens", "8", "--oracle", "prompt-lookup", "--k", "4",
            "--json"]
    assert main([*argv, "--typical-acceptance", "--temperature", "0.8"]) == 0
    assert json.loads(capsys.readouterr().out)["lossy"] is True
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["lossy"] is False
