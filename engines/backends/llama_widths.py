"""Fixed batch widths for llama.cpp on a GPU: a draft's verification padded to a few widths.

Why: on CUDA, llama.cpp builds its compute graph again whenever a batch's shape changes, and
ggml-cuda keys its captured CUDA graph by that graph: a changed shape resets the capture's
warm-up, which replays again only from the second call of one shape. Drafts of copying oracles
change length every step (a prompt-lookup match of 3, then 7, then 2), so every verification
paid a graph build and an uncaptured launch; on an H200 an isolated 7-token draft of
smollm2-135m cost about six settled one-token steps. Padded to a bucket (8, 16 or 33: K up to
32 and the target's own row), consecutive drafts share one shape and replay; one-token steps
keep theirs.

Padding is lossless: the pad rows come after the real ones, so no real row attends to them
(causal), and their cache cells are removed at once. Every row of a padded batch returns
logits, so the graph's outputs keep one shape too.

`SPECVIZ_LLAMA_PAD`: "auto" (the default: on a GPU, never on a CPU, where each pad row costs
its full compute), "on", "off", or widths ("8,16,33").
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ENV = "SPECVIZ_LLAMA_PAD"
WIDTHS = (8, 16, 33)


def widths_for(device: str, environ: Mapping[str, str] = os.environ) -> tuple[int, ...]:
    """The padded widths for a backend on `device`; () where batches keep their own width."""
    setting = environ.get(ENV, "auto").strip().lower() or "auto"
    if setting == "off":
        return ()
    if setting == "on":
        return WIDTHS
    if setting == "auto":
        return WIDTHS if device not in ("cpu", "") else ()
    try:
        widths = tuple(sorted({int(w) for w in setting.split(",") if w.strip()}))
    except ValueError:
        raise ValueError(f"{ENV}={setting!r}: give auto, on, off or widths such as 8,16,33") \
            from None
    if not widths or widths[0] < 2:
        raise ValueError(f"{ENV}={setting!r}: widths must be 2 or more")
    return widths


def padded_width(n_tokens: int, widths: tuple[int, ...], room: int) -> int:
    """The width a batch of `n_tokens` runs at: the smallest width that holds it, where the
    context has `room` cells left for it; 0 where it runs as it is (one token, a prompt wider
    than every width, or no room)."""
    if n_tokens < 2:
        return 0
    for width in widths:
        if width >= n_tokens:
            return width if width <= room else 0
    return 0


def variant(widths: tuple[int, ...]) -> str:
    """The cost profile's name for these widths ("" unpadded): padded steps cost otherwise."""
    return "pad" + "-".join(map(str, widths)) if widths else ""


def profile_variant(backend: str, device: str, environ: Mapping[str, str] = os.environ) -> str:
    """A backend's profile_variant before it is loaded (the window's curves, `profile`)."""
    return variant(widths_for(device, environ)) if backend == "llama" else ""
