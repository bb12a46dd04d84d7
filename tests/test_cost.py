"""The cost model and the cost-aware K chooser, on synthetic profiles."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specviz.engines import events as ev
from specviz.engines.cost.auto_k import MIN_SEEN, Acceptance, AutoK, match_bucket
from specviz.engines.cost.profile import SETTLE, Profile
from specviz.engines.cost.step_cost import (
    best_k,
    expected_tokens,
    expected_tokens_iid,
    first_k_reaching,
    speedup_curve,
    theoretical_speedup,
)
from specviz.engines.oracles.base import AutoKHints, Oracle, Proposal
from specviz.engines.oracles.ngram import NGramOracle
from specviz.engines.oracles.prompt_lookup import PromptLookupOracle

BATCHES = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]
# A 2-core CPU as measured (MODELS.md): 4 tokens ~3.3x one, 8 ~5x, 16 ~6x.
CPU_MS = [30, 52, 75, 99, 125, 150, 165, 180, 215, 250]
# A GPU: a batch of 32 costs about what one token does.
GPU_MS = [10, 10, 10, 10.1, 10.1, 10.2, 10.3, 10.4, 10.6, 10.8]


def profile(ms, contexts=(512,)):
    return Profile("synthetic", "llama", "cpu", 2, list(contexts), BATCHES,
                   [list(ms) for _ in contexts])


def test_expected_tokens_matches_leviathan():
    for alpha in (0.0, 0.3, 0.8, 1.0):
        for k in (0, 1, 4, 9):
            assert expected_tokens([alpha] * k) == pytest.approx(expected_tokens_iid(alpha, k))
    assert expected_tokens_iid(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)


def test_theoretical_speedup_free_batches_vs_cpu_batches():
    # Leviathan et al.: free verification, draft cost c per token.
    assert theoretical_speedup(0.8, 4) == pytest.approx(3.3616)
    assert theoretical_speedup(0.8, 4, draft_cost=0.05) == pytest.approx(3.3616 / 1.2)
    cpu = profile(CPU_MS)
    curve = speedup_curve(0.8, [0, 1, 3, 7], cpu)
    assert curve[0] == pytest.approx(1.0)
    # 4 tokens cost 3.3x one: 3.36 expected tokens do not pay for it.
    assert curve[2] == pytest.approx(expected_tokens_iid(0.8, 3) / 3.3)
    assert curve[2] < 1.0
    assert all(g > c for g, c in zip(speedup_curve(0.8, [1, 3, 7], profile(GPU_MS)), curve[1:]))


def test_best_k_is_zero_when_verification_costs_more_than_the_gain():
    cpu = profile(CPU_MS)
    k, _ = best_k([0.6] * 31, lambda k: cpu.cost_ms(k + 1, 512), 31)
    assert k == 0


def test_best_k_is_large_when_acceptance_is_high_and_batches_cheap():
    gpu = profile(GPU_MS)
    k, rate = best_k([0.95] * 31, lambda k: gpu.cost_ms(k + 1, 512), 31)
    assert k >= 16
    assert rate > 5 / 10.0
    # The same acceptance on the CPU still speculates (long verbatim runs pay), but less far.
    cpu = profile(CPU_MS)
    k_cpu, _ = best_k([0.95] * 31, lambda k: cpu.cost_ms(k + 1, 512), 31)
    assert 0 < k_cpu
    k_mid, _ = best_k([0.8] * 31, lambda k: gpu.cost_ms(k + 1, 512), 31)
    assert 0 < k_mid < k


def test_profile_costs_follow_the_context_and_a_replaced_table():
    """Costs are kept per context between calls (auto K prices every K of a step at one):
    another context, or a table replaced (benchmarks/replay_auto_k.py smooths one), is
    priced anew."""
    p = Profile("m", "llama", "cpu", 2, [128, 1024], [1, 4], [[10, 40], [20, 80]])
    assert p.cost_ms(4, 128) == pytest.approx(40)
    assert p.cost_ms(4, 1024) == pytest.approx(80)
    assert p.cost_ms(1, 576) == pytest.approx(15)
    p.ms = [[1, 4], [2, 8]]
    assert p.cost_ms(1, 576) == pytest.approx(1.5)
    assert p.to_dict()["ms"] == [[1, 4], [2, 8]] and "_row" not in p.to_dict()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 4096), min_size=1, max_size=4, unique=True),
       st.lists(st.integers(0, 5000), min_size=1, max_size=30))
def test_profile_costs_along_the_context_are_the_bilinear_interpolation(contexts, asked):
    """Each segment between measured contexts is kept ready to interpolate along: the same
    figures as interpolating each batch's column anew, clamped at both ends."""
    contexts = sorted(contexts)
    batches = [1, 2, 4, 8]
    ms = [[(i + 1) * 3.0 + b * (7 - i) for b in batches] for i in range(len(contexts))]
    p = Profile("m", "llama", "cpu", 2, contexts, batches, ms)
    for context in asked:
        for j, b in enumerate(batches):
            column = [row[j] for row in ms]
            if context <= contexts[0]:
                want = column[0]
            elif context >= contexts[-1]:
                want = column[-1]
            else:
                i = max(k for k, x in enumerate(contexts) if x <= context)
                x0, x1 = contexts[i], contexts[i + 1]
                want = column[i] + (column[i + 1] - column[i]) * (context - x0) / (x1 - x0)
            assert p.cost_ms(b, context) == pytest.approx(want, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.1, 500), min_size=4, max_size=4), st.integers(0, 3000),
       st.lists(st.integers(0, 40), min_size=1, max_size=20))
def test_a_profiles_costs_at_once_are_its_costs_one_at_a_time(ms, context, widths):
    """What a batch's auto K asks at once (every width up to the widest) is what pricing each
    width alone gives, a dip and the extrapolation past the largest batch kept."""
    p = Profile("m", "llama", "cpu", 2, [128, 1024], [1, 4, 8, 16],
                [ms, [2 * x for x in reversed(ms)]])
    assert p.costs_ms(widths, context) == pytest.approx([p.cost_ms(w, context)
                                                         for w in widths], rel=1e-12)
    inside = [w for w in widths if w <= 16]
    assert p.costs_ms(inside, context) == pytest.approx([p.cost_ms(w, context)
                                                         for w in inside], rel=1e-12)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=12),
       st.lists(st.floats(1, 100), min_size=13, max_size=13), st.floats(1.01, 1.5))
def test_the_first_k_that_reaches_a_rate_says_what_the_best_k_says(accept, costs, gain):
    """Whether some K beats a plain step by a gain (auto K's question before exploring, asked
    every step) is answered by the first K that does, without pricing the rest."""
    def step_ms(k):
        return costs[k]

    target = gain / step_ms(0)
    k, rate = best_k(accept, step_ms, len(accept))
    first = first_k_reaching(accept, step_ms, len(accept), target)
    assert (first > 0) == (k > 0 and rate >= target)
    def rate(j):  # expected tokens of a j-token draft, per ms
        survive = [1.0]
        for a in accept[:j]:
            survive.append(survive[-1] * a)
        return sum(survive) / step_ms(j)

    if first:
        assert rate(first) >= target and all(rate(j) < target for j in range(1, first))


def test_profile_interpolates_and_keeps_a_measured_dip():
    p = Profile("m", "llama", "cpu", 2, [128, 1024], [1, 4, 8],
                [[10, 30, 28], [20, 60, 80]])  # 8 < 4 at ctx 128: kernels that take rows in fours
    assert p.cost_ms(2, 128) == pytest.approx(10 + 20 / 3)
    assert p.cost_ms(8, 128) == pytest.approx(28)  # kept as measured
    assert p.cost_ms(6, 128) == pytest.approx(29)  # the line through the dip
    assert p.cost_ms(4, 576) == pytest.approx(45)  # halfway between the contexts
    assert p.cost_ms(1, 4096) == pytest.approx(20)  # clamped past the last context
    assert p.relative(4, 1024) == pytest.approx(3.0)
    assert Profile.from_dict(p.to_dict()) == p



def test_best_k_takes_the_batch_that_costs_less_than_a_smaller_one():
    # 8 tokens cost less than 7, as with llama.cpp's repacked kernels: K = 7 wins; were the
    # dip smoothed away (8 priced as 7), K = 5 would.
    stairs = Profile("m", "llama", "cpu", 2, [512], list(range(1, 10)),
                     [[10, 15, 19, 23, 28, 30, 40, 37, 48]])
    k, _ = best_k([0.97] * 8, lambda k: stairs.cost_ms(k + 1, 512), 8)
    assert k == 7
    smoothed = dataclasses.replace(stairs, ms=[[10, 15, 19, 23, 28, 30, 40, 40, 48]])
    assert best_k([0.97] * 8, lambda k: smoothed.cost_ms(k + 1, 512), 8)[0] == 5


class FakeLookup(Oracle, AutoKHints):
    """Reports a chosen match length; proposes nothing itself (the test feeds events)."""

    name = "prompt-lookup"
    source = "prompt"

    def __init__(self):
        super().__init__()
        self.match = 0

    def match_length(self, context):
        return self.match

    def propose(self, context, k):
        return Proposal(source=self.source)


def step(k, n_accepted, position=512, live=None, index=1):
    """A step of a run under way (index 0 starts a run: its first steps pay for the prompt's
    batch and teach no timing)."""
    verify_ms = (live or profile(CPU_MS)).cost_ms(k + 1, position)
    proposed = tuple(
        ev.ProposedToken(i, "x", "prompt", i < n_accepted,
                         reject_reason=None if i < n_accepted else
                         (ev.REJECT_MISMATCH if i == n_accepted else ev.REJECT_AFTER))
        for i in range(k))
    return ev.StepEvent(index, "prompt-lookup", k, position, proposed,
                        ev.TargetToken(1, "y", ev.TARGET_CORRECTION, 0.9, 1.0),
                        "x", ev.Timing(0.01, verify_ms, 0.5),
                        ev.Totals(0, 0, 0, 0, 0.0, 0.0, 0.0))


def test_auto_k_learns_long_matches_pay_and_short_ones_do_not():
    oracle = FakeLookup()
    policy = AutoK(oracle, profile(CPU_MS))
    context = list(range(512))
    oracle.match = 0
    assert policy.choose(context) == 0  # nothing to copy: a plain step
    for _ in range(40):  # short matches: the first copied token is always wrong
        oracle.match = 1
        k = policy.choose(context)
        policy.observe(step(k, 0))
        oracle.match = 20  # long matches: everything copied is right
        k = policy.choose(context)
        policy.observe(step(k, k))
    oracle.match = 1
    assert policy.choose(context) == 0
    oracle.match = 20
    assert policy.choose(context) >= 8


def plain_step(position, token, index=1):
    """A step that sent nothing and emitted `token` at `position`."""
    return ev.StepEvent(index, "prompt-lookup", 0, position, (),
                        ev.TargetToken(token, "y", ev.TARGET_CORRECTION, 0.9, 1.0),
                        "y", ev.Timing(0.0, profile(CPU_MS).cost_ms(1, position), 0.5),
                        ev.Totals(0, 0, 0, 0, 0.0, 0.0, 0.0))


@pytest.mark.parametrize("shadows", [True, False])
def test_odds_condemned_early_recover_from_copies_plain_steps_did_not_send(shadows):
    text = list(range(1000, 1100))  # what the run goes on to emit, after 512 prompt tokens
    oracle = FakeLookup()
    oracle.match = 8
    # The copy each step would send: the run's own next tokens (it holds, whole).
    oracle.shadow_draft = lambda ctx, k: text[len(ctx) - 512:][:k] if shadows else None
    policy = AutoK(oracle, profile(CPU_MS))
    for _ in range(20):  # early copies after 8-token matches all failed
        policy.acceptance.add(-match_bucket(8), False)
    ks = []
    for i in range(60):
        context = list(range(512 + i))
        ks.append(policy.choose(context))
        assert ks[-1] == 0 or shadows  # nothing else could lift the condemned odds
        if ks[-1]:
            break
        policy.observe(plain_step(512 + i, text[i]))
    assert (ks[-1] > 0) == shadows


def test_a_copy_not_sent_is_judged_up_to_its_first_miss_one_at_a_time_within_a_run():
    oracle = FakeLookup()
    oracle.match = 8
    oracle.shadow_draft = lambda ctx, k: [7, 8, 9, 10]
    policy = AutoK(oracle, profile(CPU_MS))
    for _ in range(31):  # odds below the prior: plain steps, their copies judged
        policy.acceptance.add(-match_bucket(8), False)
    assert policy.choose(list(range(512))) == 0
    policy.observe(plain_step(512, 7))  # the copy's first token held
    assert policy.choose(list(range(513))) == 0
    assert len(policy._shadows) == 1  # no second copy while the first is being judged
    policy.observe(plain_step(513, 5))  # its second did not: judged, the rest never
    accepted, judged = policy.acceptance.counts[-match_bucket(8)]
    assert (accepted, judged) == pytest.approx((1, 31 + 2))
    assert policy.choose(list(range(514))) == 0 and policy._shadows[0][0] == 514
    policy.observe(plain_step(40, 7, index=0))  # a new run: the pending copy is dropped
    assert policy._shadows == []


def test_a_sent_draft_is_judged_once_not_again_as_the_copy_before_it():
    oracle = FakeLookup()
    oracle.match = 8
    oracle.shadow_draft = lambda ctx, k: [7, 8, 9, 10]
    policy = AutoK(oracle, profile(CPU_MS))
    for _ in range(31):
        policy.acceptance.add(-match_bucket(8), False)
    assert policy.choose(list(range(512))) == 0
    policy.observe(plain_step(512, 7))  # the copy is pending, one token judged

    def judged():
        return sum(n for _, n in policy.acceptance.counts.values())

    before = judged()
    policy.observe(dataclasses.replace(step(2, 2, position=513), step=2))  # a draft sent
    assert judged() == before + 2 and policy._shadows == []


@pytest.mark.parametrize("oracle", [PromptLookupOracle(), NGramOracle()])
def test_shadow_drafts_are_what_propose_sends(oracle):
    context = [5, 6, 7, 8, 9, 1, 2, 5, 6, 7]
    assert list(oracle.shadow_draft(context, 3)) == list(oracle.propose(context, 3).tokens)


def test_auto_k_speculates_only_for_the_gain_the_oracle_asks_for():
    oracle = FakeLookup()
    oracle.match = 4  # Laplace: 5/6 per copied token, a few percent over a plain step here
    policy = AutoK(oracle, profile(CPU_MS))
    context = list(range(512))
    k = policy.choose(context)
    assert k > 0
    gain = policy.last_choice[1] / (1000.0 / policy.step_ms(0, 512)) - 1
    oracle.min_gain = gain + 0.01
    assert policy.choose(context) == 0
    oracle.min_gain = gain - 0.01
    assert policy.choose(context) == k


def test_auto_k_drafts_no_longer_than_the_oracle_vouches_for():
    oracle = FakeLookup()
    oracle.match = 5
    oracle.draft_limit = lambda m: 2 * m
    assert AutoK(oracle, profile(GPU_MS)).choose(list(range(100))) == 10
    assert PromptLookupOracle().draft_limit(7) == 14 and NGramOracle().draft_limit(4) == 8


def test_auto_k_with_a_cheap_gpu_profile_speculates_from_the_start():
    oracle = FakeLookup()
    oracle.match = 3
    assert AutoK(oracle, profile(GPU_MS)).choose(list(range(100))) > 4



def test_auto_k_learns_when_the_machine_is_busier_than_when_profiled():
    oracle = FakeLookup()
    oracle.match = 30
    quiet, busy = profile(CPU_MS), profile([3 * x for x in CPU_MS])
    policy = AutoK(oracle, quiet)
    for _ in range(30):
        k = policy.choose(list(range(512)))
        policy.observe(step(k, k, live=busy))
    assert policy.scale == pytest.approx(3.0, rel=0.1)
    assert policy.step_ms(8, 512) == pytest.approx(busy.cost_ms(9, 512) + 0.5, rel=0.1)


def test_auto_k_scales_single_tokens_and_batches_apart():
    # Live, single tokens run at 0.8 of the profile and every batch at 1.3 (memory and compute
    # drift apart with load). A few 2-token steps must price a 21-token batch at 1.3x as well,
    # not at the scale the many single-token steps set, or long drafts look cheap.
    oracle = FakeLookup()
    oracle.match = 30
    profiled = profile(CPU_MS)
    live = profile([0.8 * CPU_MS[0]] + [1.3 * x for x in CPU_MS[1:]])
    policy = AutoK(oracle, profiled)
    for _ in range(60):
        policy.observe(step(0, 0, live=live))
    for _ in range(MIN_SEEN):
        policy.observe(step(1, 1, live=live))
    for _ in range(SETTLE):  # the last batch is judged with the steps after it
        policy.observe(step(0, 0, live=live))
    assert policy.step_ms(0, 512) == pytest.approx(0.8 * CPU_MS[0] + 0.5, rel=0.02)
    assert policy.step_ms(20, 512) == pytest.approx(1.3 * profiled.cost_ms(21, 512), rel=0.02)


def timed_step(k, verify_ms, index=1):
    """A step at K = k whose draft all held, its verification taking `verify_ms`."""
    proposed = tuple(ev.ProposedToken(i, "x", "prompt", True) for i in range(k))
    return ev.StepEvent(index, "prompt-lookup", k, 512, proposed,
                        ev.TargetToken(1, "y", ev.TARGET_BONUS, 0.9, 1.0), "x",
                        ev.Timing(0.01, verify_ms, 0.1), ev.Totals(0, 0, 0, 0, 0.0, 0.0, 0.0))


def test_the_steps_after_a_batch_pay_for_it_not_for_plain_steps():
    """llama.cpp on an H200 (a trace's verification times): a settled one-token step 1.06 ms,
    the two after a batch 2.8 and 2.1 (its graph built again, then captured), the batch of 8
    3.6, and the two after the prompt 5.6. The profile prices a batch with its switch back
    (1.06 and 6.4 here). Taught the trace, auto K keeps pricing a plain step at 1.06 and the
    batch at 6.4. Learnt as they came (with the old profile too: 2.83 and 3.6), the slow
    one-token steps priced a plain step at 1.75 ms and the batch at 2.1x it, where it costs 6x."""
    profiled = Profile("m", "llama", "cuda", None, [512], [1, 9],
                       [[1.06, 3.6 + 2.8 + 2.1 - 2 * 1.06]])
    policy = AutoK(FakeLookup(), profiled)
    policy.observe(timed_step(0, 5.6, index=0))  # the run's first steps, after the prompt
    policy.observe(timed_step(0, 4.0))
    for _ in range(6):
        for _ in range(3):
            policy.observe(timed_step(0, 1.06))
        policy.observe(timed_step(8, 3.6))
        policy.observe(timed_step(0, 2.8))
        policy.observe(timed_step(0, 2.1))
    plain = policy.step_ms(0, 512) - policy.overhead_ms
    assert plain == pytest.approx(1.06, rel=0.01)
    assert policy.step_ms(8, 512) - policy.overhead_ms == pytest.approx(6.38, rel=0.01)


def test_batches_back_to_back_are_judged_without_a_switch_back():
    """Drafts sent one after another pay no switch back between them: live they cost less
    than the profile's price, which holds one, and auto K learns that."""
    policy = AutoK(FakeLookup(), Profile("m", "llama", "cuda", None, [512], [1, 9],
                                         [[1.0, 6.0]]))
    for _ in range(10):
        policy.observe(timed_step(8, 3.0))
    assert policy.step_ms(8, 512) - policy.overhead_ms == pytest.approx(3.0, rel=0.01)


def test_unseen_batches_are_priced_at_the_scale_single_tokens_set():
    # A machine at 0.05 of the profile (the tiny test model): after 40 single-token steps a
    # batch never seen must be priced at 0.05 as well. An overall scale starting as an
    # average from 1.0 still said 0.06 there, 30% dearer, and auto K stopped drafting.
    oracle = FakeLookup()
    profiled = profile(CPU_MS)
    policy = AutoK(oracle, profiled)
    live = profile([0.05 * x for x in CPU_MS])
    for _ in range(40):
        policy.observe(step(0, 0, live=live))
    batch = profiled.cost_ms(5, 512)
    assert policy.step_ms(4, 512) - policy.overhead_ms == pytest.approx(0.05 * batch, rel=0.01)


def test_evidence_decay_follows_the_latest_judgments():
    kept, fading = Acceptance(), Acceptance(decay=0.02)
    for accepted in [True] * 200 + [False] * 40:  # code, then text where guesses fail
        kept.add(4, accepted)
        fading.add(4, accepted)
    assert kept.estimate(4) > 0.8
    assert fading.estimate(4) < 0.5
    assert NGramOracle().evidence_decay > 0 and PromptLookupOracle().evidence_decay == 0


@pytest.mark.parametrize("oracle", [PromptLookupOracle(), NGramOracle()])
def test_copying_oracles_prior_is_fitted_to_short_matches_failing_often(oracle):
    prior = oracle.match_prior
    assert prior(2) == pytest.approx(0.5) and prior(3) == pytest.approx(0.6)
    assert prior(48) > 0.95  # long verbatim copies are still tried at once
    assert FakeLookup().match_prior(3) == pytest.approx(0.8)  # Laplace by default


class FakeDraft(FakeLookup):
    """An oracle that does not copy: no match length."""

    name = "ngram"

    def match_length(self, context):
        return None


@pytest.mark.parametrize("rate, speculates", [(0.95, True), (0.3, False)])
def test_auto_k_explores_a_non_copying_oracle_then_follows_its_acceptance(rate, speculates):
    oracle = FakeDraft()
    policy = AutoK(oracle, profile(CPU_MS))
    assert policy.choose(list(range(512))) == 2  # a short exploration first
    hits = 0.0
    for _ in range(60):
        k = policy.choose(list(range(512)))
        accepted = 0
        while accepted < k and hits + rate >= 1.0:  # deterministic: rate of the judged tokens
            hits += rate - 1.0
            accepted += 1
        if accepted < k:
            hits += rate
        policy.observe(step(k, accepted))
    assert (policy.choose(list(range(512))) > 0) == speculates


def test_auto_k_spends_no_step_exploring_a_draft_that_good_odds_could_not_pay_for():
    """The 0.5B draft of a 1.5B target on a 2-core CPU: its tokens cost 0.65 of the target's.
    Even drafts that hold 90% of the time gain nothing there, so auto K does not explore them
    (it did, and its exploring steps cost 5.6% of a run that declined everywhere else)."""
    dear = AutoK(FakeDraft(), profile(CPU_MS), draft_profile=profile([0.65 * ms for ms in CPU_MS]))
    assert not dear.worth_exploring(512)
    assert [dear.choose(list(range(512))) for _ in range(3)] == [0, 0, 0]
    assert dear.zero_reason == ev.DECLINE_AUTO_K
    cheap = AutoK(FakeDraft(), profile(CPU_MS), draft_profile=profile([0.05 * ms for ms in CPU_MS]))
    assert cheap.worth_exploring(512) and cheap.choose(list(range(512))) == 2


def test_a_draft_is_not_explored_where_learning_its_odds_costs_more_than_good_odds_win_back():
    """A draft model reads the prompt when it first drafts (on a 2-core Xeon the 0.5B's read
    of a 248-token code edit took 1.5 s, 12% of the 1.5B's run), and exploring steps lose
    where guesses hold at the prior's odds; the best case gained 5-12% there. Exploring waits
    for a run long enough to win both back at good odds; once the drafter has drafted in a
    run, its read is paid; where batches cost what a token does, exploring steps lose nothing."""
    cheap = AutoK(FakeDraft(), profile(CPU_MS), draft_profile=profile([0.05 * ms for ms in CPU_MS]))
    assert cheap._reading_ms(512) == pytest.approx(512 * 0.05 * CPU_MS[-1] / BATCHES[-1])
    assert cheap._exploring_loss_ms(lambda k: cheap.step_ms(k, 512), 2) > 0
    assert cheap.worth_exploring(512, left=40) == 0  # 40 tokens win back less than both
    assert cheap.choose(list(range(512)), left=40) == 0
    assert cheap.zero_reason == ev.DECLINE_AUTO_K
    assert cheap.worth_exploring(512, left=2000) == 2 and cheap.worth_exploring(512) == 2
    cheap._drafted = True  # this run has drafted: the prompt is read
    assert cheap._reading_ms(512) == 0 and cheap.worth_exploring(512, left=80) == 2
    gpu = AutoK(FakeDraft(), profile(GPU_MS), draft_profile=profile([0.1 * ms for ms in GPU_MS]))
    assert gpu._exploring_loss_ms(lambda k: gpu.step_ms(k, 512), 2) == 0
    gpu._drafted = True
    assert gpu.worth_exploring(512, left=5) == 2
    headed = AutoK(FakeDraft(), profile(CPU_MS))  # no draft model: bounded as before
    assert headed.worth_exploring(512, left=5) == headed.worth_exploring(512) == 2


def test_exploring_sends_the_shortest_draft_that_good_odds_could_pay_for():
    """Where a batch of 3 costs nearly what 4 do (llama.cpp's kernels take rows in blocks),
    a draft of 2 cannot pay at any odds while one of 3 can: exploring at 2 lost for sure."""
    blocks = [30, 60, 80, 85, 125, 150, 165, 180, 215, 250]
    cheap_draft = profile([0.01 * ms for ms in blocks])
    policy = AutoK(FakeDraft(), profile(blocks), draft_profile=cheap_draft)
    assert policy.worth_exploring(512) == 3 and policy.choose(list(range(512))) == 3
    assert policy.explored


class FakeTree(FakeDraft):
    """A tree oracle: a step of depth K sends up to `budget` nodes."""

    name = "tree"

    def __init__(self, budget):
        super().__init__()
        self.budget = budget

    def tree_nodes(self):
        return self.budget


def test_auto_k_explores_no_tree_whose_verification_alone_could_not_pay():
    """Lookahead's window and pool: 31 rows a step. With the 1.5B's measured prices on a 2-core
    EPYC (32 rows 9.8x one token), even 90% odds along 30 levels give less than a plain step
    (its seven exploring steps cost 170-320 ms each, against 26 ms); on a GPU they pay."""
    epyc = [30 * r for r in (1, 1.57, 2.03, 2.49, 3.64, 4.34, 5.68, 5.52, 8.28, 9.79)]
    dear = AutoK(FakeTree(30), profile(epyc))
    assert not dear.worth_exploring(512) and dear.choose(list(range(512))) == 0
    assert AutoK(FakeTree(30), profile(GPU_MS)).choose(list(range(512))) == 2
    assert AutoK(FakeDraft(), profile(epyc)).choose(list(range(512))) == 2  # linear: cheap


class FakeLookahead(FakeTree):
    """Lookahead's 31 rows (W + G = 10 n-grams of N = 4), each guess 3 tokens deep."""

    name = "lookahead"

    def tree_depth(self):
        return 3


def test_a_trees_exploration_is_priced_at_its_own_depth_not_its_nodes():
    """Where 32 rows cost 5x one token, lookahead's guesses (3 tokens at most) cannot pay
    even at 90% odds: 3.4 tokens for 5 steps' time. Priced as 30 levels deep, they seemed to."""
    mid = [30 * r for r in (1, 1.3, 1.6, 1.9, 2.4, 2.9, 3.5, 3.8, 4.5, 5.0)]
    assert AutoK(FakeTree(30), profile(mid)).worth_exploring(512)
    assert not AutoK(FakeLookahead(30), profile(mid)).worth_exploring(512)
    assert AutoK(FakeLookahead(30), profile(GPU_MS)).worth_exploring(512)


class FakeHeads(FakeDraft):
    """Medusa's chain: one token per head, four heads."""

    name = "medusa"

    def tree_depth(self):
        return 4


def test_auto_k_prices_no_draft_longer_than_the_oracle_can_send():
    """Positions past the last head are never judged, so they keep the prior's odds: priced,
    they made a 31-token draft look worth its rows where batches are cheap, and the oracle
    sends 4."""
    policy = AutoK(FakeHeads(), profile(GPU_MS))
    for _ in range(6):
        k = policy.choose(list(range(512)))
        policy.observe(step(k, k))  # every head's guess holds
    assert policy.acceptance.judged >= 12
    assert policy.choose(list(range(512))) == 4
    assert AutoK(FakeDraft(), profile(GPU_MS)).choose(list(range(512))) == 2  # exploring


def tree_step_event(k, nodes, n_accepted):
    base = step(k, n_accepted)
    tree = tuple(ev.TreeNode(i - 1, i, "x", "draft", ev.NODE_ACCEPTED if i < n_accepted
                             else ev.NODE_REJECTED) for i in range(nodes))
    verify_ms = profile(CPU_MS).cost_ms(nodes + 1, 512)
    return dataclasses.replace(base, tree=tree, path=tuple(range(n_accepted)),
                               timing=ev.Timing(0.01, verify_ms, 0.5))


def test_auto_k_prices_a_tree_step_at_its_nodes_not_at_k_plus_one():
    oracle = FakeTree(budget=24)
    policy = AutoK(oracle, profile(CPU_MS))
    assert policy.rows(3) == 25  # until seen: the node budget
    for _ in range(20):
        policy.observe(tree_step_event(3, nodes=12, n_accepted=2))
    assert policy.rows(3) == pytest.approx(13, rel=0.05)  # as seen: 12 nodes + the pending one
    assert policy.step_ms(3, 512) == pytest.approx(profile(CPU_MS).cost_ms(13, 512) + 0.5,
                                                   rel=0.1)
    linear = AutoK(FakeDraft(), profile(CPU_MS))
    assert linear.rows(3) == 4


def test_auto_k_learns_from_a_tree_the_oracle_priced_out():
    policy = AutoK(FakeTree(budget=16), profile(CPU_MS))
    assert policy.verify_ms(5, 512) > policy.verify_ms(1, 512) == CPU_MS[0]
    priced_out = dataclasses.replace(
        step(0, 0), step=1, k=3, proposed=(), tree=None, declined=ev.DECLINE_AUTO_K,
        timing=ev.Timing(6.0, CPU_MS[0], 0.5))
    # The run's first drafting reads the prompt too: not a drafting cost per token.
    policy.observe(dataclasses.replace(priced_out, step=0, timing=ev.Timing(300.0, 9.0, 0.5)))
    assert policy.draft_ms_per_token is None
    policy.observe(priced_out)
    assert policy.acceptance.counts == {1: [0.0, 2.0]}  # a first guess refused, twice
    assert policy.draft_ms_per_token == pytest.approx(2.0)  # 6 ms for 3 depths
    assert policy.rows(3) == 17  # nothing sent says nothing of a tree's width


class TimedLookup(FakeLookup):
    """A lookup that takes `ms` on the policy's clock, counting the times it is asked."""

    def __init__(self, ms):
        super().__init__()
        self.now, self.ms, self.asked = 0.0, ms, 0

    def clock(self):
        return self.now

    def match_length(self, context):
        self.asked += 1
        self.now += self.ms / 1000.0
        return self.match


def plain_run(policy, oracle, steps, start=512, verify_ms=None):
    """`steps` plain steps from a context of `start` tokens, each verified in `verify_ms` (the
    CPU profile's time by default); the decline reason of each."""
    reasons = []
    for i in range(steps):
        k = policy.choose(list(range(start + i)))
        assert k == 0
        reasons.append(policy.zero_reason)
        event = plain_step(start + i, 7)
        if verify_ms is not None:
            event = dataclasses.replace(event, timing=ev.Timing(0.0, verify_ms, 0.1))
        policy.observe(event)
    return reasons


def test_a_dear_lookup_finding_nothing_is_asked_every_fourth_step():
    """llama.cpp on an H200: a 1.2 ms step, the n-gram cache's lookup 0.06 ms. After 8 plain
    steps the lookup is asked every 4th step; a sent draft, or a new run, asks every step."""
    oracle = TimedLookup(0.06)
    policy = AutoK(oracle, Profile("m", "llama", "cuda", None, [512], [1, 9], [[1.2, 9.0]]),
                   clock=oracle.clock)
    reasons = plain_run(policy, oracle, 24, verify_ms=1.2)
    assert oracle.asked == 8 + 4  # steps 8, 12, 16, 20 asked; the other 12 skipped
    assert reasons[:9] == [ev.DECLINE_NO_MATCH] * 9
    assert reasons[9:12] == [ev.DECLINE_IDLE] * 3 and reasons[12] == ev.DECLINE_NO_MATCH
    assert ev.DECLINE_WORDS[ev.DECLINE_IDLE]
    asked = oracle.asked
    plain_run(policy, oracle, 4, start=100, verify_ms=1.2)  # a new run (shorter): looks again
    assert oracle.asked == asked + 4
    policy.observe(step(2, 2, position=104, live=profile(GPU_MS)))  # a draft: every step again
    plain_run(policy, oracle, 8, start=107, verify_ms=1.2)
    assert oracle.asked == asked + 4 + 8


def test_a_lookup_cheap_against_the_step_is_always_asked():
    """On a 2-core CPU a step takes 30 ms: the same 0.06 ms lookup is 0.2% of it."""
    oracle = TimedLookup(0.06)
    policy = AutoK(oracle, profile(CPU_MS), clock=oracle.clock)
    reasons = plain_run(policy, oracle, 30)
    assert oracle.asked == 30 and set(reasons) == {ev.DECLINE_NO_MATCH}


def test_a_loaded_machine_slows_the_draft_as_it_slows_the_target():
    """Before its own drafting is timed, the draft's profiled cost is scaled as the target's
    live steps are: priced unscaled, a draft looked cheaper on a busy machine than it was, and
    auto K explored a draft that could not pay (#67)."""
    draft = profile([0.65 * ms for ms in CPU_MS])
    idle = AutoK(FakeDraft(), profile(CPU_MS), draft_profile=draft)
    busy = AutoK(FakeDraft(), profile(CPU_MS), draft_profile=draft)
    slow = profile([1.5 * ms for ms in CPU_MS])
    for i in range(12):
        busy.observe(step(0, 0, live=slow, index=i + 1))
    assert busy.step_ms(0, 512) == pytest.approx(1.5 * idle.step_ms(0, 512), rel=0.02)
    assert busy.step_ms(2, 512) == pytest.approx(1.5 * idle.step_ms(2, 512), rel=0.02)
    assert not busy.worth_exploring(512)


def test_a_draft_whose_measured_odds_cannot_pay_is_not_explored_and_starts_from_them():
    """`specviz pair` measured the draft's acceptance by position before any run: auto K
    prices exploring at those odds (not 90%) and starts its estimates from them."""
    draft = profile([0.1 * ms for ms in GPU_MS])
    hopeful = AutoK(FakeDraft(), profile(GPU_MS), draft_profile=draft)
    assert hopeful.worth_exploring(512)
    measured = AutoK(FakeDraft(), profile(GPU_MS), draft_profile=draft,
                     known_accept=[0.05, 0.0])
    assert not measured.worth_exploring(512) and measured.choose(list(range(512))) == 0
    assert measured.acceptance.estimate(1, measured._prior(1)) == pytest.approx(0.05)
    assert measured._prior(5) == 0.0  # past the last measured position: the last
    assert AutoK(FakeDraft(), profile(GPU_MS), draft_profile=draft,
                 known_accept=[0.9, 0.9]).worth_exploring(512)


def test_the_pairs_measured_odds_are_kept_and_a_bad_file_is_ignored(tmp_path, monkeypatch):
    from specviz.engines.pair import known

    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    assert known.acceptance("t", "d") is None
    assert known.remember("org/t.gguf", "d", [0.7, 0.5, None, 0.9], 300) is None
    assert known.acceptance("org/t.gguf", "d") == [0.7, 0.5]  # up to the first unmeasured
    path = known.path_for("t", "d")
    path.parent.mkdir(parents=True, exist_ok=True)
    for bad in ('{"by_position": "x"}', "[1]", "not json", '{"by_position": [NaN]}',
                '{"by_position": [1.5]}', '{"by_position": [true]}'):
        path.write_text(bad)
        assert known.acceptance("t", "d") is None, bad


def test_a_no_to_exploring_is_asked_again_only_now_and_then():
    """Pricing every draft length on every step cost a lane that never explores 30-60 us a
    step; the answer drifts slowly with the prices, so a "no" holds for a while."""
    from specviz.engines.cost.auto_k import EXPLORE_RECHECK

    class Counted(AutoK):
        asked = 0

        def worth_exploring(self, n_ctx, left=None):
            Counted.asked += 1
            return super().worth_exploring(n_ctx, left)

    dear = Counted(FakeDraft(), profile(CPU_MS),
                   draft_profile=profile([0.65 * ms for ms in CPU_MS]))
    for i in range(4 * EXPLORE_RECHECK):
        assert dear.choose(list(range(512 + i))) == 0
        dear.observe(step(0, 0, position=512 + i, index=i + 1))
    assert Counted.asked <= 5


def test_a_stall_teaches_auto_k_nothing():
    """A batch that took 200 times its price (the transformers backend compiling the graph of
    a width on its first use) is not what batches cost: learnt, the lane stopped drafting for
    the rest of the run."""
    policy = AutoK(FakeLookup(), Profile("m", "transformers", "cpu", None, [512], [1, 9],
                                         [[20.0, 24.0]]))
    for _ in range(5):
        policy.observe(timed_step(0, 20.0))
    policy.observe(timed_step(8, 4000.0))  # compiling the 16-wide graph
    for _ in range(5):
        policy.observe(timed_step(8, 24.0))
    assert policy.step_ms(8, 512) - policy.overhead_ms == pytest.approx(24.0, rel=0.05)


def test_a_run_tells_auto_k_what_it_has_left_and_a_short_one_never_pays_to_learn_a_draft(
        tiny_backend, tiny_draft_backend):
    """Where it is used: a session hands auto K the tokens the run may still write before
    each step, and the price of learning a draft model's odds (its read of the context, the
    exploring steps) is weighed against them. With a draft at 5% of the target's price, 16
    tokens cannot win back learning its odds and no step drafts; 200 can, and the first step
    explores at K = 2 (the same prices, asked directly: tests above)."""
    from specviz.engines.loop.session import RunSettings, Session
    from specviz.engines.oracles import make_oracle

    prompt = "def add(a, b):\n    return a + b\n\nThe quick brown fox jumps over the lazy dog."

    class Told(AutoK):
        def choose(self, context, left=None):
            self.told.append((len(context), left))
            return super().choose(context, left)

    for n in (16, 200):
        oracle = make_oracle("draft", target=tiny_backend, draft=tiny_draft_backend)
        policy = Told(oracle, profile(CPU_MS), draft_profile=profile([0.05 * ms for ms in CPU_MS]))
        session = Session(tiny_backend, oracle, RunSettings(prompt, chat=False, k=4, max_tokens=n),
                          k_policy=policy)
        policy.told = []
        steps = []
        for event in session:
            if isinstance(event, ev.StepEvent):
                steps.append(event)
                if n == 200:
                    session.stop()  # the first step is what is asked
        start = len(session.prompt_ids)
        assert policy.told == [(start + s.totals.tokens - len(s.emitted_ids), n - s.totals.tokens
                          + len(s.emitted_ids)) for s in steps]
        if n == 16:
            assert all(s.k == 0 and s.declined == ev.DECLINE_AUTO_K for s in steps)
            assert len(steps) == 16
        else:
            assert steps[0].k == 2 and steps[0].explored and len(steps[0].proposed) == 2
