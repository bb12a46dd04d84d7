"""`--k auto`: before every step, the draft length with the most expected tokens per second.

Expected tokens per step come from the acceptance observed so far in this run (a Beta posterior
mean per key: for oracles that copy, the length of the verbatim match a proposal extends; for
the others, the draft position); the step's cost from the cost profile, scaled by the live
verification times, plus drafting and per-step overhead as measured. K = 0 (a plain step) wins
whenever the expected gain does not pay for the bigger batch. How and why, and what was tried
and dropped: docs/auto-k.md.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import events as ev
from ..oracles.base import Oracle, hints_of
from .profile import BATCHES, SETTLE, Profile
from .step_cost import best_k, expected_tokens, first_k_reaching

# Match-length buckets (lower bounds): acceptance is learnt per bucket.
MATCH_BUCKETS = (1, 2, 3, 4, 5, 7, 10, 16, 24, 32, 48)
PRIOR_MEAN = 0.5  # per draft position, for oracles that do not copy
PRIOR_WEIGHT = 2.0  # the prior counts as this many observations
# Oracles that do not copy run at K=2 (or the shortest K that good odds could pay for, where 2
# could not) until 12 tokens are judged: from a pessimistic estimate on a CPU, where batches
# are dear, they would never be tried.
EXPLORE_K, EXPLORE_JUDGED = 2, 12
# ... unless even good odds could not pay here: a draft model's tokens hold about 0.5-0.9 of the
# time on real text (Leviathan et al. 2023), so exploring needs a gain of 5% at 0.9 per token.
OPTIMISTIC_ACCEPT, EXPLORE_GAIN = 0.9, 0.05
EXPLORE_RECHECK = 16  # steps before a "no" to exploring is asked again
# What learning the odds costs for certain (a draft model's first read of the context, exploring
# steps where guesses hold at the prior's odds) must be won back this many times over by good
# odds in the tokens the run has left: good odds are met on the easiest text only. Once over,
# the 0.5B drafting for the 1.5B on a 2-core Xeon still explored on short prose questions,
# its steps there taking up to 1.18x of plain decoding's time.
LEARN_MARGIN = 2.0
EMA = 0.1  # weight of the newest step in the running timing estimates
# A verification this many times its profiled price is a stall (a graph compiled on the first
# use of its width, the process swapped out), not what a step costs: learnt, one compile of a
# few seconds priced every later batch as ruinous, and auto K never drafted again in the run.
STALL = 10.0
MIN_SEEN = 3  # steps of one cost regime before its own live scale is trusted
# A lookup asked on every step of a stretch where nothing is sent is what a declining copying
# oracle costs: on an H200, llama.cpp decodes smollm2 in 1.2 ms a step and the n-gram cache's
# lookup took 0.06 ms (4% of a prose run). After IDLE_STEPS plain steps in a row, a lookup
# costing over LOOKUP_SHARE of a plain step is asked on every LOOKUP_EVERY-th step only: a
# copy is then found up to LOOKUP_EVERY - 1 steps late. On a 2-core CPU a lookup is about 1%
# of a step and is always asked.
LOOKUP_SHARE, IDLE_STEPS, LOOKUP_EVERY = 0.03, 8, 4
RUN_STEP_MAX = 33  # the most tokens one step adds: a context that grew more is a new run


class Acceptance:
    """Accepted / judged counts per key, read as a Beta-posterior mean. With `decay`, a key's
    older judgments lose that share of their weight at each new one (the estimate follows the
    last ~1/decay judgments).

    With a `pool` (one per batch of streams, shared by its streams' policies) every judgment
    is also the pool's, and a key's prior is what the batch's other streams have judged of
    it: one oracle's guesses hold about alike from stream to stream, so a stream starts from
    the batch's odds and its own judgments take it from there. The odds are learnt, and
    exploring ends, once for the batch: learnt stream by stream, each of 16 streams sent
    guesses at good odds until it had judged its own dozen, and a padded pass is as wide as
    its widest stream (Medusa's heads at 4 streams: 44 of 48 stream steps with guesses were
    exploring ones, 9 of 95 guesses held)."""

    def __init__(self, decay: float = 0.0, pool: Acceptance | None = None) -> None:
        self.counts: dict[int, list[float]] = {}
        self.judged = 0
        self.decay = decay
        self.pool = pool

    def add(self, key: int, accepted: bool) -> None:
        c = self.counts.setdefault(key, [0.0, 0.0])
        c[0] = c[0] * (1 - self.decay) + accepted
        c[1] = c[1] * (1 - self.decay) + 1
        self.judged += 1
        if self.pool is not None:
            self.pool.add(key, accepted)

    @property
    def learnt(self) -> int:
        """Judgments the odds rest on: the batch's where pooled."""
        return self.judged if self.pool is None else self.pool.judged

    def estimate(self, key: int, prior: float = PRIOR_MEAN) -> float:
        if self.pool is not None:
            prior = self.pool.apart(key, self.counts.get(key), prior)
        acc, n = self.counts.get(key, (0.0, 0.0))
        return (acc + prior * PRIOR_WEIGHT) / (n + PRIOR_WEIGHT)

    def apart(self, key: int, own: Sequence[float] | None, prior: float) -> float:
        """The estimate of `key` from every judgment but `own` (a stream's own counts). Exact
        without decay and for one stream; with decay the pool forgets at every stream's
        judgment and a stream's counts at its own only, so the others' share is approximate
        (never below nothing)."""
        acc, n = self.counts.get(key, (0.0, 0.0))
        if own is not None:
            acc, n = max(0.0, acc - own[0]), max(0.0, n - own[1])
        return (acc + prior * PRIOR_WEIGHT) / (n + PRIOR_WEIGHT)


def match_bucket(length: int) -> int:
    """The bucket (its lower bound) a match length falls in."""
    best = MATCH_BUCKETS[0]
    for b in MATCH_BUCKETS:
        if length >= b:
            best = b
    return best


@dataclass(frozen=True)
class Odds:
    """What a stream's next guesses would hold at: each draft position's acceptance given the
    ones before it held (as many as are worth pricing; none: nothing to guess), or, while the
    oracle's odds are still being learnt (`exploring`), the odds good guesses would hold at."""

    accept: tuple[float, ...]
    exploring: bool = False


class AutoK:
    """A K policy for `Session(k_policy=...)`: `choose` before a step, `observe` after it."""

    def __init__(
        self,
        oracle: Oracle,
        profile: Profile,
        draft_profile: Profile | None = None,
        k_max: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
        known_accept: Sequence[float] | None = None,
        pool: Acceptance | None = None,
    ) -> None:
        self.oracle = oracle
        # Each draft position's acceptance measured before the run (`specviz pair` for a
        # draft, held-out answers for trained heads), else None: what exploring is priced at
        # and the estimates start from.
        self.known_accept = list(known_accept) if known_accept else None
        self.clock = clock
        self.hints = hints_of(oracle)  # the oracle's, or the defaults
        self.profile = profile
        self.draft_profile = draft_profile
        # A run's drafts are priced up to the profile's widest single-run size (a batch of
        # streams stores wider passes with it: profile_widths.py), never past it.
        widest = min(max(profile.batches), BATCHES[-1])
        self.k_max = min(k_max or widest - 1, widest - 1)
        # `pool`: a batch's streams' judgments, shared (Acceptance).
        self.acceptance = Acceptance(self.hints.evidence_decay, pool)
        self.scale = 1.0  # live verification ms / profiled ms, over all steps
        self.steps_timed = 0
        self.verifications_timed = 0  # those that scaled the profile (not a switch back)
        self.one_token_ms: tuple[float, int] = (0.0, 0)  # live one-token steps: (ms, seen)
        self.scale_at: dict[int, tuple[float, int]] = {}  # per cost regime: (ratio, steps seen)
        self.draft_ms_per_token: float | None = None
        self._drafted = False  # this run has drafted: the drafter has read the prompt
        self.overhead_ms = 0.0
        self.rows_at: dict[int, float] = {}  # tree oracles: rows a step of depth K sends
        # A batch's verification, held until the one-token steps after it have paid for the
        # switch back (the profile prices a batch with them): [rows, position, ms].
        self._batch: list | None = None
        self._switching = 0  # one-token steps still paying for a batch before them
        self._match: int | None = None  # match length when the last K was chosen
        # Copies a plain step did not send, judged as the run's tokens come: (position,
        # tokens, key, judged so far); see _shadow.
        self._shadows: list[tuple[int, Sequence[int], int, int]] = []
        self.last_choice: tuple[int, float] = (0, 0.0)  # (K, expected tokens/s)
        self.lookup_ms: float | None = None  # the oracle's match lookup, a running mean
        self._idle = 0  # steps in a row that sent nothing
        self._looked = True  # whether the last choice asked the oracle
        self._context_len = 0
        self.explored = False  # the last K chosen was to learn the odds (said in the trace)
        self._explore_no = 0  # steps timed when exploring last looked unable to pay (0: not)
        # True in a batch of streams (batch_k.py): a step's pass is the batch's, learnt there,
        # and a tree is verified as its first chain (loop/streams.py).
        self.in_batch = False

    # ------------------------------------------------------------ before a step

    def choose(self, context: Sequence[int], left: int | None = None) -> int:
        """K for the next step at `context`; `left`: the tokens the run may still write
        (None: not known)."""
        n_ctx = len(context)
        odds = self.odds(context)
        if odds.exploring:
            explore = min(self._still_worth_exploring(n_ctx, left), len(odds.accept))
            self.last_choice, self.explored = (explore, 0.0), explore > 0
            return explore
        if not odds.accept:
            self.last_choice = (0, 0.0)
            return 0
        k, rate = best_k(odds.accept, lambda k: self.step_ms(k, n_ctx), len(odds.accept))
        plain = 1.0 / self.step_ms(0, n_ctx)
        if k and rate < plain * (1 + self.hints.min_gain):
            k, rate = 0, plain
        self.chosen(k, rate, context, odds)
        return k

    def odds(self, context: Sequence[int]) -> Odds:
        """What the next step's guesses at `context` would hold at, as learnt so far (before
        a step, in place of `choose` where K is chosen for a batch: batch_k.py)."""
        n_ctx = len(context)
        new_run = not self._context_len < n_ctx <= self._context_len + RUN_STEP_MAX
        if new_run:
            self._idle = 0  # its first steps look: a prompt is often copied
            self._drafted = False  # the drafter reads this run's prompt at its first draft
        self._context_len = n_ctx
        self.explored = False
        self._looked = self._worth_looking(n_ctx)
        if not self._looked:
            return Odds(())
        started = self.clock()
        self._match = self.hints.match_length(context)
        if not new_run:  # a run's first lookup reads its prompt, more than a step's work
            self._learn_lookup((self.clock() - started) * 1000.0)
        if self._match == 0:
            return Odds(())  # nothing to copy: a plain step
        limit = self._limit()
        if self._match is None and self.acceptance.learnt < EXPLORE_JUDGED:
            return Odds(tuple(OPTIMISTIC_ACCEPT if self._known(i) is None else self._known(i)
                              for i in range(1, limit + 1)), exploring=True)
        if self._match is None:
            return Odds(tuple(self.acceptance.estimate(self._key(i), self._prior(i))
                              for i in range(1, limit + 1)))
        # a copy's proposals are all judged on its match: one estimate for all
        return Odds((self.acceptance.estimate(self._key(1), self._prior(1)),) * limit)

    def chosen(self, k: int, rate: float, context: Sequence[int], odds: Odds) -> None:
        """Note the K chosen at `odds` (the rate it was expected to write at, tokens per ms):
        a copy not sent at odds the evidence has put below the prior is judged as the run
        goes on (`_shadow`)."""
        if odds.exploring:
            self.explored = k > 0
        elif k == 0 and self._match and odds.accept and odds.accept[0] < self._prior(1):
            self._shadow(context, len(odds.accept))
        self.last_choice = (k, rate * 1000.0)

    def _worth_looking(self, n_ctx: int) -> bool:
        """Whether to ask the oracle this step: always, but in a stretch of plain steps where
        a lookup costs a noticeable share of a step, only every LOOKUP_EVERY-th step."""
        idle = self._idle - IDLE_STEPS
        if idle < 0 or idle % LOOKUP_EVERY == 0 or self.lookup_ms is None:
            return True
        return self.lookup_ms < LOOKUP_SHARE * self.step_ms(0, n_ctx)

    def _learn_lookup(self, ms: float) -> None:
        old = self.lookup_ms
        self.lookup_ms = ms if old is None else old + EMA * (ms - old)

    def _limit(self) -> int:
        """The longest draft worth pricing: the profile's, the copy's cap, and the oracle's
        own depth (Medusa's chain ends at its last head: the positions past it, never judged,
        kept the prior's odds and made long drafts look worth their rows)."""
        limit = self.k_max
        if self._match:
            cap = self.hints.draft_limit(self._match)
            limit = limit if cap is None else min(limit, cap)
        deepest = self.oracle.tree_depth()
        return min(limit, deepest) if deepest else limit

    def _shadow(self, context: Sequence[int], limit: int) -> None:
        """Keep the copy this plain step does not send, to judge it as the run goes on. Only
        where the evidence has put the odds below the prior: a key that failed early would
        otherwise never be drafted, so never judged again, and stay condemned (the n-gram
        cache ran plain through 749 steps of 48-token repeats whose copies held 17 tokens on
        average). Odds the evidence holds up are left to sent drafts: judged on every plain
        step too, they sent more drafts that broke (docs/auto-k.md)."""
        if self._shadows:
            return  # one at a time, as sent drafts are: overlapping copies would judge a
            # long repeat's tokens over and over, and its odds would drown the rest
        tokens = self.hints.shadow_draft(context, limit)
        if tokens:
            self._shadows.append((len(context), list(tokens), self._key(1), 0))

    def worth_exploring(self, n_ctx: int, left: int | None = None) -> int:
        """The K to learn an oracle's odds with, where learning them can pay (0 where not):
        some K beats a plain step by EXPLORE_GAIN even at OPTIMISTIC_ACCEPT, explored at
        EXPLORE_K or at the first K that does, so that no exploring step is one that could
        not pay at any odds. Where verifying a few tokens and drafting them
        cost about what they are worth (a 0.5B draft of a 1.5B target on a 2-core CPU), not:
        its exploring steps cost 5.6% of a run that declined everywhere else. Nor where the
        verification alone costs more (lookahead's window and pool, 31 rows a step: seven
        exploring steps of 170-320 ms where a plain step takes 26). Heads and lookahead have no
        drafting cost until they draft, so for them this bounds the verification only; a
        tree's depth is the oracle's (lookahead's n-grams, Medusa's heads). Nor where what
        learning the odds costs for certain is more than good odds would win back over the
        `left` tokens of the run (`_repays_learning`). The oracle then never drafts, and
        costs what plain decoding costs."""
        depth = self._limit()
        gain = max(EXPLORE_GAIN, self.hints.min_gain)
        # Asked on every step until the odds are learnt (every step, where they never are):
        # the first K that pays settles it.
        # Odds measured before the run (`specviz pair`, heads' held-out answers): else good odds.
        odds = [OPTIMISTIC_ACCEPT if self._known(i) is None else self._known(i)
                for i in range(1, depth + 1)]

        def step(k: int) -> float:
            return self.step_ms(k, n_ctx)

        first = first_k_reaching(odds, step, depth, (1 + gain) / step(0))
        explore = max(EXPLORE_K, first) if first else 0
        if explore and not self._repays_learning(odds, step, depth, explore, n_ctx, left):
            return 0
        return explore

    def _repays_learning(self, odds: Sequence[float], step: Callable[[int], float], depth: int,
                         k: int, n_ctx: int, left: int | None) -> bool:
        """Whether drafting at `odds` for the `left` tokens of the run would win back, by
        LEARN_MARGIN, what learning the real odds costs for certain where a draft model
        drafts: its first read of the context, and the exploring steps at K = `k` were its
        guesses to hold at the prior's odds. On a 2-core Xeon the 0.5B drafting for the 1.5B
        gains 5-12% at best, its read of a 248-token code edit took 1.5 s, 12% of the run,
        and the exploring steps cost more: the lane ran at 0.85-1.08x on ten prompts, two
        slower outside the noise. Heads, lookahead and the rules read nothing (and a tree
        priced node by node sends only the nodes worth their rows): their exploring is
        bounded by `worth_exploring` alone, as it is where the run's length is not known."""
        if left is None or self.draft_profile is None:
            return True
        cost = self._reading_ms(n_ctx) + self._exploring_loss_ms(step, k)
        if cost <= 0:
            return True
        _, rate = best_k(odds, step, depth)
        return left * (step(0) - 1.0 / rate) > LEARN_MARGIN * cost

    def _exploring_loss_ms(self, step: Callable[[int], float], k: int) -> float:
        """What exploring at K = `k` costs over plain steps until EXPLORE_JUDGED tokens are
        judged, each guess holding at the prior's odds (a guess is judged where the ones
        before it held); nothing where such steps pay anyway (a GPU's batches)."""
        prior = [self._prior(i) for i in range(1, k + 1)]
        judged = expected_tokens(prior[:-1])  # the first guess always, each next if held
        steps = EXPLORE_JUDGED / judged
        return max(0.0, steps * (step(k) - expected_tokens(prior) * step(0)))

    def _reading_ms(self, n_ctx: int) -> float:
        """What the drafter's read of `n_ctx` tokens costs before this run has drafted: at
        the profile's widest batch's price per token (a prompt read at once costs less per
        token on a CPU: the 0.5B's 248 tokens 6 ms each, its 32-token batches 15: a dear
        estimate, so that what is explored can pay), as loaded as the target's steps are."""
        if self._drafted or self.draft_profile is None:
            return 0.0
        widest = max(self.draft_profile.batches)
        per_token = self.draft_profile.cost_ms(widest, n_ctx // 2) / widest
        return n_ctx * self._scale(1) * per_token

    def may_explore(self, n_ctx: int, left: int | None = None) -> bool:
        """Whether learning the odds can pay here (`worth_exploring`, asked again only every
        EXPLORE_RECHECK steps once it said no): a batch's streams ask it too."""
        return self._still_worth_exploring(n_ctx, left) > 0

    def _still_worth_exploring(self, n_ctx: int, left: int | None = None) -> int:
        """`worth_exploring`, asked again only every EXPLORE_RECHECK steps once it said no:
        pricing every draft length is 30-60 us, asked on every step of a lane that never
        explores (0.5% of a smollm2 step on llama.cpp), and the prices it reads drift slowly."""
        if self._explore_no and self.steps_timed - self._explore_no < EXPLORE_RECHECK:
            return 0
        worth = self.worth_exploring(n_ctx, left)
        self._explore_no = 0 if worth else max(self.steps_timed, 1)
        return worth

    def step_ms(self, k: int, n_ctx: int) -> float:
        """Expected milliseconds of a step with draft length k at context length n_ctx."""
        return self.verify_ms(self.rows(k), n_ctx) + self.draft_ms(k, n_ctx)

    def verify_ms(self, rows: float, n_ctx: int) -> float:
        """Expected milliseconds of verifying `rows` rows, with the step's overhead."""
        return self._scale(round(rows)) * self.profile.cost_ms(rows, n_ctx) + self.overhead_ms

    def rows(self, k: int) -> float:
        """Rows one verification sends for draft length k: k+1 for a linear draft."""
        budget = self.oracle.tree_nodes()
        if k == 0 or budget == 0 or self.hints.nodes_within_k or self.in_batch:
            return k + 1
        return self.rows_at.get(k, 1 + budget)

    def _scale(self, n: int) -> float:
        """How live verification of n tokens compares with the profile: per cost regime once
        seen a few times (a profile taken on a quieter or busier machine may be off in shape,
        not only in scale), else over all steps."""
        ratio, seen = self.scale_at.get(cost_regime(n), (self.scale, 0))
        return ratio if seen >= MIN_SEEN else self.scale

    def draft_ms(self, k: int, n_ctx: int) -> float:
        """Expected milliseconds of drafting k guesses at context length n_ctx."""
        if k == 0:
            return 0.0
        if self.draft_ms_per_token is not None:
            return k * self.draft_ms_per_token
        if self.draft_profile is not None:  # as loaded as the target's steps are
            return k * self._scale(1) * self.draft_profile.cost_ms(1, n_ctx)
        return 0.0

    def _known(self, position: int) -> float | None:
        """The measured acceptance of a draft position (past the last measured: the last)."""
        if not self.known_accept:
            return None
        return self.known_accept[min(position, len(self.known_accept)) - 1]

    def _prior(self, position: int) -> float:
        if self._match is None:
            known = self._known(position)
            return PRIOR_MEAN if known is None else known
        return self.hints.match_prior(match_bucket(self._match))

    def _key(self, position: int) -> int:
        """Every proposal of a draft is judged on the match the draft started from: judged on
        the match each would extend (longer further in), the odds rose along the draft and sent
        long drafts that text paraphrasing its source ends early (docs/auto-k.md)."""
        if self._match is None:
            return position
        return -match_bucket(self._match)  # negative: apart from positions

    @property
    def zero_reason(self) -> str:
        """Why the last K chosen was 0: not looked for, nothing to copy, or no draft length
        paid."""
        if not self._looked:
            return ev.DECLINE_IDLE
        return ev.DECLINE_NO_MATCH if self._match == 0 else ev.DECLINE_AUTO_K

    # ------------------------------------------------------------ learnt state

    _FIXED = ("oracle", "hints", "profile", "draft_profile", "k_max", "clock",
              "known_accept")  # not learnt

    def snapshot(self) -> dict:
        return copy.deepcopy({k: v for k, v in vars(self).items() if k not in self._FIXED})

    def restore(self, state: dict) -> None:
        vars(self).update(copy.deepcopy(state))

    # ------------------------------------------------------------ after a step

    def observe(self, event: ev.StepEvent) -> None:
        if event.proposed or event.tree:  # a sent draft is judged itself, on the same tokens
            self._shadows = []
            self._idle = 0
        else:
            self._judge_shadows(event)
            self._idle += 1
        for i, tok in enumerate(event.proposed, start=1):
            if not tok.accepted and tok.reject_reason == ev.REJECT_AFTER:
                break  # never judged
            self.acceptance.add(self._key(i), tok.accepted)
            if not tok.accepted:
                break
        if priced_out(event):  # to a draft length it was worth nothing: a first guess refused
            self.acceptance.add(self._key(1), False)
        self._learn_timing(event)

    def _judge_shadows(self, event: ev.StepEvent) -> None:
        """Judge the copies plain steps did not send against the tokens this step emitted,
        each up to and including its first miss, as a sent draft is judged. The run's tokens
        are what verification would have compared a sent copy with (greedy: the same tokens;
        sampling: accepted as often as the target emits them)."""
        if not self._shadows:  # most steps: 16 streams' events a batch step
            return
        if event.step == 0:  # a new run: copies kept in an earlier one are not judged on it
            self._shadows = [s for s in self._shadows if s[0] == event.position]
        emitted, first = event.emitted_ids, event.position
        kept = []
        for start, tokens, key, judged in self._shadows:
            missed = False
            while judged < len(tokens) and first <= start + judged < first + len(emitted):
                held = emitted[start + judged - first] == tokens[judged]
                self.acceptance.add(key, held)
                judged += 1
                missed = not held
                if missed:
                    break
            if not missed and judged < len(tokens):
                kept.append((start, tokens, key, judged))
        self._shadows = kept

    def _learn_timing(self, event: ev.StepEvent) -> None:
        t, n = event.timing, len(event.proposed)
        rows = sent_rows(event)
        if event.tree is not None and event.k > 0:
            old_rows = self.rows_at.get(event.k, rows)
            self.rows_at[event.k] = old_rows + EMA * (rows - old_rows)
        if not self.in_batch:
            self._learn_verify(rows, event.position, t.verify_ms, event.step == 0)
            self.overhead_ms = settle(self.overhead_ms, t.other_ms, self.steps_timed)
        self.steps_timed += 1
        if event.tree is not None or priced_out(event):
            n = event.k  # a tree costs a drafting pass per depth, whatever it sends
        if event.step == 0:
            self._drafted = False
        if n and self._drafted:  # a run's first drafting includes the drafter's prompt
            per_token = t.draft_ms / n
            old = self.draft_ms_per_token
            self.draft_ms_per_token = per_token if old is None else old + EMA * (per_token - old)
        self._drafted = self._drafted or bool(n)

    def _learn_verify(self, rows: int, position: int, ms: float, first: bool) -> None:
        """Scale the profile by this step's verification. The one-token steps right after a
        batch (the prompt's too) pay for the switch back (on an H200 2.8 and 2.1 ms where a
        settled one took 1.06): that is the batch's cost, as the profile prices it, not a
        plain step's, or plain steps would look dear wherever drafts are sent."""
        if first:
            self._batch, self._switching = None, SETTLE
        if rows == 1 and self._switching:
            self._switching -= 1
            if self._batch is not None:
                self._batch[2] += ms - self._scale(1) * self.profile.cost_ms(1, position)
                if not self._switching:
                    self._add_verify(*self._batch)
                    self._batch = None
            return
        if self._batch is not None:  # batches back to back: none paid for a switch back
            self._add_verify(*self._batch)
            self._batch = None
        if rows > 1:
            self._batch, self._switching = [rows, position, ms], SETTLE
        else:
            self._add_verify(rows, position, ms)

    def _add_verify(self, rows: int, position: int, ms: float) -> None:
        predicted = self.profile.cost_ms(rows, position)
        if predicted > 0 and 0 < ms < STALL * predicted:
            ratio = ms / predicted
            # The overall scale settles like each regime's (no start value lingers): it prices
            # batches not yet seen, and a lagging one makes them look cheap or dear.
            self.scale = settle(self.scale, ratio, self.verifications_timed)
            self.verifications_timed += 1
            regime = cost_regime(rows)
            old, seen = self.scale_at.get(regime, (ratio, 0))
            self.scale_at[regime] = (settle(old, ratio, seen), seen + 1)
            if rows == 1:
                mean, seen = self.one_token_ms
                self.one_token_ms = (settle(mean, ms, seen), seen + 1)


def priced_out(event: ev.StepEvent) -> bool:
    """The oracle drafted, priced its guesses (`Oracle.price`) and sent none."""
    return bool(event.k) and event.declined == ev.DECLINE_AUTO_K


def settle(old: float, new: float, seen: int) -> float:
    """A running estimate after one more observation: the plain mean of the first 1/EMA
    observations (no start value lingers), then an exponential average that follows drift."""
    return old + max(EMA, 1 / (seen + 1)) * (new - old)


def cost_regime(rows: int) -> int:
    """1: a single-token step, which mostly reads the weights (memory bound); 2: a batch,
    which mostly computes (compute bound on a CPU). Load and clock speed shift the two apart,
    so each is scaled against the profile on its own. Two regimes, not one per batch size: a
    batch size seldom seen would be priced at the single-token steps' scale."""
    return 1 if rows <= 1 else 2


def sent_rows(event: ev.StepEvent) -> int:
    """Rows the step's verification pass scored: the pending token, every proposed token
    (every tree node), and lookahead's Jacobi window riding along."""
    drafted = len(event.tree) if event.tree is not None else len(event.proposed)
    side = sum(len(row) for row in event.lookahead.window) if event.lookahead else 0
    return 1 + drafted + side
