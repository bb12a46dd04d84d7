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
joins when one leaves), so the run lasts as long as its longest stream, and plain decoding of
what is left costs a pass for each token the longest stream has left and a row for each token
of every stream (`Saving`). A token written ahead by a stream that is not the longest saves
only its row. Where a pass costs about the same whatever its rows (transformers on a CPU: four
rows cost what one does), that is nearly nothing, and a wide pass to write it is a loss: a
batch of four on smollm2 read 0.86x of plain decoding while every token was valued alike. So
the batch takes the count that saves the most plain decoding per millisecond spent. Where a
stream's tokens left are not known, every token is worth a plain pass's share (tokens per
millisecond, as where a stream that ends is replaced).

With one stream this is single-stream auto K priced at its own width.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .auto_k import EXPLORE_K, IDLE_STEPS, LOOKUP_EVERY, STALL, AutoK, Odds, settle
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
            policy.in_batch = True  # its passes are learnt here, its trees sent as chains
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
        self.idle = 0  # steps in a row at which no stream sent a guess (`stepped`)
        self.last: Choice | None = None

    def pass_ms(self, width: int, n_ctx: int, rows: int | None = None) -> float:
        """Expected ms of a pass of `width` tokens at a context of `n_ctx` over `rows`
        streams (None: a token each), with a step's overhead."""
        wide = rows is not None and width > rows
        return self._scale(wide) * self.profile.cost_ms(width, n_ctx) + self.overhead_ms

    def _scale(self, wide: bool) -> float:
        """Live / profiled ms: of passes with guesses (`wide`, once one is seen), or plain."""
        return self.wide_scale if wide and self.wide_scale is not None else self.scale

    def resting(self, streams: int) -> bool:
        """Whether this step goes plain without asking the `streams` live streams: in a
        stretch where nothing paid (`idle_steps(streams)` steps in a row), they are asked
        every `rest_every(streams)`-th step only. Asking 16 streams' odds and pricing them
        took about 1.3 ms with the n-gram cache on a 2-core CPU (1% of a step), more of a
        GPU's short steps: at every step, enough to read slower than plain decoding where
        speculation stays off."""
        idle = self.idle - idle_steps(streams)
        return not (idle < 0 or idle % rest_every(streams) == 0)

    def stepped(self, sent: bool) -> None:
        """After each batch step: whether any stream sent a guess. Positions given that found
        nothing to send (an oracle still to be learnt that never guesses, as the rules on a
        chat prompt) count as a plain step: asked every step, their lookups alone read 2% of
        a one-stream step slower than plain decoding."""
        self.idle = 0 if sent else self.idle + 1

    def choose(self, wants: Sequence[Want], odds: dict[int, Odds] | None = None) -> Choice:
        """K for each stream of `wants`, from `odds` (each stream's policy's `odds` at its
        context, asked here where not given)."""
        if odds is None:
            odds = {w.index: self.policies[w.index].odds(w.context) for w in wants}
        n_ctx = round(sum(len(w.context) for w in wants) / max(len(wants), 1))
        # Learning odds in a padded pass, a stream's second position widens every stream's
        # row: one position a stream, all streams at once, learns them at half the width.
        explore_k = 1 if self.padded else EXPLORE_K
        order = positions_by_worth(wants, odds, self._draft_ms, self._may_explore, explore_k)
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
        if not n:
            return 0, 0.0, 0.0
        plain_ms = self.pass_ms(n, n_ctx)
        saving = Saving(wants, self.pass_ms(1, n_ctx), plain_ms)
        at = {w.index: i for i, w in enumerate(wants)}
        held: list[list[float]] = [[] for _ in wants]  # each stream's positions' worths
        plain_saves = saving.by(held) / plain_ms
        best, best_saves, best_rate = 0, plain_saves, n / plain_ms
        expected, drafting, longest = 0.0, 0.0, 0
        wide_ms = self._wide_prices(n, n_ctx)  # by width, from n + 1
        for count, (worth, index, draft_ms) in enumerate(order, start=1):
            held[at[index]].append(worth)
            longest = max(longest, len(held[at[index]]))
            width = n * (1 + longest) if self.padded else n + count
            if width > self.widest:
                break
            expected += worth
            drafting += draft_ms
            spent = wide_ms[width - n - 1] + drafting
            saves = saving.by(held, n + expected) / spent
            if saves > best_saves * (1 + 1e-9):
                best, best_saves, best_rate = count, saves, (n + expected) / spent
        if best and best_saves < plain_saves * (1 + self.min_gain):
            return 0, n / plain_ms, n / plain_ms
        return best, best_rate, n / plain_ms

    def _wide_prices(self, rows: int, n_ctx: int) -> list[float]:
        """`pass_ms` of every width from rows + 1 to the widest, over `rows` streams."""
        widths = range(rows + 1, self.widest + 1)
        if not widths:
            return []
        scale = self._scale(wide=True)
        return [scale * ms + self.overhead_ms
                for ms in self.profile.costs_ms(widths, n_ctx)]

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


def idle_steps(streams: int) -> int:
    """Plain batch steps in a row after which a batch rests: IDLE_STEPS of its streams'
    steps, as a single run counts them (a step of 16 streams is 16 of them that found
    nothing worth sending). Counted in batch steps, 16 streams were asked eight times more,
    5 ms of a 64-step run on a 2-core CPU."""
    return max(1, -(-IDLE_STEPS // streams))


def rest_every(streams: int) -> int:
    """Every how many steps a resting batch asks its streams: every LOOKUP_EVERY-th, as a
    single run's auto K looks (auto_k._worth_looking), or every `streams`-th where there are
    more, so that asking costs one stream's lookup a step at most on average, however wide
    the batch. A copy is then found up to that many steps late, at widths where a stream's
    guesses rarely paid on a CPU (docs/results/concurrency.md)."""
    return max(LOOKUP_EVERY, streams)


class Saving:
    """What a batch step saves of plain decoding of what its streams have left, in ms:
    `by(held)`, where stream i writes its token and guesses that hold with the chances
    `held[i]` (its positions' worths, in order).

    A plain pass over r streams is priced as one pass plus r rows (`one_ms` for one stream,
    `plain_ms` for all of them, the rows between): so plain decoding of what is left costs a
    pass for each token of the longest stream and a row for each token of every stream. A
    step saves its rows' worth for every token written, and a pass for each token by which
    the longest stream's lead shrinks: its expected shrink `lead_shrinks` is taken over the
    chances, not from their means (with three streams tied, each likely to take 3 of 4
    guesses, the least of them is nearer 2)."""

    def __init__(self, wants: Sequence[Want], one_ms: float, plain_ms: float) -> None:
        n = len(wants)
        self.n = n
        self.share = plain_ms / n  # a token's worth where the tokens left are not known
        self.row = max(0.0, (plain_ms - one_ms) / (n - 1)) if n > 1 else 0.0
        self.passing = max(0.0, plain_ms - n * self.row)  # never below 0: a profile's noise
        lefts = [w.left for w in wants]
        known = all(left is not None for left in lefts)
        # How many tokens each stream has fewer than the longest (None: not known).
        self.gaps = [max(lefts) - left for left in lefts] if known else None

    def by(self, held: Sequence[Sequence[float]], tokens: float | None = None) -> float:
        """`tokens`: the step's expected tokens, where the caller keeps their sum."""
        if tokens is None:
            tokens = self.n + sum(map(sum, held))
        if self.gaps is None:
            return self.share * tokens
        return self.passing * (1 + self.lead_shrinks(held)) + self.row * tokens

    def lead_shrinks(self, held: Sequence[Sequence[float]]) -> float:
        """The expected tokens, beyond the step's one, by which the most any stream has
        left falls: the sum over d of the chance that every stream within d of the longest
        writes the guesses that bring it d below where it was."""
        assert self.gaps is not None
        total, d = 0.0, 1
        while True:
            chance = 1.0
            for gap, worths in zip(self.gaps, held):
                needed = d - gap  # the guesses this stream must hold
                if needed > 0:
                    chance *= worths[needed - 1] if needed <= len(worths) else 0.0
                    if not chance:
                        return total
            total += chance
            d += 1


def positions_by_worth(wants: Sequence[Want], odds: dict[int, Odds],
                       draft_ms: Callable[[Want], float],
                       may_explore: Callable[[Want], bool] = lambda _: True,
                       explore_k: int = EXPLORE_K) -> list[tuple[float, int, float]]:
    """Every position a stream could guess, as (worth, stream, its drafting ms), the worthiest
    first: its worth is the chance it and the guesses before it hold, which falls along a
    stream, so each stream's positions stay in order; `draft_ms(want)` what guessing one
    more token costs that stream. A stream still learning its odds is
    priced at good odds for `explore_k` positions at most, enough to learn from, where
    `may_explore(want)` says learning them can pay."""
    found = []
    for w in wants:
        chance = odds[w.index]
        limit = min(len(chance.accept), max(w.room, 0))
        if chance.exploring:
            limit = min(limit, explore_k) if may_explore(w) else 0
        each_ms = draft_ms(w) if limit else 0.0
        survive = 1.0
        for j in range(limit):
            survive *= min(max(chance.accept[j], 0.0), 1.0)
            found.append((survive, w.index, each_ms))
    found.sort(key=lambda f: -f[0])  # stable: equal worth keeps the streams' order
    return found
