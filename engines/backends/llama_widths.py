"""Fixed batch widths for llama.cpp: a draft's verification padded to a few widths (opt-in).

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

Off unless asked for: on an H200 (smollm2-135m, code edits and prose, auto K) padded and
unpadded runs gave the same ratios within a run's noise (docs/results/gpu.md). Auto K drafts
on 4-6% of steps there, so drafts seldom follow drafts: the switch that costs is between a
one-token step and a draft, which padding drafts alone leaves in place.

`SPECVIZ_LLAMA_PAD`: "off" (the default), "on" (the widths below), or widths ("8,16,33").
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ENV = "SPECVIZ_LLAMA_PAD"
WIDTHS = (8, 16, 33)


def widths_for(environ: Mapping[str, str] = os.environ) -> tuple[int, ...]:
    """The padded widths asked for; () where batches keep their own width."""
    setting = environ.get(ENV, "off").strip().lower() or "off"
    if setting == "off":
        return ()
    if setting == "on":
        return WIDTHS
    try:
        widths = tuple(sorted({int(w) for w in setting.split(",") if w.strip()}))
    except ValueError:
        raise ValueError(f"{ENV}={setting!r}: give on, off or widths such as 8,16,33") \
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


def profile_variant(backend: str, environ: Mapping[str, str] = os.environ) -> str:
    """A backend's profile_variant before it is loaded (the window's curves, `profile`)."""
    return variant(widths_for(environ)) if backend == "llama" else ""
