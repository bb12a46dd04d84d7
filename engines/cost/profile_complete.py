"""A young profile completed in idle moments: one missing context at a time, never in a run's way.

A first run times only what fits its budget (profile_plan.py). The rest is timed while the
engine has nothing to do (the window between races), one context's row at a time, and given
up the moment work arrives: a row half-timed is thrown away, the profile stays as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..backends.base import Backend
from .profile_data import CONTEXTS, Profile
from .profile_measure import Count, filler_tokens, time_row
from .profile_store import store

ROW_REPEATS = 2  # an idle row is timed twice over and takes each size's median


class Interrupted(Exception):
    """Work arrived while a row was being timed."""


def missing(profile: Profile, n_ctx: int) -> list[int]:
    """The whole profile's contexts this one lacks that fit the model's context."""
    largest = max(profile.batches)
    return [c for c in CONTEXTS if c not in profile.contexts and c + largest <= n_ctx]


def complete_one(backend: Backend, profile: Profile, busy: Callable[[], bool]
                 ) -> Profile | None:
    """Time the next context `profile` lacks on `backend`, add its row and store it; the
    profile as stored, or None where nothing was missing or `busy()` turned true."""
    todo = missing(profile, backend.n_ctx)
    if not todo:
        return None
    ctx = todo[0]

    def tick(_done: int, _total: int) -> None:
        if busy():
            raise Interrupted

    filler = filler_tokens(backend, ctx + max(profile.batches))
    count = Count(ROW_REPEATS * len(profile.batches), tick)
    try:
        with backend.holding_threads():
            row = time_row(backend, filler, ctx, list(profile.batches), ROW_REPEATS, count)
    except Interrupted:
        return None
    finally:
        backend.reset()
    contexts = sorted([*profile.contexts, ctx])
    at = contexts.index(ctx)
    ms = [list(r) for r in profile.ms]
    ms.insert(at, row)
    grown = replace(profile, contexts=contexts, ms=ms, young=len(todo) > 1)
    return store(grown)[1]
