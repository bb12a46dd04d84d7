"""Several prompts decoded at once: one batched target pass per step over every stream.

Each stream has its own oracle, K (or K policy), context, sampling generator and acceptance,
as a single run (session.py) has; what they share is the target's pass: every live stream's
pending token and guesses go into one batch (backends/stream_cache.py). A stream that ends
(its token budget, an end token, a stop string, the context) leaves the batch and frees its
cells, and the others go on (continuous batching). A stream whose oracle fails leaves it
too, with one line that says which and why; what it wrote is kept. Plain decoding of the
same streams, batched the same way, is this loop with K = 0: the baseline of a batched run.

A tree proposal is verified as its first chain (each node's first child: the likeliest
path): the batch holds one sequence per stream, not a tree's branches.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from .. import events as ev
from ..backends.base import Backend, sync_device
from ..backends.stream_cache import MAX_STREAMS, StreamCache, streams_that_fit
from ..batch_events import REASON_FAILED, BatchEvent, BatchStep, StreamsSummary
from ..cost.batch_k import BatchK, Want
from ..errors import ContextOverflow, SpecvizError
from ..oracles.base import Oracle, Proposal, RunContext, TreeProposal
from .detokenize import TextStream
from .session import (
    KPolicy,
    RunControls,
    RunSettings,
    _before_eos,
    _before_stop,
    _cut_at_stop,
    _hit_stop,
    _ms,
    _ms_since,
    _token_chars,
    check_k,
    judge_linear,
    observed,
    propose,
    step_marks,
)
from .tree_verify import children_of


def check_streams(n: int) -> int:
    if not 1 <= int(n) <= MAX_STREAMS:
        raise SpecvizError(f"--streams must be between 1 and {MAX_STREAMS}, got {n}")
    return int(n)


@dataclass
class Stream:
    """One prompt of the batch, stepped as a single run is."""

    index: int
    oracle: Oracle
    settings: RunSettings
    k_policy: KPolicy | None
    prompt_text: str
    prompt_ids: list[int]
    cache: StreamCache
    context: list[int] = field(default_factory=list)
    totals: ev.Totals = field(default_factory=lambda: ev.Totals(0, 0, 0, 0, 0.0, 0.0, 0.0))
    reason: str | None = None  # why it left the batch; None while it is in it
    error: str | None = None
    batch_ms: float = 0.0  # the batch steps' time while it was in the batch (its pace)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.settings.params.seed)
        self.k = check_k(self.settings.k)

    def rollback(self, n: int) -> None:
        self.cache.truncate(self.index, n)

    def keep(self, tokens: list[int]) -> None:
        self.context += tokens
        self.oracle.observe(self.context)

    @property
    def room(self) -> int:
        """Guesses it may verify this step: its budget and the cells it was given."""
        return min(self.settings.max_tokens - self.totals.tokens,
                   self.cache.n_ctx - len(self.context)) - 1




class StreamsSession(RunControls):
    """N prompts (a RunSettings and an oracle each) on one target, batched. Iterate it."""

    def __init__(self, target: Backend, oracles: Sequence[Oracle],
                 settings: Sequence[RunSettings],
                 k_policies: Sequence[KPolicy | None] | None = None,
                 batch_k: BatchK | None = None) -> None:
        n = check_streams(len(settings))
        if len(oracles) != n:
            raise ValueError(f"{n} streams need {n} oracles, got {len(oracles)}")
        super().__init__()
        self.target = target
        self.settings = tuple(settings)
        self.oracles = tuple(oracles)
        self.k_policies = tuple(k_policies or [None] * n)
        # K chosen for the whole batch each step (stream i's odds learnt by k_policies[i]).
        self.batch_k = batch_k
        texts = [target.format_prompt(s.prompt, s.chat, s.system, s.history) for s in settings]
        self.prompt_texts = texts
        self.prompt_ids = [target.encode_prompt(t, s.chat) for t, s in zip(texts, settings)]
        self._check_fits()
        self.streams: list[Stream] = []
        self.summary: StreamsSummary | None = None

    def _check_fits(self) -> None:
        """Every stream's prompt, budget and a step's guesses must fit the shared context:
        said before anything runs, with how many streams would."""
        if any(not ids for ids in self.prompt_ids):
            raise SpecvizError("a prompt is empty (no tokens): give some text")
        needs = [n + s.max_tokens + s.k + 1 for n, s in
                 zip(map(len, self.prompt_ids), self.settings)]
        n_ctx = self.target.n_ctx
        if sum(needs) > n_ctx:
            fit = streams_that_fit(needs, n_ctx)
            raise ContextOverflow(
                f"{len(needs)} streams need {sum(needs)} cells of context (prompt, max tokens "
                f"and a step's guesses each) but the context holds {n_ctx}: at most {fit} of "
                "these fit; give fewer streams, fewer --max-tokens or a larger --n-ctx")

    def __iter__(self) -> Iterator[BatchEvent]:
        return self._run()

    def run_to_end(self) -> StreamsSummary:
        for _ in self:
            pass
        assert self.summary is not None
        return self.summary

    # ------------------------------------------------------------ the loop

    def _run(self) -> Iterator[BatchEvent]:
        t_start = time.perf_counter()
        self._cache = cache = self.target.stream_cache(len(self.settings))
        try:
            yield from self._steps(cache, t_start)
        finally:
            cache.close()

    def _steps(self, cache: StreamCache, t_start: float) -> Iterator[BatchEvent]:
        self.streams = [Stream(i, o, s, p, t, list(ids), cache) for i, (o, s, p, t, ids) in
                        enumerate(zip(self.oracles, self.settings, self.k_policies,
                                      self.prompt_texts, self.prompt_ids))]
        texts = [TextStream(self.target.token_bytes, self.target.is_special)
                 for _ in self.streams]
        self._prefill(cache)
        prefill_ms = _ms_since(t_start)
        steps, compute_ms = 0, 0.0
        while any(s.reason is None for s in self.streams):
            self._resume.wait()
            if self._stop.is_set():
                for s in self._live():
                    s.reason = "stopped"
                break
            step = self._batch_step(steps, texts)
            steps += 1
            compute_ms += step.timing.total_ms
            yield step
        for s in self.streams:
            if s.reason != REASON_FAILED:
                s.oracle.finish(s.context)
        self.summary = StreamsSummary(
            tuple(self._stream_summary(s, t, prefill_ms, t_start)
                  for s, t in zip(self.streams, texts)),
            steps, compute_ms, prefill_ms, _ms_since(t_start),
            tuple(s.totals.tokens / (s.batch_ms / 1000) if s.batch_ms > 0 else 0.0
                  for s in self.streams))
        yield self.summary

    def _live(self) -> list[Stream]:
        return [s for s in self.streams if s.reason is None]

    def _prefill(self, cache: StreamCache) -> None:
        """Every prompt but its last token, a pass each (llama.cpp rounds a long prompt
        batched beside another's up to 2.6 logits off its pass alone on smollm2; one at a
        time it is exact); each oracle starts on its prompt."""
        for s in self.streams:
            if len(s.prompt_ids) > 1:
                cache.forward({s.index: s.prompt_ids[:-1]}, "last")
        for s in self.streams:
            s.context = list(s.prompt_ids)
            chars = _token_chars(self.target, s.prompt_ids)
            self._guarded(s, s.oracle.start, RunContext(
                tuple(s.prompt_ids), s.prompt_text, chars, s.settings.params, s.rng,
                self.target.eos_ids, self.target.detokenize_one))

    def _batch_step(self, index: int, texts: list[TextStream]) -> BatchStep:
        t0 = time.perf_counter()
        guesses: dict[int, tuple[int, int, Proposal | TreeProposal, Proposal, float]] = {}
        ks = self._batch_ks()
        n_ctx = self._mean_context()
        for s in self._live():
            t = time.perf_counter()
            found = self._guarded(s, propose, s, s.room, ks.get(s.index) if ks else None)
            if found is not None:
                chosen, k, proposal = found
                linear = _before_stop(_before_eos(first_chain(proposal).cut(k),
                                                  self.target.eos_ids), texts[s.index],
                                      s.settings.stop)
                guesses[s.index] = (chosen, k, proposal, linear, _ms_since(t))
        t1 = time.perf_counter()
        logits = self._cache.forward({i: [self.streams[i].context[-1], *g[3].tokens]
                                  for i, g in guesses.items()}) if guesses else {}
        sync_device(self.target)
        t2 = time.perf_counter()
        pass_ms = _ms(t2 - t1)
        steps = []
        for i, (chosen, k, proposal, linear, guess_ms) in guesses.items():
            s = self.streams[i]
            event = self._guarded(s, self._judge, s, linear, logits[i], k, texts[i],
                                  (guess_ms, pass_ms), chosen, proposal)
            if event is not None:
                steps.append((i, event))
        timing = ev.Timing(_ms(t1 - t0), pass_ms, _ms_since(t2))
        left = self._leavers(steps, texts, timing.total_ms)
        widths = [len(g[3]) + 1 for g in guesses.values()]
        width = sum(widths)
        if self.batch_k is not None and width:
            self.batch_k.observe_pass(self.batch_k.computed(widths), n_ctx, pass_ms,
                                      timing.other_ms, rows=len(widths))
            self.batch_k.stepped(width > len(widths))
        return BatchStep(index, tuple(steps), width, timing, left)

    def _batch_ks(self) -> dict[int, int] | None:
        """Each live stream's K where it is chosen for the batch (None where it is not): from
        the odds each stream's policy has learnt; a stream whose oracle fails to say leaves."""
        if self.batch_k is None:
            return None
        if self.batch_k.resting(len(self._live())):
            return {s.index: 0 for s in self._live()}
        odds = {s.index: found for s in self._live()
                if (found := self._guarded(s, s.k_policy.odds, s.context)) is not None}
        wants = [Want(s.index, s.context, s.room, s.settings.max_tokens - s.totals.tokens)
                 for s in self._live() if s.index in odds]
        return self.batch_k.choose(wants, odds).ks

    def _mean_context(self) -> int:
        live = self._live()
        return round(sum(len(s.context) for s in live) / len(live)) if live else 0

    def _judge(self, s: Stream, linear: Proposal, logits: np.ndarray, k: int,
               text: TextStream, times: tuple[float, float], chosen: int,
               proposal: Proposal | TreeProposal) -> ev.StepEvent:
        marks = step_marks(s, chosen, k, proposal, bool(linear))
        event = observed(s, judge_linear(s, linear, logits, k, s.totals, text, s.rng, times,
                                         time.perf_counter(), marks))
        s.totals = event.totals
        return event

    def _leavers(self, steps: list[tuple[int, ev.StepEvent]], texts: list[TextStream],
                 ms: float) -> tuple[tuple[int, str], ...]:
        """Streams that end with this step leave the batch (their cells freed); the step's
        time counts toward the pace of every stream that was in it."""
        stepped = dict(steps)
        left = []
        for s in self.streams:
            if s.index in stepped:
                s.batch_ms += ms
                s.reason = self._ended(s, stepped[s.index], texts[s.index])
            if s.reason is not None and s.cache.length(s.index):
                s.cache.drop(s.index)
                left.append((s.index, s.reason))
        return tuple(left)

    def _ended(self, s: Stream, event: ev.StepEvent, text: TextStream) -> str | None:
        if event.target.id in self.target.eos_ids:
            return "eos"
        if _hit_stop(text.text, s.settings.stop):
            return "stop-string"
        if s.totals.tokens >= s.settings.max_tokens:
            return "max-tokens"
        if len(s.context) >= s.cache.n_ctx:
            return "context-full"
        return None

    def _guarded(self, s: Stream, call, *args):
        """`call(*args)` for stream `s`; where its oracle fails, the stream leaves the batch
        with one line and the others go on (None)."""
        try:
            return call(*args)
        except Exception as exc:  # one stream's fault must not end the others'
            s.reason = REASON_FAILED
            words = str(exc) if isinstance(exc, SpecvizError) else f"{type(exc).__name__}: {exc}"
            s.error = f"stream {s.index} ({s.oracle.name}) failed and left the batch: {words}"
            return None

    def _stream_summary(self, s: Stream, text: TextStream, prefill_ms: float,
                        t_start: float) -> ev.SummaryEvent:
        return ev.SummaryEvent(oracle=s.oracle.name, reason=s.reason or "stopped",
                               text=_cut_at_stop(text.text, s.settings.stop), totals=s.totals,
                               prefill_ms=prefill_ms, wall_ms=_ms_since(t_start),
                               error=s.error)


def first_chain(proposal: Proposal | TreeProposal) -> Proposal:
    """A tree's first-child chain as a linear proposal (a linear one as it is)."""
    if not isinstance(proposal, TreeProposal):
        return proposal
    kids = children_of(proposal.parents)
    chain, node = [], -1
    while kids[node]:
        node = kids[node][0]
        chain.append(node)

    def pick(values):
        return None if values is None else [values[i] for i in chain]

    q_rows = pick(proposal.q_rows)
    return Proposal([proposal.tokens[i] for i in chain], proposal.source,
                    None if q_rows is None or any(q is None for q in q_rows) else q_rows,
                    pick(proposal.p_draft), pick(proposal.spans), pick(proposal.details),
                    proposal.declined)
