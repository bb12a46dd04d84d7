"""Whether a trained head can pay anywhere: its held-out depth-1 acceptance against a floor.

Verifying one drafted token beside the target's own costs more than a plain step on every
machine: about 1.1 plain steps at best (a GPU; the transformers backend on a CPU with small
products routed), 1.6-1.9 through llama.cpp on a 2-core CPU (docs/results/cost-profile.md). A head
whose first guess holds less often than that extra tenth returns less than the verification
costs at any K, so it cannot pay anywhere: such a head is reported, and not made the
model's default head.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..errors import SpecvizError

FLOOR = 0.10  # the least extra cost of a 2-token verification over one token (a GPU's)


def depth1(accuracy: Mapping) -> float | None:
    """Held-out depth-1 acceptance from an EAGLE head's (`acceptance`) or Medusa heads'
    (`top1` of the first head) accuracy figures; None where neither is recorded."""
    for key in ("acceptance", "top1"):
        values = accuracy.get(key) if accuracy else None
        if values:
            return float(values[0])
    return None


def will_not_pay(accuracy: Mapping) -> str:
    """Why the head cannot pay ("" when it may, or when no figure was recorded, as for a
    published head)."""
    a = depth1(accuracy)
    if a is None or a >= FLOOR:
        return ""
    return (f"this head will not pay: its first guess held {a:.1%} of the time on held-out "
            f"answers, below the {FLOOR:.0%} a 2-token verification costs over one even on a GPU")


def refuse_weak_default(accuracy: Mapping, folder: Path, hint: str, flag: str) -> None:
    """A head that will not pay is used only where a person names it (an older specviz saved
    such heads as the model's own)."""
    why = will_not_pay(accuracy)
    if why:
        raise SpecvizError(f"the head in {folder} is the model's, but {why}; {hint}, or use "
                           f"it anyway with {flag} {folder}")
