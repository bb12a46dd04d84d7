"""`--k auto` for a batch of streams: every stream's K chosen together before each batch step.

One pass verifies every stream's pending token and guesses (loop/streams.py), so a guess
costs what it adds to the batch's width, priced at that width (the cost profile, scaled by
the passes seen), and its expected tokens are its stream's odds (each stream's AutoK learns
them from its own steps): the chance that it and every guess before it in its stream hold.
Positions go out in order of worth across streams. A stream whose guesses hold gets
positions and one whose guesses fail gets none, as vLLM's adaptive verification chooses per
step how much to verify; where no count beats the plain batch by the oracle's margin, no
stream guesses and the steps say why.

What a stream's tokens are worth depends on the batch. Its streams are a fixed set (none
joins when one leaves), so the run lasts as long as its longest stream, and plain decoding
of what is left would cost each step's pass over the streams still in it: sorted by the
tokens they have left, the longest pays a whole one-row pass per token and each next one
only what its row adds (`left_ms`). A token written ahead by a stream that is not the
longest saves only its row in a later pass. Where a pass costs about the same whatever its
rows (transformers on a CPU: four rows cost what one does), that is nearly nothing, and a
wide pass to write it is a loss: a batch of four on smollm2 read 0.86x of plain decoding
while it valued every token alike. So the batch takes the count that saves the most plain
decoding per millisecond spent. Where a stream's tokens left are not known, every token is
worth a plain pass's share (tokens per millisecond, as a stream that ends is replaced).

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
        # Live pass ms / profiled ms: of plain passes (a token a stream), and of passes with
        # guesses, whose shape the profile's single sequence may price apart from the batch's
        # (a padded 4 x 4 pass on transformers cost 2.4x a 4 x 1 one; the profile's 16 tokens
        # 1.9x its 4). None until such a pass is seen: the plain passes' then.
        self.scale = 1.0
        self.wide_scale: float | None = None
        self.seen = self.seen_wide = 0
        self.overhead_ms = 0.0  # a batch step's bookkeeping beside its pass and guessing
        self.last: Choice | None = None

    def pass_ms(self, width: int, n_ctx: int, rows: int | None = None) -> float:
        """Expected ms of a pass of `width` tokens at a context of `n_ctx` over `rows`
        streams (None: a token each), with a step's overhead."""
        wide = rows is not None and width > rows and self.wide_scale is not None
        scale = self.wide_scale if wide else self.scale
        return scale * self.profile.cost_ms(width, n_ctx) + self.overhead_ms

    def choose(self, wants: Sequence[Want], odds: dict[int, Odds] | None = None) -> Choice:
        """K for each stream of `wants`, from `odds` (each stream's policy's `odds` at its
        context, asked here where not given)."""
        if odds is None:
            odds = {w.index: self.policies[w.index].odds(w.context) for w in wants}
        n_ctx = round(sum(len(w.context) for w in wants) / max(len(wants), 1))
        order = positions_by_worth(wants, odds, self._draft_ms, self._may_explore)
        count, rate, plain = self._best_count(order, wants, n_ctx)
        ks = {w.index: 0 for w in wants}
        for _, index, _ in order[:count]:
            ks[index] += 1
        for w in wants:
            self.policies[w.index].chosen(ks[w.index], rate, w.context, odds[w.index])
        width = (len(wants) * (1 + max(ks.values(), default=0)) if self.padded
                 else len(wants) + count)
        self.last = Choice(ks, width, rate * 1000.0, plain * 1000.0)
        return self.last

    def _best_count(self, order: list[tuple[float, int, float]], wants: Sequence[Want],
                    n_ctx: int) -> tuple[int, float, float]:
        """(positions to send, expected tokens per ms, a plain batch's): the first `count`
        of `order` that save the most plain decoding per ms (module docstring), none where
        that is not the oracle's margin over a plain step's."""
        n = len(wants)
        plain_ms = self.pass_ms(n, n_ctx)
        saved = Saving(wants, [self.pass_ms(rows, n_ctx) for rows in range(1, n + 1)])
        plain_saves = saved.by([0.0] * n) / plain_ms
        best, best_saves, best_rate = 0, plain_saves, n / plain_ms
        expected = [0.0] * n
        at = {w.index: i for i, w in enumerate(wants)}
        given = [0] * n
        drafting = 0.0
        for count, (worth, index, draft_ms) in enumerate(order, start=1):
            i = at[index]
            given[i] += 1
            width = n * (1 + max(given)) if self.padded else n + count
            if width > self.widest:
                break
            expected[i] += worth
            drafting += draft_ms
            spent = self.pass_ms(width, n_ctx, rows=n) + drafting
            saves = saved.by(expected) / spent
            if saves > best_saves * (1 + 1e-9):
                best, best_saves, best_rate = count, saves, (n + sum(expected)) / spent
        if best and best_saves < plain_saves * (1 + self.min_gain):
            return 0, n / plain_ms, n / plain_ms
        return best, best_rate, n / plain_ms

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

    def observe_pass(self, width: int, n_ctx: int, pass_ms: float, other_ms: float,
                     rows: int | None = None) -> None:
        """Scale the profile by a batch pass of `width` tokens over `rows` streams (None: a
        token each) as it took (a stall, over STALL times its price, is not what a pass
        costs), and learn the step's overhead."""
        predicted = self.profile.cost_ms(width, n_ctx)
        if not (predicted > 0 and 0 < pass_ms < STALL * predicted):
            return
        if rows is not None and width > rows:
            self.wide_scale = settle(self.wide_scale or self.scale, pass_ms / predicted,
                                     self.seen_wide)
            self.seen_wide += 1
            return
        self.scale = settle(self.scale, pass_ms / predicted, self.seen)
        self.overhead_ms = settle(self.overhead_ms, other_ms, self.seen)
        self.seen += 1


class Saving:
    """What a batch step saves of plain decoding of what its streams have left: `by(ahead)`,
    ms, where stream i writes its token and `ahead[i]` more (expected). `pass_ms[r - 1]` is
    a plain pass over r streams."""

    def __init__(self, wants: Sequence[Want], pass_ms: Sequence[float]) -> None:
        self.left = None if any(w.left is None for w in wants) else [w.left for w in wants]
        # What each row adds to a plain pass, the first row the whole of one (never below 0:
        # a profile's noise must not make a row pay for being kept).
        self.rows = [max(0.0, b - a) for a, b in zip([0.0, *pass_ms], pass_ms)]
        self.share = pass_ms[-1] / len(pass_ms) if pass_ms else 0.0
        self.before = self._left_ms(self.left) if self.left is not None else 0.0

    def by(self, ahead: Sequence[float]) -> float:
        if self.left is None:  # unknown: each token a plain pass's share
            return self.share * (len(ahead) + sum(ahead))
        after = [max(0.0, left - 1 - a) for left, a in zip(self.left, ahead)]
        return self.before - self._left_ms(after)

    def _left_ms(self, left: Sequence[float]) -> float:
        """Plain decoding of `left` tokens a stream: the longest pays the first row of every
        pass, the next the second row's, and so on."""
        return sum(t * row for t, row in zip(sorted(left, reverse=True), self.rows))


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
