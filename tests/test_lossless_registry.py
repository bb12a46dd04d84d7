"""Every oracle in the registry is lossless: for K in 1, 4 and 9 and three prompts, a greedy
run gives plain decoding's tokens, as many, ended for the same reason, and (where it guesses
anything) has some of its guesses refused, so the rollback after a refusal is what is proven.

The oracles that read a model read a sibling of the target (its weights noised: it agrees on
some tokens, not all); heads (Medusa's, EAGLE's) are untrained. A new registry entry is
tested here as soon as it has a way to be built below (the first test fails until it has).
"""

from __future__ import annotations

import pytest
from model_fixtures import assert_lossless, prompt_ids_of, rejections

from specviz.engines import events as ev
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.oracles import ORACLES, make_oracle

# Each ends repeating its start, in an open bracket: the copying oracles (prompt lookup,
# n-grams, suffix trees) find a match at once and the rules oracle closes the bracket, so
# every oracle guesses on every prompt.
PROMPTS = {
    "code": "def add(a, b):\n    return a + b\n\nprint(add(1, 2))\ndef add(a, b",
    "prose": "The quick brown fox jumps over the lazy dog. (The quick brown fox",
    "unicode": "El niño comió piñas en la montaña. 数据 模型 推理 🚀 Café [El niño comió",
}
# How plain decoding ends each: the code prompt's answer is an end token (a run must end
# where plain decoding does, for the same reason), the others' the token budget.
ENDS = {"code": "eos", "prose": "max-tokens", "unicode": "max-tokens"}
KS = (1, 4, 9)
N = 16  # tokens a run writes: enough for several refusals, cheap on the tiny model


@pytest.fixture(scope="module")
def medusa_heads(tiny_backend, tmp_path_factory):
    """Untrained Medusa heads for the tiny model (their guesses mostly refused)."""
    import torch

    from specviz.engines.medusa.heads import HeadsConfig, MedusaHeads, save_heads, target_id

    torch.manual_seed(0)
    hidden = int(tiny_backend.model.config.hidden_size)
    config = HeadsConfig(target_id(tiny_backend.model, tiny_backend.model_path), 3, hidden)
    return save_heads(MedusaHeads(hidden, 3), config, tmp_path_factory.mktemp("medusa"))


@pytest.fixture(scope="module")
def eagle_head(tiny_backend, tmp_path_factory):
    """An untrained EAGLE head for the tiny model."""
    import torch

    from specviz.engines.eagle.checkpoint import default_layers
    from specviz.engines.training import eagle as et

    torch.manual_seed(0)
    layers = default_layers(int(tiny_backend.model.config.num_hidden_layers))
    result = et.EagleResult(et.new_head(tiny_backend.model), layers, {}, {})
    return et.save(result, tiny_backend, tmp_path_factory.mktemp("eagle"))


def _draft(request) -> dict:
    return {"draft": request.getfixturevalue("disagreeing_draft_backend")}


# What each oracle is built with here, from the test's request: its model inputs the
# disagreeing sibling, its heads untrained ones, its memory off (a memory would carry one
# case into the next).
INPUTS = {
    "none": lambda _r: {}, "prompt-lookup": lambda _r: {}, "ngram": lambda _r: {},
    "rules": lambda _r: {}, "lookahead": lambda _r: {}, "early-exit": lambda _r: {},
    "draft": _draft, "cross-draft": _draft, "tree": _draft,
    "suffix": lambda _r: {"suffix_memory": "off"},
    "medusa": lambda r: {"medusa_heads": r.getfixturevalue("medusa_heads")},
    "eagle": lambda r: {"eagle_head": r.getfixturevalue("eagle_head")},
}
# Settings over the defaults: early exit's default layer is 2 of the tiny model's 2 (three
# quarters, rounded), the whole target, whose guesses are never refused.
SETTINGS = {"early-exit": {"exit_layer": 1}}


PLAIN_RUNS: dict[str, tuple] = {}


def run(backend, oracle, prompt: str, k: int):
    session = Session(backend, oracle, RunSettings(prompt, chat=False, k=k, max_tokens=N))
    steps = [e for e in session if isinstance(e, ev.StepEvent)]
    return steps, session.summary


def plain_run(backend, prompt_name: str):
    if prompt_name not in PLAIN_RUNS:
        PLAIN_RUNS[prompt_name] = run(backend, make_oracle("none"), PROMPTS[prompt_name], 0)
    return PLAIN_RUNS[prompt_name]


def test_every_oracle_of_the_registry_has_a_way_to_be_built_here():
    assert set(INPUTS) == set(ORACLES), "give each oracle of the registry its INPUTS here"


@pytest.mark.parametrize("prompt_name", PROMPTS)
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("name", ORACLES)
def test_greedy_speculation_is_plain_decoding(name, k, prompt_name, tiny_backend, request):
    prompt = PROMPTS[prompt_name]
    plain = plain_run(tiny_backend, prompt_name)
    oracle = make_oracle(name, target=tiny_backend, settings=SETTINGS.get(name),
                         **INPUTS[name](request))
    try:
        steps, summary = run(tiny_backend, oracle, prompt, k)
    finally:
        oracle.close()
    assert_lossless(tiny_backend, prompt_ids_of(tiny_backend, prompt), (steps, summary),
                    plain, f"{name} K={k} {prompt_name}")
    assert summary.reason == ENDS[prompt_name], "the prompt no longer ends as it was chosen to"
    judged = sum(len(s.tree) if s.tree else len(s.proposed) for s in steps)
    assert judged <= k * len(steps) or any(s.tree for s in steps)  # K bounds a chain
    if summary.totals.proposed:  # it guessed: some guesses refused, the rollback exercised
        assert rejections(steps) > 0, f"{name} K={k} {prompt_name}: nothing refused"
