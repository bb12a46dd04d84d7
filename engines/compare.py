"""Is a speculative run's output identical to plain decoding? And if not, why not?

Greedy speculative decoding is lossless in exact arithmetic. A backend whose batched forward
pass rounds differently from its one-token forward pass (llama.cpp's CPU kernels do) can
flip an argmax where the top two logits nearly tie, and the texts part from there. This is
reported with the logit margins at the point of divergence, never hidden.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import events as ev

# A flip below this top-1/top-2 logit margin is what float rounding between batch shapes
# can cause; a larger one would point to a real bug.
NEAR_TIE = 0.1


@dataclass(frozen=True)
class Comparison:
    identical: bool
    tokens_compared: int
    first_difference: int | None = None  # index into the generated tokens
    margin: float | None = None  # plain decoding's top-1/top-2 logit margin there
    note: str = ""

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None and v != ""}


def emitted(steps: Sequence[ev.StepEvent]) -> list[int]:
    return [t for s in steps for t in s.emitted_ids]


def compare(spec: Sequence[ev.StepEvent], plain: Sequence[ev.StepEvent]) -> Comparison:
    """Compare token by token over the length both runs produced."""
    a, b = emitted(spec), emitted(plain)
    n = min(len(a), len(b))
    first = next((i for i in range(n) if a[i] != b[i]), None)
    if first is None:
        return Comparison(True, n)
    margin = _plain_margin(plain, first)
    if margin is not None and margin < NEAR_TIE:
        note = (f"outputs part at generated token {first}, where plain decoding's top two "
                f"logits were {margin:.4f} apart: a near-tie that the batched verification "
                "forward pass rounded the other way (backend numerics, not a verification bug)")
    else:
        note = (f"outputs part at generated token {first} with a clear margin "
                f"({margin if margin is not None else float('nan'):.3f}): not a rounding tie")
    return Comparison(False, n, first, margin, note)


def _plain_margin(plain: Sequence[ev.StepEvent], index: int) -> float | None:
    """Plain decoding emits one target token per step, so step i made token i."""
    return plain[index].target.margin if index < len(plain) else None
