"""One candidate's proposals replayed on the target's answers, at a fixed K or with auto K.

Greedy speculative decoding emits exactly the plain greedy output, so once the prompt and the
plain answer are known, what any draft would have had accepted is known: a step keeps the
draft's longest prefix that agrees with the answer, plus the target's own token. The replay
drives the oracle and auto K (engines/cost/auto_k.py, the lane's own policy) the way the
session loop does, and prices each step with `Costs`; nothing runs the target. The same loop
as benchmarks/replay_auto_k.py, which judged K policies this way first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .. import events as ev
from ..cost.auto_k import AutoK
from ..cost.profile import Profile
from ..oracles.base import AutoKHints, Oracle, RunContext, TreeProposal
from ..sampling import GREEDY
from .pricing import Costs

K_MAX = 16  # the longest fixed K a prediction tries (auto K goes as far as the profile)


@dataclass(frozen=True)
class Record:
    """One answer as a replay reads it."""

    prompt_text: str
    prompt: list[int]
    out: list[int]
    budget: int | None = None  # the answer's token limit (None: its length), as a run's room


@dataclass
class Drafter:
    """A candidate as the replay drives it. Drafting costs `per_token_ms` per forward of the
    drafter (`extra_forward`: a cross-draft drafts one token more than it sends); where that is
    None the oracle's own time is measured (the copying oracles' lookups)."""

    oracle: Oracle
    per_token_ms: float | None = None
    extra_forward: bool = False
    known_accept: Sequence[float] | None = None  # what `pair` measured, for auto K

    def draft_ms(self, drafted: int, measured_ms: float) -> float:
        if self.per_token_ms is None:
            return measured_ms
        if drafted == 0:
            return 0.0
        return (drafted + self.extra_forward) * self.per_token_ms

    def draft_profile(self, context: int, scale: float) -> Profile | None:
        """A one-token profile of the drafter, for auto K to price drafts before it has timed
        any (a lane's draft has its own profile; its one-token cost is what auto K reads, times
        the target's live scale, which `scale` takes off again)."""
        if self.per_token_ms is None:
            return None
        ms = self.per_token_ms / max(scale, 1e-9)
        return Profile("draft", "replay", "cpu", None, [context], [1], [[ms]])


@dataclass
class Tally:
    """A replay's totals."""

    plain_ms: float = 0.0
    spent_ms: float = 0.0
    steps: int = 0
    tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    k_sum: int = 0
    contexts: list[int] = field(default_factory=list)  # each answer's mean context

    @property
    def speedup(self) -> float:
        return self.plain_ms / self.spent_ms if self.spent_ms else 1.0

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else 1.0

    @property
    def mean_k(self) -> float:
        return self.k_sum / self.steps if self.steps else 0.0

    @property
    def mean_context(self) -> int:
        return int(np.mean(self.contexts)) if self.contexts else 0


def replay(records: Sequence[Record], make: Callable[[], Drafter], costs: Costs,
           k: int | None, eos_ids: frozenset[int] = frozenset()) -> Tally:
    """Every record's answer, in order, as a lane of this drafter would decode it: fixed K, or
    auto K when k is None. One oracle and one policy for all records, as a bench runs them
    (what the n-gram cache, suffix decoding and auto K learn carries over). Drafts stop
    before the target's end tokens (`eos_ids`), as the session cuts them."""
    drafter = make()
    oracle = drafter.oracle
    policy = None
    if k is None:
        first = len(records[0].prompt) if records else 0
        policy = AutoK(oracle, costs.profile, drafter.draft_profile(first, costs.scale(1)),
                       known_accept=drafter.known_accept)
    tally = Tally()
    for rec in records:
        _replay_one(rec, drafter, policy, k, costs, tally, eos_ids)
    return tally


def _replay_one(rec: Record, drafter: Drafter, policy: AutoK | None, k: int | None,
                costs: Costs, tally: Tally, eos_ids: frozenset[int]) -> None:
    oracle = drafter.oracle
    oracle.start(RunContext(tuple(rec.prompt), rec.prompt_text, (), GREEDY,
                            np.random.default_rng(0), eos_ids))
    context, done, step = list(rec.prompt), 0, 0
    while done < len(rec.out):
        truth = rec.out[done:]
        t0 = time.perf_counter()
        # A run drafts up to its token budget, the last token being the target's own (past
        # an end token too: such guesses are drafted, paid for and refused).
        left = (rec.budget or len(rec.out)) - done
        chosen = policy.choose(context, left) if policy else k
        asked = max(0, min(chosen, left - 1))
        if isinstance(oracle, AutoKHints):
            oracle.price_with(policy.verify_ms if policy else None)
        proposal = oracle.propose(context, asked) if asked else None
        draft = _tokens(proposal, asked, eos_ids)
        measured = (time.perf_counter() - t0) * 1000.0
        held = min(accepted_prefix(draft, truth), len(truth) - 1)  # an end token: the target's
        draft_ms = drafter.draft_ms(len(draft), measured)
        verify_ms = costs.verify_ms(len(draft) + 1, len(context))
        if policy:
            declined = None if draft else _why_declined(policy, chosen, asked, proposal)
            emitted = truth[held]
            policy.observe(step_event(step, asked, draft, held, emitted, len(context),
                                      draft_ms, verify_ms, costs.other_ms, declined))
        tally.spent_ms += verify_ms + costs.other_ms + draft_ms
        tally.steps, tally.k_sum, step = tally.steps + 1, tally.k_sum + asked, step + 1
        tally.drafted, tally.accepted = tally.drafted + len(draft), tally.accepted + held
        context += truth[: held + 1]
        done += held + 1
        oracle.observe(context)
    oracle.finish(context)  # what suffix decoding remembers for the next answers
    tally.tokens += len(rec.out)
    tally.plain_ms += sum(costs.plain_ms(len(rec.prompt) + i) for i in range(len(rec.out)))
    tally.contexts.append(len(rec.prompt) + len(rec.out) // 2)


def _tokens(proposal, k: int, eos_ids: frozenset[int]) -> list[int]:
    """A proposal's tokens, k at most, up to the first end token."""
    if proposal is None:
        return []
    if isinstance(proposal, TreeProposal):  # a replay judges a chain by its prefix that holds
        raise ValueError("a replay drafts chains: build tree oracles with tree=0")
    tokens = list(proposal.tokens[:k])
    ends = [i for i, t in enumerate(tokens) if t in eos_ids]
    return tokens[: ends[0]] if ends else tokens


def _why_declined(policy: AutoK, chosen: int, asked: int, proposal) -> str:
    if chosen <= 0:
        return policy.zero_reason
    if asked == 0:
        return ev.DECLINE_END
    if proposal is not None and len(proposal):
        return ev.DECLINE_END_TOKEN  # what was guessed was cut at an end token
    return (proposal.declined if proposal is not None else None) or ev.DECLINE_NO_MATCH


def accepted_prefix(draft: Sequence[int], truth: Sequence[int]) -> int:
    n = 0
    while n < len(draft) and n < len(truth) and draft[n] == truth[n]:
        n += 1
    return n


def step_event(step: int, k: int, draft: Sequence[int], held: int, emitted: int,
               position: int, draft_ms: float, verify_ms: float, other_ms: float,
               declined: str | None = None) -> ev.StepEvent:
    """The parts of a step event that auto K learns from: judgments, timings, why nothing was
    sent."""
    def judged(i: int, token: int) -> ev.ProposedToken:
        reason = None if i < held else ev.REJECT_MISMATCH if i == held else ev.REJECT_AFTER
        return ev.ProposedToken(token, "", "replay", i < held, reject_reason=reason)

    proposed = tuple(judged(i, t) for i, t in enumerate(draft))
    target = ev.TargetToken(emitted, "", ev.TARGET_CORRECTION, 1.0, 1.0)
    timing = ev.Timing(draft_ms, verify_ms, other_ms)
    return ev.StepEvent(step, "replay", k, position, proposed, target, "", timing,
                        ev.Totals(0, 0, 0, 0, 0.0, 0.0, 0.0), declined=declined, auto_k=True)
