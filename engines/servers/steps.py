"""Streamed chunks become step events: the same records a local lane emits.

Chunks of one verification step (equal `Chunk.step`) are gathered; when the next step's first
chunk arrives, the step is complete. Its tokens are the first `accepted` drafts followed by the
target's own token; the drafts the server rejected are counted from its running totals, but no
engine names them, so they appear as placeholders (`?`) marked `not-exposed`. Where an engine
gives no draft counts, every token after a step's first is an accepted draft (one step's
tokens arrive together) and rejected drafts are unknown: the step says so (`drafted` None).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import events as ev
from .chunks import Chunk

HIDDEN = "?"  # the text shown for a rejected draft the server does not name


@dataclass
class _Running:
    tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    gen_ms: float = 0.0


class StepBuilder:
    """Feed chunks in order; complete steps come out. `finish()` ends the stream."""

    def __init__(self, oracle: str, source: str, engine: str, k: int | None,
                 speculates: bool) -> None:
        self.oracle = oracle
        self.source = source  # a source (registry.SERVED): how accepted drafts are coloured
        self.engine = engine  # who verified them, for the inspector
        self.k = k  # the draft length the server was asked for, where known
        self.longest_draft = 0  # else a step's K: the most it has drafted in one step so far
        self.speculates = speculates  # whether a step with no draft counts as declined
        self.totals = ev.Totals(0, 0, 0, 0, 0.0, 0.0, 0.0)
        self.steps: list[ev.StepEvent] = []
        self.finish_reason: str | None = None
        self.prompt_ms: float | None = None
        self.prompt_tokens = 0
        self.drafts_known = False  # the engine gave draft counts at least once
        self.run_drafted: int | None = None  # drafts of the run, said only at its end
        self.stop_string = False  # generation ended at one of the run's stop strings
        self.run_counts = None  # spec_metrics.SpecCounts: the requests' own, where said
        self.counts_note: str | None = None  # why the engine's counts were left out
        self._group: list[Chunk] = []
        self._seen = _Running()

    def feed(self, chunk: Chunk, wall_ms: float) -> list[ev.StepEvent]:
        """This chunk, arrived `wall_ms` after the previous step ended (used only where the
        engine gives no clock of its own)."""
        self.finish_reason = chunk.finish or self.finish_reason
        self.prompt_ms = chunk.prompt_ms if chunk.prompt_ms is not None else self.prompt_ms
        self.prompt_tokens = chunk.prompt_tokens or self.prompt_tokens
        self.stop_string = self.stop_string or bool(chunk.stop_string)
        if chunk.counts is not None:  # the request's running totals: the latest holds all
            self.run_counts = chunk.counts
        self.counts_note = chunk.note or self.counts_note
        out = []
        if self._group and chunk.step != self._group[-1].step:
            out = self._close(wall_ms)
        self._group.append(chunk)
        return out

    def finish(self, wall_ms: float) -> list[ev.StepEvent]:
        return self._close(wall_ms) if self._group else []

    def discard_partial(self) -> None:
        """Forget the chunks of a step not yet complete (the stream is being closed)."""
        self._group = []

    def new_request(self) -> None:
        """The run goes on in a fresh request, whose running figures start from zero."""
        self._seen = _Running()

    # ------------------------------------------------------------ one step

    def _close(self, wall_ms: float) -> list[ev.StepEvent]:
        group, self._group = self._group, []
        last = group[-1]
        n = self._count(group, last)
        if n <= 0:  # a closing chunk with no tokens: it only carried the end and the totals
            if last.drafted is not None and not self.drafts_known:
                self.run_drafted = last.drafted
            self._remember(last)
            return []
        accepted, drafted = self._drafts(group, last, n)
        ms = self._clock(last, wall_ms)
        self._remember(last)
        step = self._event(group, n, accepted, drafted, ms)
        self.steps.append(step)
        return [step]

    def _count(self, group: list[Chunk], last: Chunk) -> int:
        if last.tokens is not None:
            return last.tokens - self._seen.tokens
        if any(c.n_tokens is not None for c in group):
            return sum(c.n_tokens or 0 for c in group)
        if any(c.token_ids is not None for c in group):
            return sum(len(c.token_ids or ()) for c in group)
        if any(c.pieces is not None for c in group):
            return sum(len(c.pieces or ()) for c in group)
        return sum(1 for c in group if c.text)

    def _drafts(self, group: list[Chunk], last: Chunk, n: int) -> tuple[int, int | None]:
        """(accepted drafts in the step, drafted in the step or None where unknown)."""
        if last.drafted is not None or last.accepted is not None:
            self.drafts_known = True
        if not self.drafts_known:
            return n - 1, None
        drafted = (last.drafted if last.drafted is not None else self._seen.drafted)
        accepted = (last.accepted if last.accepted is not None else self._seen.accepted)
        drafted -= self._seen.drafted
        accepted -= self._seen.accepted
        # A stop string or the token limit can cut a step's accepted drafts short.
        return max(0, min(accepted, n - 1)), max(drafted, 0)

    def _clock(self, last: Chunk, wall_ms: float) -> float:
        if last.gen_ms is not None:
            return max(0.0, last.gen_ms - self._seen.gen_ms)
        return wall_ms

    def _remember(self, last: Chunk) -> None:
        seen = self._seen
        seen.tokens = last.tokens if last.tokens is not None else seen.tokens
        seen.drafted = last.drafted if last.drafted is not None else seen.drafted
        seen.accepted = last.accepted if last.accepted is not None else seen.accepted
        seen.gen_ms = last.gen_ms if last.gen_ms is not None else seen.gen_ms

    def _event(self, group: list[Chunk], n: int, accepted: int, drafted: int | None,
               ms: float) -> ev.StepEvent:
        pieces, ids, probs = _tokens(group, n)
        good = tuple(ev.ProposedToken(ids[i], pieces[i], self.source, True,
                                      p_target=probs[i], verified_by=self.engine)
                     for i in range(accepted))
        rejected = 0 if drafted is None else max(0, drafted - accepted)
        bad = tuple(ev.ProposedToken(-1, HIDDEN, self.source, False,
                                     reject_reason=ev.REJECT_NOT_EXPOSED,
                                     verified_by=self.engine) for _ in range(rejected))
        kind = (ev.TARGET_CORRECTION if rejected else
                ev.TARGET_BONUS if accepted else ev.TARGET_PLAIN)
        target = ev.TargetToken(ids[accepted], "".join(pieces[accepted:]), kind,
                                probs[accepted], None)
        timing = ev.Timing(0.0, ms, 0.0)
        proposed = accepted + rejected
        # The first token comes from the prompt's own pass: nothing could be drafted yet.
        speculates = self.speculates or self.totals.proposed > 0
        declined = ev.DECLINE_SERVER if speculates and drafted == 0 and self.steps else None
        totals = self.totals.after_step(proposed, accepted, timing, declined=bool(declined))
        self.totals = totals
        self.longest_draft = max(self.longest_draft, proposed)
        k = self.k if self.k is not None else self.longest_draft
        return ev.StepEvent(step=len(self.steps), oracle=self.oracle, k=k,
                            position=self.prompt_tokens + totals.tokens - accepted - 1,
                            proposed=good + bad, target=target, text="".join(pieces),
                            timing=timing, totals=totals, declined=declined)


def _tokens(group: list[Chunk], n: int) -> tuple[list[str], list[int], list[float | None]]:
    """Each of the step's n tokens: its text, id (-1: not given) and p_target (None)."""
    pieces = [p for c in group for p in (c.pieces or ())]
    if len(pieces) != n:
        texts = [c.text for c in group if c.text]
        # One chunk per token (llama-server): a token whose text was held back (an
        # incomplete UTF-8 character) arrives in a later chunk, so the first ones are empty.
        if len(texts) <= n:
            pieces = [""] * (n - len(texts)) + texts
        else:
            pieces = [*texts[: n - 1], "".join(texts[n - 1:])]
    ids = [i for c in group for i in (c.token_ids or ())]
    if len(ids) != n:
        ids = [-1] * n
    logprobs = [p for c in group for p in (c.logprobs or ())]
    probs = [math.exp(p) for p in logprobs] if len(logprobs) == n else [None] * n
    return pieces, ids, probs
