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
from .profile_store import read, store

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
    profile as stored, or None where nothing was missing, `busy()` turned true, or the
    stored file is another measurement by now. The stored one is grown, not `profile`: a
    run's steps may have refined its table since."""
    profile = _still_stored(profile)
    todo = missing(profile, backend.n_ctx) if profile is not None else []
    if not todo:
        return None
    ctx = todo[0]

    def tick(_done: int, _total: int) -> None:
        if busy():
            raise Interrupted

    filler = filler_tokens(backend, ctx + max(profile.batches))
    count = Count(ROW_REPEATS * len(profile.batches), tick)
    try:  # at the count its first rows were timed at: one profile, one thread count
        with backend.holding_threads(profile.timed_threads):
            row = time_row(backend, filler, ctx, list(profile.batches), ROW_REPEATS, count)
    except Interrupted:
        return None
    finally:
        backend.reset()
    contexts = sorted([*profile.contexts, ctx])
    at = contexts.index(ctx)
    grown = replace(profile, contexts=contexts, ms=_with_row(profile.ms, at, row),
                    timed=_with_row(profile.timed, at, row) if profile.timed else [],
                    young=len(todo) > 1)
    return store(grown)[1]


def _with_row(table: list[list[float]], at: int, row: list[float]) -> list[list[float]]:
    out = [list(r) for r in table]
    out.insert(at, row)
    return out


def _still_stored(profile: Profile) -> Profile | None:
    """The stored file's profile where it is still this measurement (refined or not)."""
    stored, _ = read(profile.model, profile.backend, profile.device, profile.threads,
                     profile.dtype, profile.variant)
    return stored if stored is not None and stored.created == profile.created else None
