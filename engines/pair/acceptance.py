"""How often a draft would be accepted, estimated without a speculative run.

The target answers a few prompts greedily, once (plain decoding, its steps timed). Then each
model reads the prompt and that answer in one teacher-forced pass: row i of the logits is what
the model predicts for answer token i after the true prefix. In greedy speculative decoding an
accepted draft token equals the target's, so the draft always drafts after the true prefix:
its proposal at answer position i is accepted exactly when its argmax there is answer[i]. A
speculative run at any K is therefore replayed exactly from one boolean per position
(`simulate`). For sampling, Leviathan et al.'s acceptance rate alpha is the expected
sum_x min(p(x), q(x)) per position.

A draft of another vocabulary (cross-draft) reads the answer's text in its own tokens; a target
token counts as drafted right when every draft token overlapping its bytes is the draft's
argmax. That is an estimate (the oracle re-tokenizes at the seam), and says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from .. import events as ev
from ..backends.base import Backend
from ..cost.profile import step_costs, time_forward, time_in_loop
from ..loop.session import RunSettings, Session
from ..oracles import make_oracle

CHUNK = 64  # rows of logits per teacher-forced forward: 64 x 152k floats is 39 MB


@dataclass
class Answer:
    """The target's greedy answer to one prompt, and its plain decoding timed step by step."""

    prompt_text: str  # as formatted for the target (chat template applied)
    prompt_ids: list[int]
    ids: list[int]
    verify_ms: list[float]  # each plain step's forward
    other_ms: list[float]  # each plain step's sampling and bookkeeping
    text: bytes = b""  # what the answer prints (end tokens left out)


@dataclass
class Agreement:
    """Per answer token: did the draft guess it (greedy), and alpha there (None: cross)."""

    agree: list[bool]
    alpha: list[float] | None
    prompt_len: int


def target_answers(target: Backend, prompts: Sequence[str], max_tokens: int, chat: bool,
                   on_progress: Callable[[int, int], None] | None = None) -> list[Answer]:
    """Plain greedy decoding of every prompt on the target, as `specviz run` does it."""
    answers = []
    for i, prompt in enumerate(prompts):
        session = Session(target, make_oracle("none"), RunSettings(prompt, chat=chat, k=0,
                                                                   max_tokens=max_tokens))
        steps = [e for e in session if isinstance(e, ev.StepEvent)]
        ids = [s.target.id for s in steps]
        text = b"".join(target.token_bytes(t) for t in ids if not target.is_special(t))
        answers.append(Answer(session.prompt_text, list(session.prompt_ids), ids,
                              [s.timing.verify_ms for s in steps],
                              [s.timing.other_ms for s in steps], text))
        if on_progress:
            on_progress(i + 1, len(prompts))
    return answers


def forced_rows(backend: Backend, prefix: Sequence[int], continuation: Sequence[int],
                chunk: int = CHUNK) -> Iterator[np.ndarray]:
    """Teacher forcing: logits predicting each token of `continuation` after `prefix` and the
    true tokens before it, a chunk of rows at a time."""
    ids = list(prefix) + list(continuation)
    start = len(prefix) - 1  # the row of the prefix's last token predicts continuation[0]
    backend.reset()
    if start > 0:
        backend.forward(ids[:start])
    for at in range(start, len(ids) - 1, chunk):
        yield backend.forward(ids[at : min(at + chunk, len(ids) - 1)], "all")
    backend.reset()


def same_vocab_agreement(target: Backend, draft: Backend, answer: Answer,
                         temperature: float = 1.0) -> Agreement:
    """Greedy agreement and alpha at `temperature` per answer token, both models on the same
    token ids."""
    n = min(target.n_vocab, draft.n_vocab)
    rows_t = forced_rows(target, answer.prompt_ids, answer.ids)
    rows_d = forced_rows(draft, answer.prompt_ids, answer.ids)
    agree, alpha, i = [], [], 0
    for lt, ld in zip(rows_t, rows_d, strict=True):
        lt, ld = lt[:, :n], ld[:, :n]
        guess = np.argmax(ld, axis=1)
        for j in range(len(guess)):
            agree.append(int(guess[j]) == answer.ids[i + j])
        alpha += list(np.minimum(_softmax(lt, temperature), _softmax(ld, temperature)).sum(1))
        i += len(guess)
    return Agreement(agree, [float(a) for a in alpha], len(answer.prompt_ids))


def cross_agreement(target: Backend, draft: Backend, answer: Answer) -> Agreement:
    """Greedy agreement per target token for a draft of another vocabulary, through text."""
    prompt = draft.encode_prompt(answer.prompt_text, chat=True)
    data = answer.text
    ids = draft.tokenize(data.decode("utf-8", errors="replace"), add_special=False)
    good = []
    for rows in forced_rows(draft, prompt, ids):
        good += [int(g) for g in np.argmax(rows, axis=1)]
    right = [g == t for g, t in zip(good, ids)]
    ends = np.cumsum([len(draft.token_bytes(t)) for t in ids])
    agree, pos = [], 0
    for tid in answer.ids:
        piece = b"" if target.is_special(tid) else target.token_bytes(tid)
        if not piece:
            agree.append(False)  # an end token: drafts stop before it
            continue
        first = int(np.searchsorted(ends, pos, side="right"))  # draft token holding byte pos
        last = int(np.searchsorted(ends, pos + len(piece) - 1, side="right"))
        agree.append(all(right[first : last + 1]) and last < len(right))
        pos += len(piece)
    return Agreement(agree, None, len(answer.prompt_ids))


def _softmax(logits: np.ndarray, temperature: float) -> np.ndarray:
    z = logits.astype(np.float64) / max(temperature, 1e-6)
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


# ---------------------------------------------------------------- replaying a run


@dataclass(frozen=True)
class SimStep:
    position: int  # answer tokens before this step
    drafted: int
    accepted: int


def simulate(agree: Sequence[bool], k: int) -> list[SimStep]:
    """Greedy speculative decoding of the answer at draft length k, replayed: each step drafts
    up to k tokens (fewer where the answer ends), keeps the agreeing prefix and adds the
    target's own token."""
    steps, pos, n = [], 0, len(agree)
    while pos < n:
        drafted = min(k, n - pos - 1)
        accepted = 0
        while accepted < drafted and agree[pos + accepted]:
            accepted += 1
        steps.append(SimStep(pos, drafted, accepted))
        pos += accepted + 1
    return steps


def acceptance_by_position(agreements: Sequence[Agreement], k_max: int) -> list[float | None]:
    """Conditional acceptance of draft position i (1-based) given positions before it were
    accepted, over every starting point: what `cost.expected_tokens` takes."""
    reached, kept = [0] * k_max, [0] * k_max
    for a in agreements:
        for start in range(len(a.agree)):
            for i in range(k_max):
                if start + i >= len(a.agree):
                    break
                reached[i] += 1
                if not a.agree[start + i]:
                    break
                kept[i] += 1
    return [kept[i] / reached[i] if reached[i] else None for i in range(k_max)]


def time_forwards(backend: Backend, prefix: Sequence[int], largest: int,
                  repeats: int = 5) -> list[float]:
    """Milliseconds a verification-like step (every row's logits) of 1..largest tokens after
    `prefix` costs in a decoding loop (the profile's way: `step_costs`); sizes interleaved so
    machine noise hits them all alike."""
    backend.reset()
    backend.forward(list(prefix))
    filler = (list(prefix) * (largest // len(prefix) + 1))[:largest]
    times: dict[int, list[float]] = {n: [] for n in range(1, largest + 1)}
    settled: list[float] = []
    for n in times:  # untimed: the first call of a shape pays for setting it up
        time_forward(backend, filler[:n], len(prefix))
    for _ in range(repeats):
        for n in times:
            times[n].append(time_in_loop(backend, filler[:n], len(prefix), settled))
    backend.reset()
    costs = step_costs(times, settled)
    return [costs[n] for n in times]
