"""Several prompts in one model's cache, advanced together: a batch of streams.

A stream is one token sequence with cache cells and positions of its own. One `forward` is
one batched pass over every stream it names (llama.cpp: a sequence id per stream in one
batch; transformers: a cache row per stream, the tokens padded to the widest), so N streams
cost one pass of their tokens together, not N passes. Streams that end leave the batch and
free their cells (continuous batching). The streams share the cache's cells: what they hold
together must fit `n_ctx`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import ContextOverflow

MAX_STREAMS = 16


class StreamCache(ABC):
    """`n_streams` token sequences in one cache; stream i is numbered i."""

    def __init__(self, n_streams: int, n_ctx: int) -> None:
        if not 1 <= n_streams <= MAX_STREAMS:
            raise ValueError(f"streams must be between 1 and {MAX_STREAMS}, got {n_streams}")
        self.n_streams = n_streams
        self.n_ctx = n_ctx  # cells the streams share
        self._lengths = [0] * n_streams

    def length(self, stream: int) -> int:
        """Tokens stream `stream` holds in the cache."""
        return self._lengths[stream]

    @property
    def held(self) -> int:
        """Cells every stream together holds."""
        return sum(self._lengths)

    def forward(self, parts: Mapping[int, Sequence[int]], rows: str = "all"
                ) -> dict[int, np.ndarray]:
        """Append each stream's tokens in one batched pass; return each stream's logits: a
        row per token ("all": a verification) or its last token's ("last": a prompt)."""
        parts = {s: list(t) for s, t in parts.items() if t}
        if not parts:
            raise ValueError("forward() needs at least one stream with tokens")
        if rows not in ("all", "last"):
            raise ValueError(f"bad logits request {rows!r}")
        new = sum(len(t) for t in parts.values())
        if self.held + new > self.n_ctx:
            raise ContextOverflow(f"context full: the streams hold {self.held} tokens and "
                                  f"{new} more exceed the context of {self.n_ctx}")
        out = self._forward(parts, rows == "all")
        for s, tokens in parts.items():
            self._lengths[s] += len(tokens)
        return out

    def truncate(self, stream: int, n: int) -> None:
        """Roll stream `stream` back to its first `n` tokens."""
        if n < self._lengths[stream]:
            self._truncate(stream, n)
            self._lengths[stream] = n

    def drop(self, stream: int) -> None:
        """The stream leaves the batch: its cells are freed for the others."""
        self.truncate(stream, 0)

    @abstractmethod
    def _forward(self, parts: dict[int, list[int]], all_rows: bool) -> dict[int, np.ndarray]:
        ...

    @abstractmethod
    def _truncate(self, stream: int, n: int) -> None: ...

    def close(self) -> None:
        """Free what the batch holds (idempotent)."""


def batch_rows(parts: Mapping[int, Sequence[int]], lengths: Sequence[int], all_rows: bool
               ) -> list[tuple[int, int, int, bool]]:
    """The batch in order: (stream, token, position, logits wanted) for every new token."""
    out = []
    for s, tokens in parts.items():
        last = len(tokens) - 1
        out += [(s, tok, lengths[s] + i, all_rows or i == last) for i, tok in enumerate(tokens)]
    return out


def streams_that_fit(needs: Sequence[int], n_ctx: int) -> int:
    """How many of the streams, in order, fit a context of `n_ctx` cells together."""
    total, fit = 0, 0
    for need in needs:
        total += need
        if total > n_ctx:
            break
        fit += 1
    return fit
