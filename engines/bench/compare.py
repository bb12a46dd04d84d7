"""Is a speculative run's output identical to plain decoding? And if not, why not?

Greedy speculative decoding is lossless in exact arithmetic. A backend whose batched forward
pass rounds differently from its one-token forward pass (llama.cpp's CPU kernels do) can
flip an argmax where the top two logits nearly tie, and the texts part from there. This is
reported with the logit margins at the point of divergence, never hidden.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import events as ev
from ..backends.base import Backend

# The least margin always treated as a tie (float32 rounding alone reaches ~1e-4). Quantised
# llama.cpp models round much more differently between batch shapes: `batch_noise` measures
# that on the model in hand, and a flip below the measured noise is explained by it.
NEAR_TIE = 0.01


@dataclass(frozen=True)
class Comparison:
    identical: bool
    tokens_compared: int
    first_difference: int | None = None  # index into the generated tokens
    margin: float | None = None  # plain decoding's top-1/top-2 logit margin there
    note: str = ""
    tie_threshold: float | None = None  # margins below this count as rounding ties

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None and v != ""}

    @property
    def near_tie(self) -> bool:
        """Parted where plain decoding's top two were closer than the backend's measured
        batched-vs-single noise: a rounding tie, not a change of method."""
        return (not self.identical and self.margin is not None
                and self.tie_threshold is not None and self.margin < self.tie_threshold)


def emitted(steps: Sequence[ev.StepEvent]) -> list[int]:
    return [t for s in steps for t in s.emitted_ids]


def compare(spec: Sequence[ev.StepEvent], plain: Sequence[ev.StepEvent],
            noise: float = 0.0) -> Comparison:
    """Compare token by token over the length both runs produced.

    `noise` is the backend's measured batched-vs-single logit difference (`batch_noise`).
    """
    a, b = emitted(spec), emitted(plain)
    n = min(len(a), len(b))
    first = next((i for i in range(n) if a[i] != b[i]), None)
    if first is None:
        return Comparison(True, n)
    margin = _plain_margin(plain, first)
    tie = max(NEAR_TIE, noise)
    if margin is not None and margin < tie:
        note = (f"outputs part at generated token {first}, where plain decoding's top two "
                f"logits were {margin:.4f} apart, less than the {tie:.4f} by which this "
                "backend's batched and one-token forward passes differ: a near-tie rounded "
                "the other way (backend numerics, not a verification bug)")
    else:
        note = (f"outputs part at generated token {first} with a margin of "
                f"{margin if margin is not None else float('nan'):.4f}, above the backend's "
                f"batch noise ({tie:.4f}): not explained by rounding")
    return Comparison(False, n, first, margin, note, tie)


def batch_noise(backend: Backend, ids: Sequence[int], width: int = 9) -> float:
    """Largest logit difference between one batched forward of `width` tokens and the same
    tokens fed one at a time, on the context `ids` (the backend is left empty)."""
    ids = list(ids)
    width = min(width, len(ids) - 1)
    backend.reset()
    backend.forward(ids[:-width])
    noise = _batch_noise_at(backend, ids, width)
    backend.reset()
    return noise


def _batch_noise_at(backend: Backend, ids: list[int], width: int) -> float:
    """`batch_noise` with the cache holding `ids[:-width]` already; left holding them."""
    batched = backend.forward(ids[-width:], "all")
    backend.truncate(len(ids) - width)
    single = np.concatenate([backend.forward([t]) for t in ids[-width:]])
    backend.truncate(len(ids) - width)
    return float(np.abs(batched - single).max())


def run_noise(backend: Backend, ids: Sequence[int]) -> float:
    """How far apart the logits of one context come out by the ways a speculative run can
    reach it: the batch noise of a 9-token verification and of a 33-token one (K = 32: on the
    transformers backend's compiled path, past its widest graph, run eagerly), and a token's
    logits after context that a batch wrote into the cache against context written a token at
    a time. A run meets all three; a probe of one batch alone missed what parted bfloat16
    outputs on a GPU (2026-11-27). The context is read once, up to where the widest probe
    starts, and each probe goes on from there (four reads of it had cost the quick start
    10 s after its text, where its texts parted at a near-tie)."""
    ids = list(ids)
    widths = [min(w, len(ids) - 1) for w in (9, 33)]
    history = min(8, len(ids) - 2)
    head = len(ids) - max(*widths, history + 1)
    backend.reset()
    backend.forward(ids[:head])
    noise = 0.0
    for width in widths:
        _extend(backend, ids[head:len(ids) - width])
        noise = max(noise, _batch_noise_at(backend, ids, width))
        backend.truncate(head)
    if history >= 2:
        noise = max(noise, _history_noise_at(backend, ids, head, history))
    backend.reset()
    return noise


def _extend(backend: Backend, tokens: list[int]) -> None:
    if tokens:
        backend.forward(tokens)


def _history_noise_at(backend: Backend, ids: list[int], head: int, width: int) -> float:
    """The last token's logits after `width` tokens the cache took as one batch, against after
    the same tokens taken one at a time; the cache holds `ids[:head]`, and is left so."""
    start = len(ids) - width - 1
    written, last = ids[start:-1], ids[-1]
    rows = []
    for batched in (True, False):
        backend.truncate(head)
        _extend(backend, ids[head:start])
        if batched:
            backend.forward(written, "all")
        else:
            for token in written:
                backend.forward([token])
        rows.append(backend.forward([last]))
    backend.truncate(head)
    return float(np.abs(rows[0] - rows[1]).max())


def streams_noise(backend: Backend, ids: Sequence[int], n_streams: int,
                  width: int = 9) -> float:
    """Largest logit difference between the last `width` tokens verified in one pass beside
    as many tokens of `n_streams` - 1 other streams and the same tokens verified alone, on
    the context `ids` (llama.cpp rounds a batch of several sequences by how their cells lie:
    logits on smollm2 up to 2.6 apart)."""
    ids = list(ids)
    width = min(width, len(ids) - 1)
    backend.reset()
    backend.forward(ids[:-width])
    alone = backend.forward(ids[-width:], "all")
    backend.reset()
    cache = backend.stream_cache(n_streams)
    try:
        for s in range(n_streams):
            cache.forward({s: ids[:-width]}, "last")
        rows = cache.forward({s: ids[-width:] for s in range(n_streams)})
    finally:
        cache.close()
    return max(float(np.abs(r - alone).max()) for r in rows.values())


def check_stream_against_plain(target: Backend, prompt_ids: Sequence[int],
                               spec: Sequence[ev.StepEvent], plain: Sequence[ev.StepEvent],
                               n_streams: int) -> Comparison:
    """`check_against_plain` for one stream of a batch of `n_streams`: a parting is measured
    against the noise of a verification among other streams' too."""
    result = compare(spec, plain)
    if result.identical or n_streams < 2:
        return result if result.identical else check_against_plain(target, prompt_ids, spec,
                                                                    plain)
    context = [*prompt_ids, *emitted(plain)[: result.first_difference + 1]]
    noise = max(run_noise(target, context), streams_noise(target, context, n_streams),
                streams_noise(target, context, n_streams, width=1))
    return compare(spec, plain, noise)


def _plain_margin(plain: Sequence[ev.StepEvent], index: int) -> float | None:
    """Plain decoding emits one target token per step, so step i made token i."""
    return plain[index].target.margin if index < len(plain) else None


def check_against_plain(target: Backend, prompt_ids: Sequence[int],
                        spec: Sequence[ev.StepEvent], plain: Sequence[ev.StepEvent]) -> Comparison:
    """`compare`, measuring the backend's batch noise where the outputs part (only then)."""
    result = compare(spec, plain)
    if result.identical:
        return result
    context = [*prompt_ids, *emitted(plain)[: result.first_difference + 1]]
    return compare(spec, plain, run_noise(target, context))
