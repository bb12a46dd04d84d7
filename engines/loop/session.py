"""The speculative session: oracle proposes, target verifies, events come out.

The target's cache holds the context minus its last token (the "pending" token). Each step
feeds the pending token plus the K proposals in one forward pass and reads K+1 rows of
logits: row i scores the position of proposal i, the last row the bonus position. After
verification the cache is cut back to the accepted prefix, and the target's own token
becomes the next pending token. Plain decoding is the same loop with K = 0.

Control (K, pause, resume, stop) is safe to call from another thread and takes effect at the
next step boundary.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .. import events as ev
from ..backends.base import Backend, sync_device
from ..errors import ContextOverflow, SpecvizError
from ..oracles.base import AutoKHints, Oracle, Proposal, RunContext, TreeProposal
from ..oracles.registry import is_plain
from ..sampling import GREEDY, SamplingParams
from .detokenize import TextStream
from .typical import TypicalAcceptance, verify_typical
from .verify import Verdict, verify

K_MAX = 32


class KPolicy(Protocol):
    """Chooses K before each step from what it has observed (engines.cost.auto_k.AutoK)."""

    def choose(self, context: Sequence[int], left: int | None = None) -> int:
        """K for the next step; `left`: the tokens the run may still write."""
        ...

    def observe(self, event: ev.StepEvent) -> None: ...

    def snapshot(self) -> object:
        """What it has learnt so far, for `restore` (the bench repeats a run from it)."""
        ...

    def restore(self, state: object) -> None: ...

    def verify_ms(self, rows: float, n_ctx: int) -> float:
        """Expected ms of verifying `rows` rows now (the oracle's `price`)."""
        ...

    @property
    def zero_reason(self) -> str:
        """Why the last K it chose was 0 (events.DECLINE_*)."""
        ...

    explored: bool  # the last K it chose was to learn the oracle's odds, not its estimate's


@dataclass(frozen=True)
class RunSettings:
    prompt: str
    chat: bool = True
    system: str | None = None
    history: tuple[tuple[str, str], ...] = ()  # earlier (user, assistant) turns
    k: int = 4
    max_tokens: int = 256
    params: SamplingParams = GREEDY
    stop: tuple[str, ...] = ()
    typical: TypicalAcceptance | None = None  # LOSSY typical acceptance instead of exact


def check_k(k: int) -> int:
    if not 0 <= int(k) <= K_MAX:
        raise ValueError(f"K must be between 0 and {K_MAX}, got {k}")
    return int(k)


def starting_k(oracle: str, k: int, auto: bool) -> int:
    """The K a session is set to: none for plain decoding; with auto K the most there is (the
    policy chooses below it every step); else the lane's own, checked."""
    return 0 if is_plain(oracle) else K_MAX if auto else check_k(k)


class RunControls:
    """Pause, resume and stop from any thread, taken by the run at its next boundary."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._resume = threading.Event()
        self._resume.set()

    def pause(self) -> None:
        self._resume.clear()

    def resume(self) -> None:
        self._resume.set()

    def stop(self) -> None:
        self._stop.set()
        self._resume.set()  # a paused run must wake up to end

    @property
    def paused(self) -> bool:
        return not self._resume.is_set()


class Session(RunControls):
    """One run of one oracle on one target. Iterate it to drive the run."""

    def __init__(self, target: Backend, oracle: Oracle, settings: RunSettings,
                 k_policy: KPolicy | None = None) -> None:
        self.target = target
        self.oracle = oracle
        self.settings = settings
        self.k_policy = k_policy  # if set, chooses K every step (--k auto); else K is fixed
        self._k = check_k(settings.k)
        super().__init__()
        self._lock = threading.Lock()
        self.prompt_text = target.format_prompt(settings.prompt, settings.chat, settings.system,
                                                settings.history)
        self.prompt_ids = target.encode_prompt(self.prompt_text, settings.chat)
        self._check_fits()
        self.token_chars = _token_chars(target, self.prompt_ids)
        self.context: list[int] = []
        self.summary: ev.SummaryEvent | None = None

    # ------------------------------------------------------------ control (any thread)

    @property
    def k(self) -> int:
        with self._lock:
            return self._k

    def set_k(self, k: int) -> None:
        k = check_k(k)
        with self._lock:
            self._k = k

    # ------------------------------------------------------------ the loop

    def __iter__(self) -> Iterator[ev.Event]:
        return self._run()

    def run_to_end(self) -> ev.SummaryEvent:
        for _ in self:
            pass
        assert self.summary is not None
        return self.summary

    def _run(self) -> Iterator[ev.Event]:
        s = self.settings
        t_start = time.perf_counter()
        self.target.reset()
        if self.oracle.tree_nodes():  # before the prompt: a backend may rebuild its cache
            self.target.reserve_branches(self.oracle.tree_nodes() + 1)
        if len(self.prompt_ids) > 1:
            self.target.forward(self.prompt_ids[:-1])
        self.context = list(self.prompt_ids)
        rng = np.random.default_rng(s.params.seed)
        self.oracle.start(
            RunContext(tuple(self.prompt_ids), self.prompt_text, self.token_chars, s.params, rng,
                       self.target.eos_ids, self.target.detokenize_one)
        )
        prefill_ms = _ms_since(t_start)  # an oracle's own prompt processing (a draft) included
        stream = TextStream(self.target.token_bytes, self.target.is_special)
        totals = ev.Totals(0, 0, 0, 0, 0.0, 0.0, 0.0)
        reason = "max-tokens"
        while totals.tokens < s.max_tokens:
            self._resume.wait()
            if self._stop.is_set():
                reason = "stopped"
                break
            event = self._step(totals, stream, rng)
            totals = event.totals
            yield event
            if event.target.id in self.target.eos_ids:
                reason = "eos"
                break
            if _hit_stop(stream.text, s.stop):
                reason = "stop-string"
                break
            if len(self.context) >= self.target.n_ctx:
                reason = "context-full"
                break
        self.oracle.finish(self.context)
        # An incomplete character at the very end stays out: the text is exactly the steps'.
        self.summary = ev.SummaryEvent(
            oracle=self.oracle.name,
            reason=reason,
            text=_cut_at_stop(stream.text, s.stop),
            totals=totals,
            prefill_ms=prefill_ms,
            wall_ms=_ms_since(t_start),
        )
        yield self.summary

    def keep(self, tokens: list[int]) -> None:
        """A step's outcome joins the context (the accepted drafts, then the target's own
        token); the oracle sees the new context."""
        self.context += tokens
        self.oracle.observe(self.context)

    def _step(self, totals: ev.Totals, stream: TextStream, rng) -> ev.StepEvent:
        t0 = time.perf_counter()
        room = min(self.settings.max_tokens - totals.tokens,
                   self.target.n_ctx - len(self.context)) - 1
        chosen, k, proposal = propose(self, room)
        if isinstance(proposal, TreeProposal):
            from .tree_step import tree_step

            tree = proposal.pruned(k, self.target.eos_ids,
                                   _stopping_nodes(proposal, stream, self.settings.stop))
            event = tree_step(self, tree, k, totals, stream, rng, t0)
            return noted(self, event, chosen, k, proposal)
        return observed(self, self._linear_step(proposal, chosen, k, totals, stream, rng, t0))

    def rollback(self, n: int) -> None:
        """The target's cache keeps its first `n` tokens (the context and accepted guesses)."""
        self.target.truncate(n)

    def _linear_step(self, found: Proposal, chosen: int, k: int, totals: ev.Totals,
                     stream: TextStream, rng, t0: float) -> ev.StepEvent:
        proposal = _before_stop(_before_eos(found.cut(k), self.target.eos_ids), stream,
                                self.settings.stop)
        marks = step_marks(self, chosen, k, found, bool(proposal))
        t1 = time.perf_counter()
        logits = self.target.forward([self.context[-1], *proposal.tokens], "all")
        sync_device(self.target)
        t2 = time.perf_counter()
        return judge_linear(self, proposal, logits, k, totals, stream, rng,
                            (_ms(t1 - t0), _ms(t2 - t1)), t2, marks)

    def _check_fits(self) -> None:
        n, n_ctx = len(self.prompt_ids), self.target.n_ctx
        if n == 0:
            raise SpecvizError("the prompt is empty (no tokens): give some text")
        if n + 1 > n_ctx:
            raise ContextOverflow(
                f"the prompt is {n} tokens but the model's context holds {n_ctx}; shorten it"
            )


# ---------------------------------------------------------------- helpers


class Proposing(Protocol):
    """What choosing K and proposing need of a run (a Session, a batch's stream)."""

    oracle: Oracle
    k_policy: KPolicy | None
    context: list[int]

    @property
    def k(self) -> int: ...


def propose(run: Proposing, room: int, chosen: int | None = None
            ) -> tuple[int, int, Proposal | TreeProposal]:
    """K as chosen (`chosen` where a batch chose it, else the policy's or the run's), K within
    the `room` left, and the oracle's guesses for it."""
    batch_chose = chosen is not None
    if chosen is None:
        chosen = run.k_policy.choose(run.context, room + 1) if run.k_policy else run.k
    k = max(0, min(chosen, room))
    # Oracles may be shared by lanes and runs with and without auto K: priced per step. A
    # batch that chose K priced the stream's guesses at the batch's width; the oracle's own
    # prices (a single sequence's tree) would second-guess it.
    if isinstance(run.oracle, AutoKHints):
        own = run.k_policy is not None and not batch_chose
        run.oracle.price_with(run.k_policy.verify_ms if own else None)
    return chosen, k, (run.oracle.propose(run.context, k) if k else Proposal())


def step_marks(run: Proposing, chosen: int, k: int, proposal: Proposal | TreeProposal,
               sends: bool) -> dict:
    """What a step's event says of its choice: why it guessed nothing, if so (`sends`: it
    verified a guess), and what auto K made of it."""
    marks: dict = {}
    if not sends and not is_plain(run.oracle.name):
        marks["declined"] = why_declined(run.k_policy, chosen, k, proposal)
    if run.k_policy:
        marks.update(auto_k=True, explored=run.k_policy.explored and sends)
    return marks


def observed(run: Proposing, event: ev.StepEvent) -> ev.StepEvent:
    """The step's event, learnt from by auto K."""
    if run.k_policy:
        run.k_policy.observe(event)
    return event


def noted(run: Proposing, event: ev.StepEvent, chosen: int, k: int,
          proposal: Proposal | TreeProposal) -> ev.StepEvent:
    """A tree step's event with its marks (`step_marks`), learnt from by auto K (a linear
    step's event is built with them: a batch of 16 streams makes 16 a step)."""
    marks = step_marks(run, chosen, k, proposal, bool(event.proposed or event.tree))
    if "declined" in marks:
        marks.update(event.declined_changes(marks["declined"]))
    return observed(run, dataclasses.replace(event, **marks) if marks else event)


class Judged(Protocol):
    """What judging a linear step needs of the run it steps (a Session, a batch's stream)."""

    oracle: Oracle
    settings: RunSettings
    context: list[int]

    def rollback(self, n: int) -> None: ...

    def keep(self, tokens: list[int]) -> None: ...


def judge_linear(run: Judged, proposal: Proposal, logits: np.ndarray, k: int,
                 totals: ev.Totals, stream: TextStream, rng, times: tuple[float, float],
                 t2: float, marks: dict | None = None) -> ev.StepEvent:
    """The step's event from the target's rows for the pending token and `proposal`: the
    verdict, the cache rolled back to what it kept, the context extended. `times`: the
    proposal's and the pass's ms; `t2` when the pass ended; `marks` what `step_marks` says
    of the step's choice."""
    marks = marks or {}
    s = run.settings
    if s.typical is None:
        verdict = verify(proposal.tokens, proposal.q_rows, logits, s.params, rng)
    else:
        verdict = verify_typical(proposal.tokens, logits, s.params, rng, s.typical)
    run.rollback(len(run.context) + verdict.n_accepted)
    position = len(run.context)
    run.keep([*proposal.tokens[: verdict.n_accepted], verdict.token])
    proposed, target, text = _event_tokens(proposal, verdict, stream)
    timing = ev.Timing(*times, _ms_since(t2))
    totals = totals.after_step(len(proposal), verdict.n_accepted, timing,
                               declined="declined" in marks)
    lossy = s.typical is not None and not s.params.greedy
    return ev.StepEvent(totals.steps - 1, run.oracle.name, k, position, proposed, target,
                        text, timing, totals, lossy=lossy, **marks)


def why_declined(k_policy: KPolicy | None, chosen: int, k: int,
                 proposal: Proposal | TreeProposal) -> str:
    """Why a step verified no guess: K 0 (asked, or auto K's reason), no room, nothing
    found, or what was guessed cut at an end token."""
    if chosen <= 0:
        return ev.DECLINE_K_ZERO if k_policy is None else k_policy.zero_reason
    if k == 0:
        return ev.DECLINE_END
    if len(proposal) == 0:
        return proposal.declined or ev.DECLINE_NO_MATCH
    return ev.DECLINE_END_TOKEN  # what was guessed was cut at an end token


def _event_tokens(proposal: Proposal, verdict: Verdict, stream: TextStream):
    """Build the event's token records; push emitted tokens through the text stream."""
    n = verdict.n_accepted
    pieces = [stream.push(t) for t in proposal.tokens[:n]]
    shadow = stream.fork()  # rejected tokens render after the accepted prefix, then vanish
    pieces += [shadow.push(t) for t in proposal.tokens[n:]]
    proposed = tuple(
        ev.ProposedToken(
            id=tok,
            text=pieces[i],
            source=proposal.source,
            accepted=j.accepted,
            p_draft=proposal.p_draft[i] if proposal.p_draft else None,
            p_target=j.p_target,
            reject_reason=j.reason,
            accept_prob=j.accept_prob,
            draw=j.draw,
            span=proposal.spans[i] if proposal.spans else None,
            detail=proposal.details[i] if proposal.details else None,
        )
        for i, (tok, j) in enumerate(zip(proposal.tokens, verdict.judgements))
    )
    drawn_from = verdict.residual and verdict.residual.event(lambda t: stream.fork().push(t))
    piece = stream.push(verdict.token)
    target = ev.TargetToken(verdict.token, piece, verdict.kind, verdict.p_token, verdict.margin,
                            drawn_from)
    return proposed, target, "".join(pieces[:n]) + piece


def _before_eos(proposal: Proposal, eos_ids: frozenset[int]) -> Proposal:
    """Proposals stop before an end token: the target ends the text itself."""
    for i, tok in enumerate(proposal.tokens):
        if tok in eos_ids:
            return proposal.cut(i)
    return proposal


def _before_stop(proposal: Proposal, stream: TextStream, stops: tuple[str, ...]) -> Proposal:
    """Proposals stop before the token whose text completes a stop string: the target writes
    that token itself and the run ends there, as plain decoding does (guesses kept past it
    were tokens plain decoding never writes)."""
    if not any(stops):
        return proposal
    shadow = stream.fork()
    for i, tok in enumerate(proposal.tokens):
        shadow.push(tok)
        if _hit_stop(shadow.text, stops):
            return proposal.cut(i)
    return proposal


def _stopping_nodes(tree: TreeProposal, stream: TextStream,
                    stops: tuple[str, ...]) -> frozenset[int]:
    """The nodes of `tree` whose path's text completes a stop string (`_before_stop`'s
    tokens, for a tree: pruned with what hangs below them)."""
    if not any(stops):
        return frozenset()
    shadows: dict[int, TextStream] = {}
    stopping = set()
    for i, (tok, parent) in enumerate(zip(tree.tokens, tree.parents)):
        before = shadows[parent] if parent >= 0 else stream
        shadow = before.fork()
        shadow.push(tok)
        shadows[i] = shadow
        if _hit_stop(shadow.text, stops):
            stopping.add(i)
    return frozenset(stopping)


def _token_chars(target: Backend, ids: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """Char span of each prompt token in the rendered prompt, whose text spells out control
    tokens (`<|im_start|>`) that print as nothing when generated."""

    def spelled(tid: int) -> bytes:
        if target.is_special(tid):
            return target.token_text_raw(tid).encode("utf-8")
        return target.token_bytes(tid)

    stream = TextStream(spelled, lambda _t: False)
    spans, pos = [], 0
    for tid in ids:
        piece = stream.push(tid)
        spans.append((pos, pos + len(piece)))
        pos += len(piece)
    return tuple(spans)


def _hit_stop(text: str, stops: tuple[str, ...]) -> bool:
    return any(s and s in text for s in stops)


def _cut_at_stop(text: str, stops: tuple[str, ...]) -> str:
    cut = min((text.find(s) for s in stops if s and s in text), default=-1)
    return text[:cut] if cut >= 0 else text


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def _ms_since(t: float) -> float:
    return _ms(time.perf_counter() - t)


def warm_up(backend: Backend, prompt_ids: Sequence[int]) -> None:
    """One short forward pass so the first measured step does not pay for cold caches."""
    backend.reset()
    backend.forward(list(prompt_ids[: min(8, len(prompt_ids))]))
    backend.reset()
