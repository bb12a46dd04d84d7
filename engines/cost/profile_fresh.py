"""A stored cost profile held against the steps a run really took.

A profile timed while other work had the cores is slow all over; where the work was even
(a build, an install) its shape passes the busy rule (profile_noise.py), and it is stored
as a quiet one. Auto K scales it by what each run's steps cost, but it never learns what a
batch it does not send would cost: with batches priced at a busy machine's dearest, it keeps
K near 0 on every later run (the quick start on a 2-core Xeon: mean K 0.3 and 1.05x with a
profile timed during a build, mean K 1.8-2.1 and 1.06-1.32x with one timed quietly).

Other work only ever adds time: a run whose one-token steps cost far less than the profile
says at their contexts shows the profile was timed on a busier machine. It is marked stale,
and the next run measures it again. "Far": a quiet profile's one-token cells at longer
contexts, timed on a freshly filled cache, already run above what a run's steps take there
(live steps at 0.6-1.0x of a quiet profile on a 2-core Xeon, 0.41-0.55x of one timed during
a build): only half or less condemns a profile, so a quiet one is never measured again
for nothing; one timed beside heavier work than a build is caught every time.
"""

from __future__ import annotations

# Live one-token steps at this share of the profile's price at their contexts, or less, over
# at least MIN_STEPS steps, condemn it.
STALE_SHARE = 0.5
MIN_STEPS = 32


def slower_than_run(profiled_ms: float, share: float, seen: int) -> str:
    """In words, why a profile is stale whose one-token step costs `profiled_ms` where a
    run's `seen` one-token steps took `share` of what it says; "" where it holds."""
    if seen < MIN_STEPS or share > STALE_SHARE:
        return ""
    return (f"it was timed while the machine was busier than now (a one-token step took "
            f"{profiled_ms:.1f} ms then, {profiled_ms * share:.1f} ms in this run)")


def stale_note(policy) -> str | None:
    """Marks the target's stored profile stale where a run of `policy` (an AutoK) shows it
    was timed on a busier machine, and says so in one line; None otherwise (or where the
    stored file is another measurement by now, or cannot be written)."""
    from .profile_store import mark_stale

    share, seen = policy.scale_at.get(1, (1.0, 0))
    live_ms, _ = policy.one_token_ms
    profile = policy.profile
    why = slower_than_run(live_ms / share if share > 0 else 0.0, share, seen)
    if not why or not mark_stale(profile, why):
        return None
    return (f"the cost profile of {profile.model} is measured again at the next run: {why}, "
            "so it priced drafts too dear for auto K")
