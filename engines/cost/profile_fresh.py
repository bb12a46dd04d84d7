"""A stored cost profile held against the steps a run really took.

A profile timed while other work had the cores is slow all over; where the work was even
(a build, an install) its shape passes the busy rule (profile_noise.py), and it is stored
as a quiet one. Auto K scales it by what each run's steps cost, but it never learns what a
batch it does not send would cost: with batches priced at a busy machine's dearest, it keeps
K near 0 on every later run (the quick start on a 2-core Xeon: mean K 0.3 and 1.05x with a
profile timed during a build, mean K 1.8-2.1 and 1.08-1.32x with one timed quietly). Other
work only ever adds time, so a run whose one-token steps are much faster than the profile
says shows the profile was timed on a busier machine: it is marked stale, and the next run
measures it again.
"""

from __future__ import annotations

# One-token steps this many times faster than the profile says (quiet runs stay within
# 0.9-1.1x of a quiet profile), over at least this many steps, condemn it.
STALE_RATIO = 1.5
MIN_STEPS = 32


def slower_than_run(one_ms_profiled: float, scale: float, seen: int) -> str:
    """In words, why a profile whose one-token steps cost `one_ms_profiled` is stale, given
    that a run's `seen` one-token steps took `scale` times that; "" where it holds."""
    if seen < MIN_STEPS or scale * STALE_RATIO > 1:
        return ""
    return (f"it was timed while the machine was busier than now (a one-token step took "
            f"{one_ms_profiled:.1f} ms then, {one_ms_profiled * scale:.1f} ms in this run)")


def stale_note(policy) -> str | None:
    """Marks the target's stored profile stale where a run of `policy` (an AutoK) shows it
    was timed on a busier machine, and says so in one line; None otherwise (or where the
    stored file is another measurement by now, or cannot be written)."""
    from .profile_store import mark_stale

    scale, seen = policy.scale_at.get(1, (1.0, 0))
    profile = policy.profile
    why = slower_than_run(profile.cost_ms(1, policy.context_len), scale, seen)
    if not why or not mark_stale(profile, why):
        return None
    return (f"the cost profile of {profile.model} is measured again at the next run: {why}, "
            "so it priced drafts too dear for auto K")
