"""Python's collector around model loads (no Qt).

A full collection walks every object the collector tracks. Loading smollm2 into transformers
makes about a million objects, so the collector walked the growing heap 18 times during the
load (3.6 s of its 12 on a 2-core CPU), and after it each full walk of the half million that
stay (torch, transformers, the model) took 0.2-0.3 s inside whichever step allocated next.
So a load runs with automatic collection paused, its garbage is collected once at the end,
and what is left, which lives as long as the model, is frozen: later walks skip it.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_loads = 0  # loads under way: nested or on two threads, the collector resumes after the last
_was_enabled = True  # restored as found: pyqtgraph's collector keeps it off in a Qt process


@contextmanager
def loading() -> Iterator[None]:
    """Around a model's load: automatic collection paused (restored as it was), then one
    collection and, after a load that succeeded, everything alive frozen. A failed load's
    half-built model (held by its traceback's cycle) is collected, not frozen."""
    global _loads, _was_enabled
    with _lock:
        if _loads == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _loads += 1
    loaded = False
    try:
        yield
        loaded = True
    finally:
        with _lock:
            _loads -= 1
            last = _loads == 0
            if last and _was_enabled:
                gc.enable()
        if last and loaded:
            collect_and_freeze()
        elif last:
            gc.collect()


def collect_and_freeze() -> None:
    """Collect what is garbage now, then move everything alive out of later walks."""
    gc.collect()
    gc.freeze()


def thaw() -> None:
    """A model was dropped: what was frozen is walked once, so that the dropped model's
    cycles, if it has any, are freed, and what is still alive is frozen again (the model
    kept for the next run, torch, the window)."""
    gc.unfreeze()
    collect_and_freeze()
