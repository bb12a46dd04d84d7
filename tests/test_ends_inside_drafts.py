"""A run ends where plain decoding ends, also when the end lies inside a draft: an end token
an oracle guesses, a stop string completed by guesses the target accepts. The oracle here
knows plain decoding's answer, so every guess before the end is accepted and the end falls
inside a step's draft, with more guesses after it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from model_fixtures import assert_lossless, prompt_ids_of

from specviz.engines import events as ev
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.oracles import make_oracle
from specviz.engines.oracles.base import Oracle, Proposal, TreeProposal

# The tiny model's greedy answer to this prompt ends with an end token after a few tokens
# (tests/test_lossless_registry.py's "code" prompt).
ENDING = "def add(a, b):\n    return a + b\n\nprint(add(1, 2))\ndef add(a, b"
ENDLESS = "The quick brown fox jumps over the lazy dog. (The quick brown fox"


class Knowing(Oracle):
    """Proposes what plain decoding wrote after the context, then `after` tokens past its end
    (guesses a run must never keep)."""

    name = "knowing"
    source = "draft"

    def __init__(self, prompt_ids: Sequence[int], answer: Sequence[int],
                 after: Sequence[int]) -> None:
        super().__init__()
        self.n_prompt, self.script = len(prompt_ids), [*answer, *after]

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        at = len(context) - self.n_prompt
        return Proposal(self.script[at:at + k], self.source)


class KnowingTree(Knowing):
    """`Knowing`'s guesses as a tree: its chain, and beside each node a wrong sibling."""

    name = "knowing-tree"

    def tree_nodes(self) -> int:
        return 64

    def propose(self, context: Sequence[int], k: int) -> TreeProposal:
        chain = super().propose(context, k).tokens
        tree = TreeProposal(source=self.source)
        parent = -1
        for tok in chain:
            tree.tokens += [tok, (tok + 1) % 256]
            tree.parents += [parent, parent]
            parent = len(tree.tokens) - 2
        return tree


def run(backend, oracle, prompt: str, k: int, n: int = 40, stop=()):
    session = Session(backend, oracle, RunSettings(prompt, chat=False, k=k, max_tokens=n,
                                                   stop=tuple(stop)))
    steps = [e for e in session if isinstance(e, ev.StepEvent)]
    return steps, session.summary


def answer_of(steps) -> list[int]:
    return [t for s in steps for t in s.emitted_ids]


def test_an_end_token_inside_a_draft_ends_the_run_as_plain_decoding_does(tiny_backend):
    plain = run(tiny_backend, make_oracle("none"), ENDING, 0)
    assert plain[1].reason == "eos"  # the prompt's answer ends with an end token
    answer = answer_of(plain[0])
    ids = prompt_ids_of(tiny_backend, ENDING)
    after = answer[:5]  # guesses past the end token
    steps, summary = run(tiny_backend, Knowing(ids, answer, after), ENDING, len(answer) + 3)
    assert_lossless(tiny_backend, ids, (steps, summary), plain, "end token in a draft")
    # The end token was the target's own, never a kept guess, and nothing after it was judged.
    assert steps[-1].target.id in tiny_backend.eos_ids
    assert not any(t.id in tiny_backend.eos_ids for s in steps for t in s.proposed)
    assert len(steps) == 1 and steps[0].n_accepted == len(answer) - 1


def stop_inside(steps) -> tuple[str, int]:
    """A stop string of 3 characters ending inside the text of a token plain decoding writes
    after its 5th, and how many tokens plain decoding writes with it."""
    texts = [s.text for s in steps]
    at = next(i for i in range(5, len(texts)) if texts[i])
    cut = len("".join(texts[:at])) + max(1, len(texts[at]) // 2)
    stop = "".join(texts)[cut - 3:cut]
    n = next(i + 1 for i in range(len(texts)) if stop in "".join(texts[:i + 1]))
    assert len(stop) == 3 and n >= 6
    return stop, n


@pytest.mark.parametrize("oracle", [Knowing, KnowingTree])
@pytest.mark.parametrize("k", [4, 9])
def test_a_stop_string_an_accepted_draft_completes_ends_the_run_as_plain_decoding_does(
        tiny_backend, k, oracle):
    """Plain decoding stops at the token that completes the stop string; a run whose guesses
    complete it must not keep the guesses after it (its text and its tokens alike)."""
    free = run(tiny_backend, make_oracle("none"), ENDLESS, 0)
    answer = answer_of(free[0])
    stop, n = stop_inside(free[0])
    plain = run(tiny_backend, make_oracle("none"), ENDLESS, 0, stop=[stop])
    assert plain[1].reason == "stop-string" and plain[1].totals.tokens == n
    ids = prompt_ids_of(tiny_backend, ENDLESS)
    steps, summary = run(tiny_backend, oracle(ids, answer, []), ENDLESS, k, stop=[stop])
    assert_lossless(tiny_backend, ids, (steps, summary), plain,
                    f"stop string, {oracle.name}, K={k}")
    assert summary.totals.accepted > 0  # the stop string was reached through kept guesses
