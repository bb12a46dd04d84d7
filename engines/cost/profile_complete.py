"""A young profile completed in idle moments: one missing context at a time, never in a run's way.

A first run times only what fits its budget (profile_plan.py). The rest is timed while the
engine has nothing to do (the window between races), one context's row at a time, and given
up the moment work arrives: a row half-timed is thrown away, the profile stays as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..backends.base import Backend
from .profile_data import BATCHES, CONTEXTS, Profile
from .profile_measure import Count, filler_tokens, time_row
from .profile_store import read, store

ROW_REPEATS = 2  # an idle row is timed twice over and takes each size's median


class Interrupted(Exception):
    """Work arrived while a row was being timed."""


def missing(profile: Profile, n_ctx: int) -> list[int]:
    """The whole profile's contexts this one lacks that fit the model's context (its first
    context too, while batch sizes were given up: its row is timed again with all of them)."""
    batches = _all_batches(profile)
    if batches != list(profile.batches):
        return profile.contexts[:1]
    return _more(profile.contexts, batches[-1], n_ctx)


def _all_batches(profile: Profile) -> list[int]:
    """The whole profile's batch sizes, or the profile's own where it has more rows (a row
    timed again must keep every size the others have)."""
    if len(profile.contexts) > 1:
        return list(profile.batches)
    return sorted({*BATCHES, *profile.batches})


def complete_one(backend: Backend, profile: Profile, busy: Callable[[], bool]
                 ) -> Profile | None:
    """Time the next context `profile` lacks on `backend` (or its one row again with the
    batch sizes it gave up), add the row and store it; the profile as stored, or None where
    nothing was missing, `busy()` turned true, or the stored file is another measurement by
    now. The stored one is grown, not `profile`: a run's steps may have refined it since."""
    profile = _still_stored(profile)
    todo = missing(profile, backend.n_ctx) if profile is not None else []
    if not todo:
        return None
    ctx, batches = todo[0], _all_batches(profile)

    def tick(_done: int, _total: int) -> None:
        if busy():
            raise Interrupted

    filler = filler_tokens(backend, ctx + batches[-1])
    count = Count(ROW_REPEATS * len(batches), tick)
    try:  # at the count its first rows were timed at: one profile, one thread count
        with backend.holding_threads(profile.timed_threads):
            row = time_row(backend, filler, ctx, batches, ROW_REPEATS, count)
    except Interrupted:
        return None
    finally:
        backend.reset()
    if batches != list(profile.batches):  # its one row, now with every size
        grown = replace(profile, batches=batches, ms=[row], timed=[],
                        busy=profile.busy if profile.timed_threads else "",
                        young=bool(_more(profile.contexts, batches[-1], backend.n_ctx)))
        return store(grown)[1]
    contexts = sorted([*profile.contexts, ctx])
    at = contexts.index(ctx)
    grown = replace(profile, contexts=contexts, ms=_with_row(profile.ms, at, row),
                    timed=_with_row(profile.timed, at, row) if profile.timed else [],
                    young=len(todo) > 1)
    return store(grown)[1]


def _more(contexts: list[int], largest: int, n_ctx: int) -> list[int]:
    return [c for c in CONTEXTS if c not in contexts and c + largest <= n_ctx]


def _with_row(table: list[list[float]], at: int, row: list[float]) -> list[list[float]]:
    out = [list(r) for r in table]
    out.insert(at, row)
    return out


def _still_stored(profile: Profile) -> Profile | None:
    """The stored file's profile where it is still this measurement (refined or not)."""
    stored, _ = read(profile.model, profile.backend, profile.device, profile.threads,
                     profile.dtype, profile.variant)
    return stored if stored is not None and stored.created == profile.created else None
