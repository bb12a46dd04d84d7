"""Why a lane lost to plain decoding: one sentence from the machine's cost profile."""

from __future__ import annotations

import pytest

from specviz.engines.cost.profile import progress_lines
from specviz.engines.cost.step_cost import break_even_acceptance
from specviz.engines.cost.why_slower import easiest_k, loss_reason, why_no_gain

# Cost of n tokens over one (n = 1..9): a 2-core CPU where a short batch is dear.
CPU = [1.0, 1.63, 2.0, 2.71, 3.3, 4.0, 4.6, 5.2, 6.28]


def test_the_easiest_k_needs_the_least_acceptance():
    k, need = easiest_k(CPU)
    assert need == pytest.approx(min(break_even_acceptance(j, CPU[j]) for j in range(1, 9)))
    assert need == pytest.approx(break_even_acceptance(k, CPU[k]))


def test_the_sentence_names_the_cost_the_need_and_what_was_reached():
    k, need = easiest_k(CPU)
    line = why_no_gain("prompt-lookup", CPU, 0.22)
    assert line == (f"{k + 1} tokens cost {CPU[k]:.1f} one-token steps here; prompt-lookup "
                    f"needs {need:.0%} acceptance at K = {k} to pay, it reached 22%")
    assert why_no_gain("ngram", CPU, None).endswith("it proposed nothing that could pay")
    assert why_no_gain("ngram", CPU, 0.99) == ""  # that acceptance would pay
    dear = [1.0, 2.2, 3.3, 4.4]  # batches dearer than their tokens: nothing can pay
    assert "no draft length pays" in why_no_gain("ngram", dear, 0.9)


@pytest.mark.parametrize(("oracle", "figures", "costs", "said"), [
    ("prompt-lookup", {"speedup": 0.8, "acceptance_rate": 0.2}, CPU, True),
    ("prompt-lookup", {"speedup": 1.2, "acceptance_rate": 0.2}, CPU, False),  # it won
    ("prompt-lookup", {"speedup": None, "acceptance_rate": 0.2}, CPU, False),  # no baseline
    ("prompt-lookup", {"speedup": 0.8, "acceptance_rate": 0.2}, None, False),  # no profile
    ("none", {"speedup": 0.99, "acceptance_rate": None}, CPU, False),  # plain decoding
    ("draft", {"speedup": 0.8, "acceptance_rate": 0.2}, CPU, False),  # the pair check's job
    # A batch as cheap as one token: drafting pays at any acceptance, the profile explains
    # nothing (a tiny model's profile in noise).
    ("prompt-lookup", {"speedup": 0.8, "acceptance_rate": None}, [1.0, 1.0, 1.4], False),
])
def test_loss_reason_only_where_the_profile_explains_a_loss(oracle, figures, costs, said):
    line = loss_reason(oracle, figures, costs)
    assert bool(line) is said
    if said:
        assert line.startswith("0.80× plain decoding: ")


def test_a_batchs_loss_is_said_at_its_streams_with_its_prices_at_that_n():
    line = loss_reason("prompt-lookup", {"speedup": 0.8, "acceptance_rate": 0.2}, CPU, 4)
    k, need = easiest_k(CPU)
    assert line == (f"0.80× plain decoding at 4 streams: {k + 1} tokens a stream cost "
                    f"{CPU[k]:.1f} plain steps of 4 streams here; prompt-lookup needs "
                    f"{need:.0%} acceptance at K = {k} to pay, it reached 20%")


def test_profile_progress_is_said_every_few_seconds_with_the_time_left():
    said, now = [], [0.0]
    report = progress_lines("cost profile of m", said.append, every_s=3.0,
                            clock=lambda: now[0])
    for done in range(1, 11):
        now[0] = done * 1.0  # one pass a second
        report(done, 10)
    assert said == ["cost profile of m: 30%, about 7 s left",
                    "cost profile of m: 60%, about 4 s left",
                    "cost profile of m: 90%, about 1 s left"]
