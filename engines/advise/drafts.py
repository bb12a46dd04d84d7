"""Draft models predicted as `specviz pair` predicts them: their tokenizers compared with the
target's, one teacher-forced pass of the draft over the target's answers (its argmax after the
true prefix is what it would have drafted: exactly, for greedy decoding), then the draft's
guesses replayed with auto K and at fixed Ks, each forward of the draft priced as timed now."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..backends.base import Backend
from ..oracles.base import Oracle, Proposal
from ..oracles.registry import info
from ..pair import known
from ..pair.acceptance import (
    Agreement,
    Answer,
    acceptance_by_position,
    cross_agreement,
    forced_rows,
    time_forwards,
)
from ..pair.vocab import VERDICT_CROSS, VERDICT_UNUSABLE, compare_vocabularies
from . import answers as kept
from .predict import predict
from .pricing import MIN_GAIN, OPTIMISTIC_ACCEPT, Costs
from .replay import K_MAX, Drafter, Record
from .report import Candidate

MISS = -1  # a drafted token the answer does not have: no token id is negative
Say = Callable[[str], None]


class AgreementDraft(Oracle):
    """A draft model's guesses replayed from its agreement with the answers: at each answer
    position it proposes the answer's own tokens while its argmax agreed, then tokens the
    answer does not have for the rest of its k (drafted and paid for, never kept)."""

    source = "draft"

    def __init__(self, name: str,
                 agreement: Mapping[tuple[int, ...], tuple[Sequence[int], Sequence[bool]]]):
        self.name = name  # "draft" or "cross-draft": the registry describes its settings
        super().__init__()
        self._by_prompt = agreement
        self._answer: tuple[Sequence[int], Sequence[bool]] = ((), ())

    def start(self, run) -> None:
        super().start(run)
        self._answer = self._by_prompt[tuple(run.prompt_ids)]

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        out, agree = self._answer
        at = len(context) - len(self.run.prompt_ids)
        tokens: list[int] = []
        for j in range(at, at + k):
            held = j < len(agree) and agree[j] and (not tokens or tokens[-1] != MISS)
            tokens.append(out[j] if held else MISS)
        return Proposal(tokens, self.source)


def greedy_agreement(target: Backend, draft: Backend, answer: Answer) -> Agreement:
    """Per answer token: was it the draft's argmax after the true prefix (same token ids)."""
    n = min(target.n_vocab, draft.n_vocab)
    guesses: list[int] = []
    for rows in forced_rows(draft, answer.prompt_ids, answer.ids):
        guesses += [int(g) for g in np.argmax(rows[:, :n], axis=1)]
    return Agreement([g == t for g, t in zip(guesses, answer.ids)], None, len(answer.prompt_ids))


def token_ms(draft: Backend, prefix: Sequence[int]) -> float:
    """One draft token: its forward after `prefix`, timed as a decoding loop meets it, and
    picking it from its row of logits."""
    forward = time_forwards(draft, prefix, 1)[0]
    row = np.random.default_rng(1).standard_normal(draft.n_vocab, dtype=np.float32)
    picks = []
    for _ in range(5):
        t0 = time.perf_counter()
        int(np.argmax(row))
        picks.append((time.perf_counter() - t0) * 1000.0)
    return forward + statistics.median(picks)


def cannot_pay_line(costs: Costs, per_token: float, cross: bool, context: int) -> str:
    """Why a draft this dear cannot pay here ("" where it might)."""
    if not costs.cannot_pay(lambda k: (k + cross) * per_token, context, K_MAX):
        return ""
    return (f"cannot pay here: a draft token costs {per_token:.1f} ms, a plain step "
            f"{costs.plain_ms(context):.1f} ms; even if {OPTIMISTIC_ACCEPT:.0%} of its tokens "
            f"held, no K up to {K_MAX} would gain {MIN_GAIN:.0%}")


def predict_draft(target: Backend, draft: Backend, found: Candidate,
                  answers: Mapping[str, Sequence[Answer]], costs: Costs, target_name: str,
                  say: Say = lambda _: None, budget: int | None = None) -> Candidate:
    """Fill `found` (a draft model's row) with its prediction, or the reason there is none
    (`budget`: the answers' token limit)."""
    every = [a for kind in answers.values() for a in kind]
    sample = b"".join(a.text for a in every).decode("utf-8", errors="replace")
    vocab = compare_vocabularies(target, draft, sample)
    if vocab.verdict == VERDICT_UNUSABLE:
        found.skipped = f"tokenizer unusable: {vocab.reason}"
        return found
    cross = vocab.verdict == VERDICT_CROSS
    if cross and not _drafts_through_text(found):
        found.skipped = "its tokenizer is not the target's"
        return found
    first = every[0]
    prefix = draft.encode_prompt(first.prompt_text, chat=True) if cross else first.prompt_ids
    per_token = token_ms(draft, prefix)
    found.skipped = cannot_pay_line(costs, per_token, cross, len(first.prompt_ids))
    if found.skipped:
        return found
    agreements = _agreements(target, draft, every, cross, found.name, say)
    known_accept = None if cross else _remember(target_name, str(found.model), agreements, say)
    table = {tuple(a.prompt_ids): (a.ids, g.agree) for a, g in zip(every, agreements)}
    records = {kind: [Record(a.prompt_text, a.prompt_ids, a.ids, budget)
                      for a in kind_answers] for kind, kind_answers in answers.items()}

    def make() -> Drafter:
        return Drafter(AgreementDraft(found.oracle, table), per_token, cross, known_accept)

    found.cells = predict(records, make, costs, draft_ms=lambda k: (k + cross) * per_token,
                          eos_ids=target.eos_ids)
    found.note = (f"a draft token {per_token:.1f} ms" + (
        "; estimated through text (the oracle re-tokenizes at the seam)" if cross else ""))
    return found


def _drafts_through_text(found: Candidate) -> bool:
    """Turn a row of a draft of another tokenizer into the oracle its registry entry says
    drafts with it through text; False where there is none."""
    other = info(found.oracle).other_tokenizer
    if not other:
        return False
    found.name = other + found.name.removeprefix(found.oracle)
    found.oracle = other
    return True


def _agreements(target: Backend, draft: Backend, every: Sequence[Answer], cross: bool,
                name: str, say: Say) -> list[Agreement]:
    """The draft's agreement with each answer: kept from an earlier advice, or read now."""
    path = kept.agreement_path(draft, every, cross)
    rows = kept.kept_agreement(path, every)
    if rows is not None:
        return [Agreement(r, None, len(a.prompt_ids)) for r, a in zip(rows, every)]
    say(f"{name}: reading the target's answers ({sum(len(a.ids) for a in every)} tokens)")
    out = [cross_agreement(target, draft, a) if cross else greedy_agreement(target, draft, a)
           for a in every]
    kept.keep_agreement(path, [a.agree for a in out], say)
    return out


def _remember(target_name: str, draft_name: str, agreements: Sequence[Agreement],
              say: Say) -> list[float] | None:
    """Each draft position's acceptance, kept for the auto K of a later lane of this pair (as
    `pair` keeps it), and given to this prediction's auto K as a lane's gets it."""
    by_position = acceptance_by_position(agreements, K_MAX)
    problem = known.remember(target_name, draft_name, by_position,
                             sum(len(a.agree) for a in agreements))
    if problem:
        say(problem)
    return _leading(by_position)


def _leading(odds: Sequence[float | None]) -> list[float] | None:
    """The positions measured, up to the first that was not."""
    out = []
    for value in odds:
        if value is None:
            break
        out.append(value)
    return out or None
