"""`--k auto` for a batch of streams: every stream's K chosen together before each batch step.

One pass verifies every stream's pending token and guesses (loop/streams.py), so a guess
costs what it adds to the batch's width, priced at that width (the cost profile, scaled by
the passes seen), and is worth its stream's odds (each stream's AutoK learns them from its
own steps): the chance that it and every guess before it in its stream hold. Positions go
out in order of worth across streams, and the batch takes the count with the most expected
tokens per millisecond. A stream whose guesses hold gets positions and one whose guesses fail
gets none, as vLLM's adaptive verification chooses per step how much to verify; where no
count beats the plain batch by the oracle's margin, no stream guesses and the steps say why.

With one stream this is single-stream auto K priced at its own width.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .auto_k import EXPLORE_K, STALL, AutoK, Odds, settle
from .profile import Profile


@dataclass(frozen=True)
class Want:
    """A stream before a batch step: its number, its context, the most guesses it may
    verify (its token budget and cells) and the tokens it may still write."""

    index: int
    context: Sequence[int]
    room: int
    left: int | None = None


@dataclass(frozen=True)
class Choice:
    """The positions a batch step gives: K per stream, the pass's expected width and the
    expected tokens per second of the batch (speculating, and plain)."""

    ks: dict[int, int]
    width: int
    tok_per_s: float
    plain_tok_per_s: float


class BatchK:
    """K for every stream of a batch (policies[i] learns stream i's odds): `choose` before
    a batch step, `observe_pass` after its pass, each stream's policy `observe` after its
    step (loop/session.noted)."""

    def __init__(self, policies: Sequence[AutoK], profile: Profile,
                 widest: int | None = None, padded: bool = False) -> None:
        self.policies = list(policies)
        for policy in self.policies:
            policy.learns_passes = False  # the batch's passes are learnt here
        self.profile = profile
        # A padded batch computes every stream at the widest's width (the transformers
        # backend): a stream's extra position costs a row of every stream once it is widest.
        self.padded = padded
        # Never wider than the profile measured: what a wider pass costs is not known here.
        self.widest = min(widest or max(profile.batches), max(profile.batches))
        self.min_gain = max((p.hints.min_gain for p in self.policies), default=0.0)
        self.scale = 1.0  # live pass ms / profiled ms
        self.seen = 0
        self.overhead_ms = 0.0  # a batch step's bookkeeping beside its pass and guessing
        self.last: Choice | None = None

    def pass_ms(self, width: int, n_ctx: int) -> float:
        """Expected ms of a pass of `width` tokens at a context of `n_ctx`, with a step's
        overhead."""
        return self.scale * self.profile.cost_ms(width, n_ctx) + self.overhead_ms

    def choose(self, wants: Sequence[Want], odds: dict[int, Odds] | None = None) -> Choice:
        """K for each stream of `wants`, from `odds` (each stream's policy's `odds` at its
        context, asked here where not given)."""
        if odds is None:
            odds = {w.index: self.policies[w.index].odds(w.context) for w in wants}
        n_ctx = round(sum(len(w.context) for w in wants) / max(len(wants), 1))
        order = positions_by_worth(wants, odds, self._draft_ms, self._may_explore)
        count, rate, plain = self._best_count(order, len(wants), n_ctx)
        ks = {w.index: 0 for w in wants}
        for _, index, _ in order[:count]:
            ks[index] += 1
        for w in wants:
            self.policies[w.index].chosen(ks[w.index], rate, w.context, odds[w.index])
        width = (len(wants) * (1 + max(ks.values(), default=0)) if self.padded
                 else len(wants) + count)
        self.last = Choice(ks, width, rate * 1000.0, plain * 1000.0)
        return self.last

    def _best_count(self, order: list[tuple[float, int, float]], n: int, n_ctx: int
                    ) -> tuple[int, float, float]:
        """(positions to send, expected tokens per ms, a plain batch's): the first `count`
        of `order` that write the most per ms, none where that is not the oracle's margin
        over plain decoding."""
        plain = n / self.pass_ms(n, n_ctx)
        best, best_rate = 0, plain
        tokens, drafting, deepest = float(n), 0.0, 0
        given: dict[int, int] = {}
        for count, (worth, index, draft_ms) in enumerate(order, start=1):
            given[index] = given.get(index, 0) + 1
            deepest = max(deepest, given[index])
            width = n * (1 + deepest) if self.padded else n + count
            if width > self.widest:
                break
            tokens += worth
            drafting += draft_ms
            rate = tokens / (self.pass_ms(width, n_ctx) + drafting)
            if rate > best_rate * (1 + 1e-9):
                best, best_rate = count, rate
        if best and best_rate < plain * (1 + self.min_gain):
            return 0, plain, plain
        return best, best_rate, plain

    def _may_explore(self, want: Want) -> bool:
        """Where learning a stream's odds cannot pay (a short run, a drafter whose first read
        of the context costs more than good odds would win back), it is not tried: as for a
        single run (auto_k.worth_exploring)."""
        return self.policies[want.index].may_explore(len(want.context), want.left)

    def _draft_ms(self, want: Want) -> float:
        """A guess's drafting ms for this stream: each stream drafts on its own, in turn."""
        return self.policies[want.index].draft_ms(1, len(want.context))

    def computed(self, widths: Sequence[int]) -> int:
        """The rows a pass computes for streams sending `widths` tokens each."""
        return len(widths) * max(widths, default=0) if self.padded else sum(widths)

    def observe_pass(self, width: int, n_ctx: int, pass_ms: float, other_ms: float) -> None:
        """Scale the profile by a batch pass as it took (a stall, over STALL times its price,
        is not what a pass costs), and learn the step's overhead."""
        predicted = self.profile.cost_ms(width, n_ctx)
        if predicted > 0 and 0 < pass_ms < STALL * predicted:
            self.scale = settle(self.scale, pass_ms / predicted, self.seen)
            self.overhead_ms = settle(self.overhead_ms, other_ms, self.seen)
            self.seen += 1


def positions_by_worth(wants: Sequence[Want], odds: dict[int, Odds],
                       draft_ms: Callable[[Want], float],
                       may_explore: Callable[[Want], bool] = lambda _: True
                       ) -> list[tuple[float, int, float]]:
    """Every position a stream could guess, as (worth, stream, its drafting ms), the worthiest
    first: its worth is the chance it and the guesses before it hold, which falls along a
    stream, so each stream's positions stay in order; `draft_ms(want)` what guessing one
    more token costs that stream. A stream still learning its odds is
    priced at good odds for EXPLORE_K positions at most, enough to learn from, where
    `may_explore(want)` says learning them can pay."""
    found = []
    for w in wants:
        chance = odds[w.index]
        limit = min(len(chance.accept), max(w.room, 0))
        if chance.exploring:
            limit = min(limit, EXPLORE_K) if may_explore(w) else 0
        each_ms = draft_ms(w) if limit else 0.0
        survive = 1.0
        for j in range(limit):
            survive *= min(max(chance.accept[j], 0.0), 1.0)
            found.append((survive, w.index, each_ms))
    found.sort(key=lambda f: -f[0])  # stable: equal worth keeps the streams' order
    return found
