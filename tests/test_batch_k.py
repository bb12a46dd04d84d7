"""Auto K for a batch of streams (engines/cost/batch_k.py): positions go to the streams whose
guesses hold, priced at the batch's width; none where nothing pays; one stream chooses as
single-stream auto K does; the widths a batch needs are timed once (profile_widths.py); and
a batched run under it stays lossless per stream."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cost import FakeDraft, FakeLookup

from specviz.engines import events as ev
from specviz.engines.bench.compare import check_stream_against_plain
from specviz.engines.cost import profile as prof
from specviz.engines.cost import profile_widths
from specviz.engines.cost.auto_k import AutoK, Odds
from specviz.engines.cost.batch_k import BatchK, Want, positions_by_worth
from specviz.engines.cost.profile import Profile
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.loop.streams import BatchStep, StreamsSession
from specviz.engines.oracles import make_oracle

WIDTHS = [1, 2, 4, 9, 16, 32]


def flat(ms_one: float = 10.0, per_row: float = 0.05, widths=WIDTHS) -> Profile:
    """A GPU's shape: a pass costs about what one token does, whatever its width."""
    return Profile("m", "llama", "cuda", None, [512], list(widths),
                   [[ms_one + per_row * (w - 1) for w in widths]])


def linear(ms_row: float = 10.0) -> Profile:
    """A busy CPU's shape: every row costs as much as the first."""
    return Profile("m", "llama", "cpu", 2, [512], WIDTHS, [[ms_row * w for w in WIDTHS]])


def batch_of(n: int, profile: Profile) -> BatchK:
    return BatchK([AutoK(FakeLookup(), profile) for _ in range(n)], profile)


def wants(n: int, context_len: int = 512, room: int = 64) -> list[Want]:
    return [Want(i, [7] * context_len, room) for i in range(n)]


def test_positions_go_to_the_stream_whose_guesses_hold():
    batch = batch_of(2, flat(per_row=0.8))
    choice = batch.choose(wants(2), {0: Odds((0.9,) * 8), 1: Odds((0.05,) * 8)})
    assert choice.ks[0] >= 4 and choice.ks[1] == 0
    assert choice.width == 2 + choice.ks[0]
    assert choice.tok_per_s > choice.plain_tok_per_s


def test_where_every_row_costs_a_token_nobody_guesses():
    """Each guess is worth at most one token and costs one token's pass: none pays, and
    each stream's policy says why (auto K priced its guesses out)."""
    batch = batch_of(3, linear())
    choice = batch.choose(wants(3), {i: Odds((0.95,) * 8) for i in range(3)})
    assert choice.ks == {0: 0, 1: 0, 2: 0} and choice.width == 3
    assert all(p.zero_reason == ev.DECLINE_AUTO_K for p in batch.policies)


def test_a_wider_batch_gives_each_stream_fewer_positions():
    """On a profile whose rows grow dear past a few, the same odds earn a stream fewer
    positions the more streams share the pass, and none once the batch is wide enough."""
    widths = [1, 2, 4, 8, 16, 32]
    knee = Profile("m", "llama", "cpu", 2, [512], widths,
                   [[10.0, 10.5, 11.0, 14.0, 28.0, 56.0]])
    per_stream = []
    for n in (1, 2, 4, 8, 16):
        choice = batch_of(n, knee).choose(wants(n), {i: Odds((0.8,) * 8) for i in range(n)})
        per_stream.append(sum(choice.ks.values()) / n)
    assert per_stream[0] > per_stream[2] > 0
    assert per_stream[-1] == 0
    assert per_stream == sorted(per_stream, reverse=True)


def test_one_stream_chooses_as_single_stream_auto_k():
    """The same learnt odds and profile: a batch of one picks the K a single run's policy
    picks (its own width priced the same way)."""
    for profile in (flat(), flat(per_row=0.8), linear(), flat(per_row=3.0)):
        for accept in (0.3, 0.6, 0.9):
            alone, batched = AutoK(FakeLookup(), profile), AutoK(FakeLookup(), profile)
            for policy in (alone, batched):
                policy.oracle.match = 5
                for _ in range(20):
                    policy.acceptance.add(policy._key(1), True)
                    policy.acceptance.add(policy._key(1), accept > 0.5)
            context = [1] * 512
            k = alone.choose(context)
            choice = BatchK([batched], profile).choose([Want(0, context, 64)])
            assert choice.ks[0] == k, (profile.ms, accept)


def test_the_batch_is_never_wider_than_the_profile_measured():
    batch = batch_of(16, flat())
    choice = batch.choose(wants(16), {i: Odds((0.99,) * 31) for i in range(16)})
    assert choice.width <= max(flat().batches) == 32
    assert sum(choice.ks.values()) == 32 - 16


def test_a_stream_still_learning_its_odds_is_tried_briefly():
    """A draft whose odds are not known yet is priced at good odds for a couple of
    positions, enough to learn from, never a long draft on hope."""
    batch = batch_of(2, flat())
    choice = batch.choose(wants(2), {0: Odds((0.9,) * 8, exploring=True), 1: Odds(())})
    assert choice.ks == {0: 2, 1: 0}
    assert batch.policies[0].explored


def test_the_room_a_stream_has_left_bounds_its_positions():
    batch = batch_of(2, flat())
    choice = batch.choose([Want(0, [1] * 100, 2), Want(1, [1] * 100, 0)],
                          {0: Odds((0.99,) * 8), 1: Odds((0.99,) * 8)})
    assert choice.ks == {0: 2, 1: 0}


def test_passes_as_they_took_scale_the_profile_and_a_stall_does_not():
    batch = batch_of(2, flat())
    predicted = batch.profile.cost_ms(6, 512)
    for _ in range(12):
        batch.observe_pass(6, 512, 2 * predicted, 0.5)
    assert batch.scale == pytest.approx(2.0)
    batch.observe_pass(6, 512, 50 * predicted, 0.5)  # the process swapped out
    assert batch.scale == pytest.approx(2.0)
    assert batch.pass_ms(6, 512) == pytest.approx(2 * predicted + 0.5)


def test_the_widths_a_batch_needs():
    profile = flat(widths=[1, 2, 4, 9, 16, 32])
    assert profile_widths.needed(profile, 4) == []  # 20 positions: measured
    assert profile_widths.needed(profile, 8) == [48]
    assert profile_widths.needed(profile, 16) == [48, 64, 96]
    wide = flat(widths=[1, 9, 32, 48, 64, 96])
    assert profile_widths.needed(wide, 16) == []


# ------------------------------------------------------------------ on a real model


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    from tiny_gguf import tiny_llama_backend

    backend = tiny_llama_backend(tmp_path_factory.mktemp("batch-k"), 1024)
    yield backend
    backend.close()


def test_widening_times_the_batch_widths_once_and_stores_them(tiny_llama):
    measured = prof.measure(tiny_llama, "tiny-batch-k", 1, batches=[1, 2, 9, 32], repeats=1,
                            contexts=[128])
    wide = profile_widths.widen(tiny_llama, measured, 8)
    assert wide.batches[-1] == 48 and len(wide.ms[0]) == len(wide.batches)
    assert wide.cost_ms(48, 128) > wide.cost_ms(9, 128)
    stored, _ = prof.read("tiny-batch-k", "llama", tiny_llama.device, 1, tiny_llama.dtype,
                          tiny_llama.profile_variant)
    assert stored.batches == wide.batches
    assert profile_widths.widen(tiny_llama, stored, 8) is stored  # nothing left to time


PROMPTS = ["the x the y the x the y the x the", "def add(a, b): return a + b def add(",
           "(x) (y) (x) (y) (x) (y) (", "a b c a b c a b c a b"]


def test_a_batch_under_auto_k_writes_each_streams_plain_decoding(tiny_llama):
    """Prompt lookup on four repeating prompts, K chosen for the batch on a GPU-shaped
    profile (so guesses pay and are sent): each stream's greedy text is its plain decoding
    alone (or parts at a measured near-tie), and its steps say auto K chose them."""
    runs = [RunSettings(p, chat=False, k=32, max_tokens=24) for p in PROMPTS]
    oracles = [make_oracle("prompt-lookup") for _ in runs]
    profile = flat()
    policies = [AutoK(o, profile) for o in oracles]
    session = StreamsSession(tiny_llama, oracles, runs, policies, BatchK(policies, profile))
    events = list(session)
    steps = [b for b in events if isinstance(b, BatchStep)]
    assert any(b.width > len(b.steps) for b in steps)  # some stream was given positions
    for i, run in enumerate(runs):
        mine = [e for b in steps for j, e in b.steps if j == i]
        assert all(e.auto_k for e in mine)
        plain = Session(tiny_llama, make_oracle("none"), run)
        plain_steps = [e for e in plain if isinstance(e, ev.StepEvent)]
        result = check_stream_against_plain(tiny_llama, plain.prompt_ids, mine, plain_steps, 3)
        assert result.identical or result.near_tie, (i, result.note)


def test_a_padded_batch_prices_every_stream_at_the_widest():
    """The transformers backend computes each stream at the widest one's width: a position
    given to one stream alone costs a row of every stream, so on the same odds a padded
    batch gives fewer positions, and evenly."""
    knee = Profile("m", "transformers", "cpu", 2, [512], [1, 2, 4, 8, 16, 32],
                   [[10.0, 10.5, 11.0, 14.0, 28.0, 56.0]])
    odds = {0: Odds((0.9,) * 8), 1: Odds((0.9,) * 8), 2: Odds((0.3,) * 8), 3: Odds((0.3,) * 8)}
    packed = batch_of(4, knee).choose(wants(4), odds)
    padded = BatchK([AutoK(FakeLookup(), knee) for _ in range(4)], knee, padded=True)
    choice = padded.choose(wants(4), odds)
    assert sum(choice.ks.values()) <= sum(packed.ks.values())
    assert choice.width == 4 * (1 + max(choice.ks.values()))
    assert padded.computed([1, 3, 2]) == 9 and batch_of(1, knee).computed([1, 3, 2]) == 6


def test_a_profile_widened_for_a_batch_leaves_a_single_runs_limit():
    """The widths a batch stored (up to 96 here) price batches only: a single run's drafts
    stay within the single-run sizes."""
    wide = flat(widths=[1, 2, 4, 9, 16, 32, 48, 64, 96])
    assert AutoK(FakeLookup(), wide).k_max == 31
    assert BatchK([AutoK(FakeLookup(), wide)], wide).widest == 96


def test_a_batchs_streams_learn_their_odds_not_the_pass_as_their_own():
    """A step's pass is the whole batch's: a stream's policy that took it for its own rows
    would price its guesses as dear as the batch; the batch learns the pass (observe_pass)."""
    from test_cost import step

    profile = flat(per_row=0.8)
    alone, batched = AutoK(FakeLookup(), profile), AutoK(FakeLookup(), profile)
    BatchK([batched], profile)
    dear = flat(ms_one=50.0, per_row=4.0)  # passes five times the profile's price
    for i in range(12):
        for policy in (alone, batched):
            policy.observe(step(3, 2, live=dear, index=i + 1))
    assert alone.scale == pytest.approx(5.0, rel=0.05)
    assert batched.scale == 1.0
    assert batched.acceptance.judged == alone.acceptance.judged > 0


def test_a_stream_too_short_to_repay_learning_its_drafts_odds_does_not_explore():
    """As a single run's auto K: a draft model's first read of the context and its exploring
    steps must be won back by the tokens left; a batch's stream with 4 left does not try."""
    profile, draft = flat(per_row=0.8), flat(ms_one=2.0, per_row=0.1)
    exploring = {0: Odds((0.9,) * 8, exploring=True)}

    def given(left):
        policy = AutoK(FakeLookup(), profile, draft_profile=draft)
        return BatchK([policy], profile).choose([Want(0, [7] * 512, 64, left)], exploring).ks[0]

    assert given(4) == 0
    assert given(2000) == 2


# ------------------------------------------------------------------ a fixed set of streams

# Rows nearly free, width dear past a few tokens: transformers' padded batch on a CPU.
ROWS_FREE = Profile("m", "transformers", "cpu", 2, [512], [1, 2, 4, 8, 16, 32],
                    [[60.0, 61.0, 62.0, 90.0, 150.0, 280.0]])


def test_guesses_pay_where_they_shorten_the_longest_stream():
    """Where rows cost about nothing, a token written ahead by a stream that is not the
    longest saves only its row of a later pass: not worth a wider pass. The same guesses
    in the stream with the most tokens left shorten the run by a whole pass each."""
    odds = {0: Odds((0.95,) * 8), 1: Odds(())}

    def ks(left_guessing: int, left_other: int) -> dict[int, int]:
        batch = BatchK([AutoK(FakeLookup(), ROWS_FREE) for _ in range(2)], ROWS_FREE,
                       padded=True)
        return batch.choose([Want(0, [7] * 512, 64, left_guessing),
                             Want(1, [7] * 512, 64, left_other)], odds).ks

    assert ks(60, 10)[0] > 0  # the guessing stream is the longest
    assert ks(10, 60) == {0: 0, 1: 0}  # it is not: its tokens save a row that costs ~1 ms
    assert ks(60, 60) == {0: 0, 1: 0}  # tied: the other still decodes every one of its 60
    unknown = BatchK([AutoK(FakeLookup(), ROWS_FREE) for _ in range(2)], ROWS_FREE,
                     padded=True).choose(wants(2), odds)
    assert unknown.ks[0] > 0  # tokens left not known: every token a plain pass's share


def test_with_rows_priced_as_tokens_the_tokens_left_change_little():
    """Where every row costs what a token does (llama.cpp's packed batch on a busy CPU, a
    profile rising with width), a stream ahead saves its whole row: the order of the
    streams' tokens left moves the choice little."""
    knee = Profile("m", "llama", "cpu", 2, [512], [1, 2, 4, 8, 16, 32],
                   [[10.0, 10.5, 11.0, 14.0, 28.0, 56.0]])
    odds = {i: Odds((0.9,) * 8) for i in range(4)}
    lefts = ([64, 64, 64, 64], [64, 50, 40, 30], [30, 40, 50, 64])
    given = [sum(batch_of(4, knee).choose(
        [Want(i, [7] * 512, 64, left) for i, left in enumerate(lefts_)], odds).ks.values())
        for lefts_ in lefts]
    assert min(given) > 0 and max(given) - min(given) <= 2


def test_passes_with_guesses_learn_their_own_scale():
    """A pass with guesses may cost the batch more than the profile's single sequence of as
    many tokens says (a padded 4 x 4 on transformers: 2.4x a 4 x 1, the profile's 16 tokens
    1.9x its 4): learnt apart from the plain passes', each priced by its own."""
    batch = batch_of(4, flat())
    plain_price, wide_price = flat().cost_ms(4, 512), flat().cost_ms(16, 512)
    assert batch.pass_ms(16, 512, rows=4) == pytest.approx(wide_price)  # none seen: plain's
    for _ in range(12):
        batch.observe_pass(4, 512, plain_price, 0.0, rows=4)
        batch.observe_pass(16, 512, 1.5 * wide_price, 0.0, rows=4)
    assert batch.scale == pytest.approx(1.0) and batch.wide_scale == pytest.approx(1.5)
    assert batch.pass_ms(16, 512, rows=4) == pytest.approx(1.5 * wide_price)
    assert batch.pass_ms(4, 512, rows=4) == pytest.approx(plain_price)


def test_the_longest_streams_lead_shrinks_by_the_chances_not_their_means():
    """Tied streams shorten the run only as far as the least of them writes: its expectation
    is taken over every way their guesses can hold (here counted one by one), which is less
    than the least of their means. One stream alone: its guesses' expected tokens."""
    import itertools

    from specviz.engines.cost.batch_k import Saving

    worths = [0.9, 0.81, 0.729, 0.6561]  # each guess holds at 0.9 once the ones before did
    alone = Saving([Want(0, [], 4, 20)], 10.0, 10.0)
    assert alone.lead_shrinks([worths]) == pytest.approx(sum(worths))

    tied = Saving([Want(i, [], 4, 20) for i in range(3)], 10.0, 12.0)
    exact = 0.0
    for taken in itertools.product(range(5), repeat=3):  # guesses each stream keeps
        chance = 1.0
        for t in taken:
            chance *= (worths[t - 1] if t else 1.0) - (worths[t] if t < 4 else 0.0)
        exact += chance * min(taken)
    assert tied.lead_shrinks([worths] * 3) == pytest.approx(exact)
    assert exact < sum(worths) * 0.7
    ahead = Saving([Want(0, [], 4, 20), Want(1, [], 4, 18)], 10.0, 12.0)
    assert ahead.lead_shrinks([worths, []]) == pytest.approx(0.9 + 0.81)  # 2 to the tie


def test_where_nothing_pays_for_a_while_the_streams_are_asked_every_few_steps():
    """Asking and pricing every stream's odds costs about 0.6% of a step of 16 streams: after
    `idle_steps` plain steps in a row they are asked every LOOKUP_EVERY-th step only, and at
    once again where guesses pay."""
    from specviz.engines.cost.auto_k import LOOKUP_EVERY
    from specviz.engines.cost.batch_k import idle_steps

    batch = batch_of(3, linear())
    asked, idle = [], idle_steps(3)
    for step in range(idle + 3 * LOOKUP_EVERY):
        if not batch.resting(3):
            asked.append(step)
            batch.choose(wants(3), {i: Odds((0.95,) * 8) for i in range(3)})
        batch.stepped(sent=False)
    assert asked == [*range(idle + 1),
                     *range(idle + LOOKUP_EVERY, idle + 3 * LOOKUP_EVERY, LOOKUP_EVERY)]
    batch.profile = flat(per_row=0.8)  # guesses pay now: asked at every step again
    batch.choose(wants(3), {i: Odds((0.95,) * 8) for i in range(3)})
    assert batch.last.width > 3 and not batch.resting(3)


def test_a_wide_resting_batch_asks_one_stream_a_step_at_most_on_average():
    """Up to LOOKUP_EVERY streams a resting batch asks every LOOKUP_EVERY-th step, as a single
    run looks; beyond, every N-th step for N streams, so its lookups stay one a step on
    average (16 streams asked every fourth step cost the n-gram cache 1% of a CPU's step).
    It rests once its streams have found nothing worth sending at IDLE_STEPS of their steps
    in a row, as a single run does: sooner the more streams there are."""
    from specviz.engines.cost.auto_k import IDLE_STEPS, LOOKUP_EVERY

    for streams, every, idle in [(1, LOOKUP_EVERY, IDLE_STEPS), (2, LOOKUP_EVERY, 4),
                                 (LOOKUP_EVERY, LOOKUP_EVERY, 2), (8, 8, 1), (16, 16, 1)]:
        batch = batch_of(streams, linear())
        asked = []
        for step in range(idle + 3 * every):
            if not batch.resting(streams):
                asked.append(step)
            batch.stepped(sent=False)
        assert asked == [*range(idle + 1), idle + every, idle + 2 * every], streams
    batch.stepped(sent=True)  # a guess sent: every step asked again
    assert not batch.resting(16)


def _best_count_by_hand(batch: BatchK, order, asked: list[Want], n_ctx: int) -> int:
    """The count that saves the most plain decoding per ms, every count priced anew."""
    from specviz.engines.cost.batch_k import Saving

    n = len(asked)
    plain = batch.pass_ms(n, n_ctx)
    saving = Saving(asked, batch.pass_ms(1, n_ctx), plain)
    best, best_saves = 0, saving.by([[] for _ in asked]) / plain
    for count in range(1, len(order) + 1):
        held = [[w for w, i, _ in order[:count] if i == want.index] for want in asked]
        width = n * (1 + max(map(len, held))) if batch.padded else n + count
        if width > batch.widest:
            break
        spent = batch.pass_ms(width, n_ctx, rows=n) + sum(d for _, _, d in order[:count])
        if saving.by(held) / spent > best_saves * (1 + 1e-9):
            best, best_saves = count, saving.by(held) / spent
    return best


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(0, 12), st.integers(1, 40)),
                min_size=1, max_size=6),
       st.lists(st.floats(5.0, 30.0), min_size=7, max_size=7), st.booleans(),
       st.floats(0.5, 3.0))
def test_the_batch_takes_the_count_that_saves_the_most_per_ms(streams, costs, padded, wide):
    """A step of 16 streams weighs up to 80 counts, every width priced at once and the
    expected tokens summed as it goes: the count a by-hand pricing of each count takes
    (dips in the profile, a padded batch and a learnt wide scale included)."""
    profile = Profile("m", "llama", "cpu", 2, [128, 1024], [1, 2, 4, 8, 16, 32, 64],
                      [costs, [1.2 * c for c in costs]])
    batch = BatchK([AutoK(FakeLookup(), profile) for _ in streams], profile, padded=padded)
    n = len(streams)
    batch.observe_pass(n + 3, 600, wide * profile.cost_ms(n + 3, 600), 0.4, rows=n)
    asked = [Want(i, [7] * 600, room, left) for i, (_, room, left) in enumerate(streams)]
    odds = {i: Odds(tuple(a ** (j + 1) for j in range(8))) for i, (a, _, _) in
            enumerate(streams)}
    order = positions_by_worth(asked, odds, lambda w: 0.1 * w.index)
    assert batch._best_count(order, asked, 600)[0] == _best_count_by_hand(batch, order,
                                                                          asked, 600)


def test_positions_given_that_found_nothing_to_send_let_the_batch_rest():
    """A stream still to be learnt is given positions at good odds; where its oracle finds
    nothing to send (the rules on a chat prompt), those are plain steps too, and the batch
    rests as where nothing paid (every step asked, a one-stream batch read 0.98x)."""
    from specviz.engines.cost.auto_k import IDLE_STEPS

    batch = batch_of(1, flat(per_row=0.05))
    for _ in range(IDLE_STEPS + 1):
        assert not batch.resting(1)
        assert batch.choose(wants(1), {0: Odds((0.9,) * 8, exploring=True)}).ks[0] > 0
        batch.stepped(sent=False)
    assert batch.resting(1)
    batch.stepped(sent=False)
    batch.stepped(sent=True)
    assert not batch.resting(1)


def test_a_guess_the_batch_chose_is_not_priced_again_by_its_oracle():
    """A tree oracle prices its own nodes with auto K's single-sequence prices; where the
    batch chose the stream's K (priced at the batch's width), the oracle is not given them,
    so it cannot decline what the batch chose to verify."""
    from types import SimpleNamespace

    from test_oracles import run_context

    from specviz.engines.loop.session import propose

    oracle = make_oracle("suffix", suffix_memory="off")
    policy = SimpleNamespace(verify_ms=lambda rows, n_ctx: 1.0,
                             choose=lambda context, most: 2)
    run = SimpleNamespace(oracle=oracle, k_policy=policy, context=[1, 2, 3], k=0)
    oracle.start(run_context([1, 2, 3]))
    propose(run, 8)
    assert oracle.price is policy.verify_ms  # a single run: its oracle prices its tree
    propose(run, 8, chosen=2)
    assert oracle.price is None


def test_a_batchs_streams_learn_one_oracles_odds_together():
    """The streams of a batch pool what they judge: a stream that has judged nothing starts
    from the others' odds, not from good odds to explore, and its own judgments then move
    it; a policy of its own (a single run) learns alone as before."""
    from test_cost import step

    from specviz.engines.cost.auto_k import EXPLORE_JUDGED, Acceptance

    pool = Acceptance()
    first, second = (FakeLookup(), FakeLookup())
    first.match = second.match = None  # guesses that copy nothing (heads, a draft)
    policies = [AutoK(o, flat(), pool=pool) for o in (first, second)]
    alone = AutoK(FakeLookup(), flat())
    alone.oracle.match = None
    context = [7] * 512
    assert policies[1].odds(context).exploring and alone.odds(context).exploring
    for _ in range(EXPLORE_JUDGED):  # the first stream's first guesses all fail
        policies[0].observe(step(2, 0))
    odds = policies[1].odds(context)
    assert not odds.exploring and odds.accept[0] < 0.1  # the batch's odds, its own none
    assert alone.odds(context).exploring
    for _ in range(30):  # its own guesses hold: its odds are its own again
        policies[1].observe(step(1, 1))
    assert policies[1].odds(context).accept[0] > 0.6


def test_a_pooled_estimate_leaves_a_streams_own_judgments_out_of_its_prior():
    """A stream's judgments count once in its estimate: its prior is the other streams'."""
    from specviz.engines.cost.auto_k import PRIOR_MEAN, PRIOR_WEIGHT, Acceptance

    pool = Acceptance()
    one, other = Acceptance(pool=pool), Acceptance(pool=pool)
    for held in (True, True, False, True):
        one.add(1, held)
    lonely = Acceptance()
    for held in (True, True, False, True):
        lonely.add(1, held)
    assert one.estimate(1) == pytest.approx(lonely.estimate(1))  # no one else judged
    assert other.estimate(1) == pytest.approx((3 + PRIOR_MEAN * PRIOR_WEIGHT)
                                              / (4 + PRIOR_WEIGHT))
    assert other.learnt == one.learnt == pool.judged == 4 and other.judged == 0


def test_a_padded_batch_learns_odds_one_position_a_stream():
    """In a padded pass a stream's second exploring position widens every stream's row: a
    padded batch explores one position a stream, a batch of rows side by side two."""
    exploring = {i: Odds((0.9,) * 8, exploring=True) for i in range(4)}
    side_by_side = batch_of(4, flat())
    padded = BatchK([AutoK(FakeLookup(), flat()) for _ in range(4)], flat(), padded=True)
    assert set(side_by_side.choose(wants(4), exploring).ks.values()) == {2}
    assert set(padded.choose(wants(4), exploring).ks.values()) == {1}


def test_heads_whose_held_out_odds_cannot_pay_at_the_batchs_width_are_not_explored():
    """Trained heads come with their held-out acceptance (known_accept): a batch prices
    learning their odds at it, not at good odds. Where a padded pass of 4 x 2 costs 1.3x a
    plain one, heads holding 25% are not tried; alone, where 2 rows cost 1.03x one, they are."""
    shape = Profile("m", "transformers", "cpu", 2, [512], [1, 2, 4, 8, 16, 32],
                    [[60.0, 62.0, 65.0, 85.0, 140.0, 260.0]])

    def batch(n: int, known) -> BatchK:
        return BatchK([AutoK(FakeDraft(), shape, known_accept=known) for _ in range(n)],
                      shape, padded=True)

    assert set(batch(4, None).choose(wants(4)).ks.values()) == {1}  # good odds: explored
    assert set(batch(4, [0.25, 0.2]).choose(wants(4)).ks.values()) == {0}
    assert batch(1, [0.25, 0.2]).choose(wants(1)).ks[0] > 0
    # A tree oracle (an EAGLE head's 16 nodes) alone is priced at its tree's rows, in a batch
    # at the chain the batch verifies.
    tree = FakeDraft()
    tree.tree_nodes = lambda: 16
    alone = AutoK(tree, shape, known_accept=[0.25, 0.2])
    assert alone.rows(1) == 17 and not alone.may_explore(512)
    in_batch = BatchK([AutoK(tree, shape, known_accept=[0.25, 0.2])], shape, padded=True)
    assert in_batch.policies[0].rows(1) == 2 and in_batch.choose(wants(1)).ks[0] > 0
