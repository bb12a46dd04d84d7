"""Checked values of the numeric options: argparse `type=` functions that every command
taking the option shares, so a value out of range is one line (exit 2) before any model is
loaded or llama.cpp sees it. NaN passes every comparison, hence the finite checks."""

from __future__ import annotations

import argparse
import math
import secrets
from collections.abc import Callable

SEED_MAX = 2**32 - 1  # llama.cpp's seeds are 32-bit
RANDOM_SEED = -1  # as in llama.cpp: draw one (recorded in the trace and the JSON result)
AUTO_THREADS = "auto"


def _value(text: str, kind: type, wanted: str, fits: Callable[[float], bool] = lambda _: True):
    """`text` read as `kind`, finite and `fits`; else argparse's one-line refusal."""
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or not fits(value):
        raise argparse.ArgumentTypeError(f"takes {wanted}, got {text!r}")
    return value


def whole_at_least(low: int) -> Callable[[str], int]:
    """A whole number of at least `low` (a max token count, a repeat count)."""
    def check(text: str) -> int:
        return _value(text, int, f"a whole number of at least {low}", lambda v: v >= low)

    check.__name__ = f"whole_at_least_{low}"
    return check


positive = whole_at_least(1)


def streams(text: str) -> int:
    """A stream count: 1 to 16 prompts decoded at once (the batch cache's limit)."""
    return _value(text, int, "a whole number from 1 to 16", lambda v: 1 <= v <= 16)


def temperature(text: str) -> float:
    return _value(text, float, "a finite number of at least 0 (0: greedy)", lambda v: v >= 0)


def top_p(text: str) -> float:
    return _value(text, float, "a number above 0 and at most 1", lambda v: 0 < v <= 1)


def non_negative(text: str) -> float:
    """A finite number of at least 0 (typical acceptance's epsilon and alpha)."""
    return _value(text, float, "a finite number of at least 0", lambda v: v >= 0)


def threads(text: str) -> int | None:
    """CPU threads, or auto (None: every core, the default)."""
    if text.strip().lower() == AUTO_THREADS:
        return None
    return _value(text, int, "a whole number of at least 1, or auto (every core)",
                  lambda v: v >= 1)


def n_ctx(text: str) -> int:
    """The context's length in tokens; 0 is llama.cpp's "as long as the model was trained
    for". Whether the prompt fits is checked once it is tokenized, before anything decodes."""
    return _value(text, int, "a whole number of tokens, 0 or more (0: the model's own length)",
                  lambda v: v >= 0)


def seed(text: str) -> int:
    """0..2^32-1, or -1 for a random seed, drawn here so the run can be repeated with it."""
    value = _value(text, int, f"a whole number from 0 to {SEED_MAX}, or {RANDOM_SEED} for a "
                   "random one", lambda v: v == RANDOM_SEED or 0 <= v <= SEED_MAX)
    return secrets.randbelow(SEED_MAX + 1) if value == RANDOM_SEED else value
