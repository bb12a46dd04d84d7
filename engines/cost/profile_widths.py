"""A batch of streams' widths added to a cost profile: passes wider than a single run sends.

One stream verifies at most K+1 tokens a pass (the profile's sizes go to 32); a batch of N
streams verifies every stream's pending token and guesses in one pass, N x (K+1) of them.
Batch auto K (batch_k.py) prices passes that wide, so the widths a batch needs are timed
once, at the profile's contexts, and stored with it: one run at N streams pays for them, the
next ones read them. A batch is given about WIDTH_PER_STREAM positions a stream at most (on a
CPU far fewer pay), so that is what is timed: at 16 streams passes up to 96 tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..backends.base import Backend
from .profile_data import Profile
from .profile_measure import Count, filler_tokens, time_row
from .profile_store import keep

WIDE = (48, 64, 96, 128, 160)  # past the profile's 32: on a CPU a pass's cost is near linear
WIDTH_PER_STREAM = 5  # a stream's pending token and four guesses, on average over the batch
REPEATS = 1  # each after an untimed pass of its width; the live passes scale them (batch_k)


def needed(profile: Profile, streams: int) -> list[int]:
    """The widths a batch of `streams` needs that the profile lacks: up to the first that
    covers WIDTH_PER_STREAM positions a stream."""
    want, widest = streams * WIDTH_PER_STREAM, max(profile.batches)
    todo = []
    for width in WIDE:
        if width > widest:
            todo.append(width)
        if width >= want:
            break
    return todo if want > widest else []


def widen(backend: Backend, profile: Profile, streams: int,
          say: Callable[[str], None] = lambda _: None) -> Profile:
    """`profile` with the widths a batch of `streams` needs timed on `backend` and stored
    (where it cannot be stored, used for this run and said so); as it was where it has them
    or where the model's context cannot hold them."""
    todo = needed(profile, streams)
    contexts = [c for c in profile.contexts if todo and c + todo[-1] <= backend.n_ctx]
    if not todo:
        return profile
    if len(contexts) < len(profile.contexts):
        say(f"a batch of {streams} streams is priced up to the cost profile's widest pass, "
            f"{max(profile.batches)} tokens: a pass of {todo[-1]} at "
            f"{profile.contexts[-1]} cached tokens would not fit the context of "
            f"{backend.n_ctx}")
        return profile
    say(f"timing passes of {', '.join(map(str, todo))} tokens for a batch of {streams} "
        f"streams at {len(contexts)} context length(s), once (stored with the cost profile)")
    count = Count(REPEATS * (1 + len(todo)) * len(contexts), None)
    rows = []
    try:
        with backend.holding_threads(profile.timed_threads):
            filler = filler_tokens(backend, contexts[-1] + todo[-1])
            # with one token: a wide pass is priced as a loop meets it, the switch back to
            # one-token steps taken out as the profile's own sizes are (profile_measure)
            rows = [time_row(backend, filler, ctx, [1, *todo], REPEATS, count)[1:]
                    for ctx in contexts]
    finally:
        backend.reset()
    wide = replace(profile, batches=[*profile.batches, *todo],
                   ms=[[*old, *new] for old, new in zip(profile.ms, rows)],
                   timed=[[*old, *new] for old, new in zip(profile.timed, rows)]
                   if profile.timed else [])
    keep(wide, say)
    return wide
