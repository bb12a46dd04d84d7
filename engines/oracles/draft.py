"""A smaller model of the same vocabulary drafts K tokens, one forward each.

The draft model keeps its own cache; `Backend.sync` rolls it back to the common prefix with
the context, so a rejection on the target side needs no bookkeeping here. The draft reads the
prompt when it first drafts, not when the run starts: a lane whose auto K declines every step
then costs what plain decoding costs (the 0.5B's prompt took 0.3 s of a 4.8 s code edit on a
2-core CPU), and a lane that drafts pays for the prompt in its first drafting step. Greedy drafting
proposes the argmax; sampled drafting samples from the draft's processed distribution and
returns it (q) for rejection sampling.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from weakref import WeakKeyDictionary

import numpy as np

from ..backends.base import Backend
from ..errors import IncompatibleModels
from ..events import DECLINE_END_TOKEN
from ..sampling import distribution, prob_of, sample
from .base import BuildParts, Oracle, Proposal

# Where the vocabularies differ the cross-draft oracle works: every refusal says so.
CROSS_HINT = ("; the cross-draft oracle (--oracle cross-draft) drafts across tokenizers by "
              "re-tokenizing the draft's text")

# Vocabulary sizes may differ by padding rows (llama.cpp's speculative example allows 128).
MAX_VOCAB_SIZE_DIFFERENCE = 128


class DraftModelOracle(Oracle):
    name = "draft"
    source = "draft"

    def __init__(self, draft: Backend, target: Backend | None = None, **settings) -> None:
        super().__init__(**settings)
        self.draft = draft
        if target is not None:
            check_compatible(target, draft)

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        params, rng = self.run.params, self.run.rng
        logits = self.draft.sync(context)[-1]
        tokens: list[int] = []
        q_rows: list[np.ndarray] = []
        p_draft: list[float] = []
        for i in range(k):
            q = distribution(logits, params) if not params.greedy else None
            token = sample(q, rng) if q is not None else int(np.argmax(logits))
            p = float(q[token]) if q is not None else prob_of(logits, token)
            if token in self.run.eos_ids or (i > 0 and p < self.settings.p_min):
                break
            tokens.append(token)
            p_draft.append(p)
            if q is not None:
                q_rows.append(q)
            if i + 1 < k:
                logits = self.draft.forward([token])[-1]
        declined = DECLINE_END_TOKEN if not tokens and k else None
        return Proposal(tokens, self.source, q_rows or None, p_draft, declined=declined)


def check_compatible(target: Backend, draft: Backend) -> None:
    """Refuse a draft whose vocabulary differs from the target's, saying what differs."""
    n_t, n_d = target.n_vocab, draft.n_vocab
    if abs(n_t - n_d) > MAX_VOCAB_SIZE_DIFFERENCE:
        raise IncompatibleModels(
            f"draft vocabulary has {n_d} tokens, the target's {n_t}: they do not share a "
            "tokenizer (pick a draft of the same family)" + CROSS_HINT
        )
    n = min(n_t, n_d)
    if _spellings_digest(target, n) != _spellings_digest(draft, n):
        tid = next(i for i in range(n) if target.token_text_raw(i) != draft.token_text_raw(i))
        raise IncompatibleModels(
            f"draft and target tokenizers differ at token {tid}: "
            f"{draft.token_text_raw(tid)!r} (draft) vs {target.token_text_raw(tid)!r} (target)"
            + CROSS_HINT
        )
    if target.eos_ids.isdisjoint(draft.eos_ids):
        raise IncompatibleModels(
            f"draft and target end-of-text tokens differ: {sorted(draft.eos_ids)} vs "
            f"{sorted(target.eos_ids)}" + CROSS_HINT
        )


_digests: WeakKeyDictionary = WeakKeyDictionary()  # backend -> {n: digest of n spellings}


def _spellings_digest(backend: Backend, n: int) -> bytes:
    """SHA-256 over the first n tokens' spellings, computed once per backend: every run
    builds its oracle anew, and scanning two 152k vocabularies took 0.4 s of each start."""
    known = _digests.setdefault(backend, {})
    if n not in known:
        h = hashlib.sha256()
        for tid in range(n):
            spelled = backend.token_text_raw(tid).encode("utf-8", "surrogatepass")
            h.update(len(spelled).to_bytes(4, "little") + spelled)
        known[n] = h.digest()
    return known[n]


def build(parts: BuildParts) -> DraftModelOracle:
    return DraftModelOracle(parts.inputs["draft"], parts.target, **parts.settings)
