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


def _parsed(text: str, kind: type, wanted: str) -> float | int:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes {wanted}, got {text!r}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"takes {wanted}, got {text!r}")
    return value


def whole_at_least(low: int) -> Callable[[str], int]:
    """A whole number of at least `low` (a max token count, a repeat count)."""
    wanted = f"a whole number of at least {low}"

    def check(text: str) -> int:
        value = _parsed(text, int, wanted)
        if value < low:
            raise argparse.ArgumentTypeError(f"takes {wanted}, got {text!r}")
        return value

    check.__name__ = f"whole_at_least_{low}"
    return check


positive = whole_at_least(1)


def temperature(text: str) -> float:
    wanted = "a finite number of at least 0 (0: greedy)"
    value = _parsed(text, float, wanted)
    if value < 0:
        raise argparse.ArgumentTypeError(f"takes {wanted}, got {text!r}")
    return value


def top_p(text: str) -> float:
    wanted = "a number above 0 and at most 1"
    value = _parsed(text, float, wanted)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"takes {wanted}, got {text!r}")
    return value


def non_negative(text: str) -> float:
    """A finite number of at least 0 (typical acceptance's epsilon and alpha)."""
    wanted = "a finite number of at least 0"
    value = _parsed(text, float, wanted)
    if value < 0:
        raise argparse.ArgumentTypeError(f"takes {wanted}, got {text!r}")
    return value


def threads(text: str) -> int | None:
    """CPU threads, or auto (None: every core, the default)."""
    if text.strip().lower() == AUTO_THREADS:
        return None
    wanted = "a whole number of at least 1, or auto (every core)"
    value = _parsed(text, int, wanted)
    if value < 1:
        raise argparse.ArgumentTypeError(f"takes {wanted}, got {text!r}")
    return value


def n_ctx(text: str) -> int:
    """The context's length in tokens; 0 is llama.cpp's "as long as the model was trained
    for". Whether the prompt fits is checked once it is tokenized, before anything decodes."""
    wanted = "a whole number of tokens, 0 or more (0: the model's own length)"
    value = _parsed(text, int, wanted)
    if value < 0:
        raise argparse.ArgumentTypeError(f"takes {wanted}, got {text!r}")
    return value


def seed(text: str) -> int:
    """0..2^32-1, or -1 for a random seed, drawn here so the run can be repeated with it."""
    wanted = f"a whole number from 0 to {SEED_MAX}, or {RANDOM_SEED} for a random one"
    value = _parsed(text, int, wanted)
    if value == RANDOM_SEED:
        return secrets.randbelow(SEED_MAX + 1)
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"takes {wanted}, got {text!r}")
    return value
