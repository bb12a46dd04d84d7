"""A cost profile's data: what one forward pass of n tokens costs at a given context length,
as measured (profile_measure.py) and stored (profile_store.py), priced by interpolation
between the measured sizes and contexts, and printed as a table."""

from __future__ import annotations

import bisect
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from ..backends.base import Backend
from ..errors import SpecvizError
from . import profile_shape

# Every size up to 9 (K up to 8): llama.cpp's CPU kernels take rows in blocks, so single sizes
# sit off the line through their neighbours (on a 2-core EPYC the 0.5B's 5th token costs 0.9 of
# one token and its 4th and 6th 0.2; the 1.5B's 8th 1.1-1.6), and which ones varies with the
# machine and the model (benchmarks/llama_batch_limit.py, docs/results/cost-profile.md).
BATCHES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 32)
CONTEXTS = (128, 512, 1024)
REPEATS = 5
# 2: every batch size up to 9; 3: each batch priced as a loop meets it, the switch back to
# one-token steps included (an older profile is measured again).
PROFILE_VERSION = 3


@dataclass
class Profile:
    """Median forward milliseconds, `ms[i][j]` for `contexts[i]` and `batches[j]`."""

    model: str
    backend: str
    device: str
    threads: int | None
    contexts: list[int]
    batches: list[int]
    ms: list[list[float]]
    repeats: int = REPEATS
    created: float = field(default_factory=time.time)
    machine: dict = field(default_factory=dict)
    version: int = PROFILE_VERSION
    small_rows: list[int] = field(default_factory=list)  # the backend's routed row counts
    dtype: str | None = None  # what the products computed in (None: float32, or llama.cpp's)
    variant: str = ""  # the backend's profile_variant: steps that cost otherwise (padded)
    busy: str = ""  # why it was kept as measured on a busy machine, smoothed ("": quiet)
    # Timed within a first run's budget (profile_plan.py): fewer contexts, sizes or repeats
    # than a whole profile; idle moments and later runs complete it.
    young: bool = False
    # A busy one's table as timed, before smoothing: the next busy measurement takes each
    # cell's cheaper time of the two (other work only adds time), not a smoothed guess's.
    timed: list[list[float]] = field(default_factory=list)
    # The thread count it was timed at where the free cores allowed fewer than `threads`.
    timed_threads: int | None = None

    def fits(self, backend: Backend) -> bool:
        """Whether it was measured with the products `backend` computes now (in its dtype; on
        a CPU the transformers backend routes small ones its own way, which changes the
        profile's shape: see backends/small_rows.py)."""
        return (self.small_rows == routed_rows(backend)
                and dtype_key(self.dtype) == dtype_key(backend.dtype)
                and self.variant == backend.profile_variant)

    def cost_ms(self, n_tokens: int, context: int) -> float:
        """Forward time of `n_tokens` at `context` tokens already cached, interpolated.

        Linear in the batch size between measured sizes and in the context between measured
        lengths (clamped at the ends; past the largest batch, extrapolated along the last
        segment). A measured dip is kept: where kernels take rows in blocks a bigger batch can
        cost less than a smaller one (16 tokens against 12 on a 2-core EPYC), and is then the
        cheaper draft.
        """
        return max(0.0, _interp(self.batches, self._row_at(context), n_tokens))

    def costs_ms(self, widths: Sequence[int], context: int) -> list[float]:
        """`cost_ms` of each of `widths`, at once (a batch's auto K prices every width up to
        the widest each step it asks)."""
        top = self.batches[-1]
        if len(self.batches) == 1 or max(widths, default=0) > top:
            return [self.cost_ms(w, context) for w in widths]
        ms = np.interp(np.asarray(widths, dtype=float), self.batches, self._row_at(context))
        return np.maximum(ms, 0.0).tolist()

    def _row_at(self, context: int) -> list[float]:
        """Every batch's cost at this context (bilinear interpolation, the context first:
        the same figures), kept for the last context asked: auto K prices every K of a
        step at one context, and a declined step must cost what a plain one does. The
        context moves on every step, so each segment between measured contexts is kept
        ready to interpolate along."""
        cached = self.__dict__.get("_row")
        if cached is None or cached[0] is not self.ms or cached[1] != context:
            x0, width, low, rise = self._segment(context)
            row = low if not width else [y + d * (context - x0) / width
                                         for y, d in zip(low, rise)]
            cached = self.__dict__["_row"] = (self.ms, context, row)
        return cached[2]

    def _segment(self, context: int) -> tuple[int, int, list[float], list[float]]:
        """(its first context, its width, its first row, each batch's rise along it): the
        measured contexts' segment that `context` falls in; width 0 where it is clamped to
        the first or last measured row."""
        xs = self.contexts
        if len(xs) == 1 or context <= xs[0]:
            i, clamped = 0, True
        elif context >= xs[-1]:
            i, clamped = len(xs) - 1, True
        else:
            i, clamped = bisect.bisect_right(xs, context) - 1, False
        key = (i, clamped)
        segments = self.__dict__.get("_segments")
        if segments is None or segments[0] is not self.ms:  # a table replaced: anew
            segments = self.__dict__["_segments"] = (self.ms, {})
        kept = segments[1]
        if key not in kept:
            if clamped:
                kept[key] = (xs[i], 0, list(self.ms[i]), [])
            else:
                low, high = self.ms[i], self.ms[i + 1]
                kept[key] = (xs[i], xs[i + 1] - xs[i], list(low),
                             [b - a for a, b in zip(low, high)])
        return kept[key]

    def relative(self, n_tokens: int, context: int) -> float:
        """Cost of n tokens over the cost of one token at the same context."""
        one = self.cost_ms(1, context)
        return self.cost_ms(n_tokens, context) / one if one > 0 else float("inf")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Profile:
        """The profile `data` holds; SpecvizError saying what is wrong where its shape, types
        or values are not a profile's (profile_shape.py)."""
        wrong = profile_shape.problem(data, PROFILE_VERSION)
        if wrong:
            raise SpecvizError(f"not a cost profile: {wrong}")
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def routed_rows(backend: Backend) -> list[int]:
    """The row counts whose products `backend` routes (none, for most backends)."""
    return sorted(getattr(backend, "small_rows", ()))


def dtype_key(dtype: str | None) -> str:
    """What a profile's products computed in, None read as float32 (how older profiles say it)."""
    return dtype or "float32"


def table(profile: Profile) -> str:
    """A text table: one row per batch size, ms and cost relative to one token per context."""
    head = ["tokens"] + [f"ctx {c}: ms (x1)" for c in profile.contexts]
    rows = [head]
    for j, b in enumerate(profile.batches):
        cells = [str(b)]
        for i, _ in enumerate(profile.contexts):
            one = profile.ms[i][0] if profile.batches[0] == 1 else None
            rel = f" ({profile.ms[i][j] / one:.2f}x)" if one else ""
            cells.append(f"{profile.ms[i][j]:.1f}{rel}")
        rows.append(cells)
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    text = "\n".join("  ".join(cell.rjust(w) for cell, w in zip(r, widths)) for r in rows)
    return text + (f"\nmeasured on a busy machine, its noisy cells smoothed ({profile.busy}); "
                   "--refresh on a quiet one replaces it" if profile.busy else "")


# ---------------------------------------------------------------- interpolation


def _interp(xs: Sequence[int], ys: Sequence[float], x: float, extrapolate: bool = True) -> float:
    if len(xs) == 1:
        return ys[0] * (x / xs[0] if extrapolate and x > xs[0] else 1.0)
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1] and not extrapolate:
        return ys[-1]
    i = min(max(bisect.bisect_right(xs, x) - 1, 0), len(xs) - 2)
    x0, x1, y0, y1 = xs[i], xs[i + 1], ys[i], ys[i + 1]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
