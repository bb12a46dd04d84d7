"""Every oracle in the registry is lossless: for K in 1, 4 and 9 and three prompts, a greedy
run gives plain decoding's tokens, as many, ended for the same reason, and (where it guesses
anything) has some of its guesses refused, so the rollback after a refusal is what is proven.
On the tiny Llama, and at K 4 on its Qwen2 twin (the architecture of the models specviz's
results are measured on).

The oracles that read a model read a sibling of the target (its weights noised: it agrees on
some tokens, not all); heads (Medusa's, EAGLE's) are untrained. A new registry entry is
tested here as soon as it has a way to be built below (the first test fails until it has).
"""

from __future__ import annotations

import pytest
from model_fixtures import assert_lossless, prompt_ids_of, rejections, tiny_target_and_draft

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
# How plain decoding ends each: on the Llama the code prompt's answer is an end token (a run
# must end where plain decoding does, for the same reason), the rest the token budget.
ENDS = {("llama", "code"): "eos"}
KS = (1, 4, 9)
CASES = [pytest.param(arch, name, k, prompt, id=f"{arch}-{name}-{k}-{prompt}")
         for arch, ks in (("llama", KS), ("qwen2", (4,)))
         for name in ORACLES for k in ks for prompt in PROMPTS]
N = 16  # tokens a run writes: enough for several refusals, cheap on the tiny model


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    """Untrained heads for a target, made once per target and kind: Medusa's (their guesses
    mostly refused) and an EAGLE head."""
    made = {}

    def of(kind: str, target):
        if (kind, id(target)) not in made:
            made[kind, id(target)] = (medusa_heads if kind == "medusa" else eagle_head)(
                target, tmp_path_factory.mktemp(kind))
        return made[kind, id(target)]

    return of


def medusa_heads(target, folder):
    import torch

    from specviz.engines.medusa.heads import HeadsConfig, MedusaHeads, save_heads, target_id

    torch.manual_seed(0)
    hidden = int(target.model.config.hidden_size)
    config = HeadsConfig(target_id(target.model, target.model_path), 3, hidden)
    return save_heads(MedusaHeads(hidden, 3), config, folder)


def eagle_head(target, folder):
    import torch

    from specviz.engines.eagle.checkpoint import default_layers
    from specviz.engines.training import eagle as et

    torch.manual_seed(0)
    layers = default_layers(int(target.model.config.num_hidden_layers))
    result = et.EagleResult(et.new_head(target.model), layers, {}, {})
    return et.save(result, target, folder)


def _draft(target, draft, heads) -> dict:
    return {"draft": draft}


# What each oracle is built with here, given the target, its disagreeing sibling and the
# heads maker: its model inputs the sibling, its heads untrained ones, its memory off (a
# memory would carry one case into the next).
INPUTS = {
    "none": lambda *_: {}, "prompt-lookup": lambda *_: {}, "ngram": lambda *_: {},
    "rules": lambda *_: {}, "lookahead": lambda *_: {}, "early-exit": lambda *_: {},
    "draft": _draft, "cross-draft": _draft, "tree": _draft,
    "suffix": lambda *_: {"suffix_memory": "off"},
    "medusa": lambda t, _d, heads: {"medusa_heads": heads("medusa", t)},
    "eagle": lambda t, _d, heads: {"eagle_head": heads("eagle", t)},
}
# Settings over the defaults: early exit's default layer is 2 of the tiny model's 2 (three
# quarters, rounded), the whole target, whose guesses are never refused.
SETTINGS = {"early-exit": {"exit_layer": 1}}


PLAIN_RUNS: dict[tuple[str, str], tuple] = {}


def run(backend, oracle, prompt: str, k: int):
    session = Session(backend, oracle, RunSettings(prompt, chat=False, k=k, max_tokens=N))
    steps = [e for e in session if isinstance(e, ev.StepEvent)]
    return steps, session.summary


def plain_run(backend, arch: str, prompt_name: str):
    if (arch, prompt_name) not in PLAIN_RUNS:
        PLAIN_RUNS[arch, prompt_name] = run(backend, make_oracle("none"), PROMPTS[prompt_name],
                                            0)
    return PLAIN_RUNS[arch, prompt_name]


def test_every_oracle_of_the_registry_has_a_way_to_be_built_here():
    assert set(INPUTS) == set(ORACLES), "give each oracle of the registry its INPUTS here"


@pytest.mark.parametrize(("arch", "name", "k", "prompt_name"), CASES)
def test_greedy_speculation_is_plain_decoding(arch, name, k, prompt_name, heads, request):
    target, draft = tiny_target_and_draft(request, arch)
    prompt, what = PROMPTS[prompt_name], f"{arch}: {name} K={k} {prompt_name}"
    plain = plain_run(target, arch, prompt_name)
    oracle = make_oracle(name, target=target, settings=SETTINGS.get(name),
                         **INPUTS[name](target, draft, heads))
    try:
        steps, summary = run(target, oracle, prompt, k)
    finally:
        oracle.close()
    assert_lossless(target, prompt_ids_of(target, prompt), (steps, summary), plain, what)
    assert summary.reason == ENDS.get((arch, prompt_name), "max-tokens"), \
        "the prompt no longer ends as it was chosen to"
    judged = sum(len(s.tree) if s.tree else len(s.proposed) for s in steps)
    assert judged <= k * len(steps) or any(s.tree for s in steps)  # K bounds a chain
    if summary.totals.proposed:  # it guessed: some guesses refused, the rollback exercised
        assert rejections(steps) > 0, f"{what}: nothing refused"
