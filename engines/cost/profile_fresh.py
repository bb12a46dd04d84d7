"""A stored cost profile held against the steps a run really took, and refined by them.

A profile timed while other work had the cores is slow all over; where the work was even
(a build, an install) its shape passes the busy rule (profile_noise.py), and it is stored
as a quiet one. Auto K scales it by what each run's steps cost, but it never learns what a
batch it does not send would cost: with batches priced at a busy machine's dearest, it keeps
K near 0 on every later run (the quick start on a 2-core Xeon: mean K 0.3 and 1.05x with a
profile timed during a build, mean K 1.8-2.1 and 1.06-1.32x with one timed quietly).

Other work only ever adds time: a run whose one-token steps cost far less than the profile
says at their contexts shows the profile was timed on a busier machine. Its stored table is
then scaled down by what the run's steps cost (batches by the run's batches where it sent
enough of them, else as its one-token steps), never up, and nothing is measured again: a run
never waits for a profile twice. "Far": a quiet profile's one-token cells at longer
contexts, timed on a freshly filled cache, already run above what a run's steps take there
(live steps at 0.6-1.0x of a quiet profile on a 2-core Xeon, 0.41-0.55x of one timed during
a build): only half or less moves a quiet one; one stored as busy moves at BUSY_SHARE.
"""

from __future__ import annotations

# Live one-token steps at this share of the profile's price at their contexts, or less, over
# at least MIN_STEPS steps, refine it; BUSY_SHARE for a profile stored as timed beside work.
STALE_SHARE = 0.5
BUSY_SHARE = 0.85
MIN_STEPS = 32
MIN_BATCHES = 8  # a run's batches that scale the profile's batches (fewer: as one-token steps)


def slower_than_run(profiled_ms: float, share: float, seen: int, busy: bool = False) -> str:
    """In words, why a profile is refined whose one-token step costs `profiled_ms` where a
    run's `seen` one-token steps took `share` of what it says; "" where it holds."""
    if seen < MIN_STEPS or share > (BUSY_SHARE if busy else STALE_SHARE):
        return ""
    return (f"it was timed while the machine was busier than now (a one-token step took "
            f"{profiled_ms:.1f} ms then, {profiled_ms * share:.1f} ms in this run)")


def refined_table(ms: list[list[float]], batches: list[int], one: float, batch: float
                  ) -> list[list[float]]:
    """The table with one-token cells scaled by `one` and batches by `batch` (never up)."""
    return [[round(cost * min(one if b == 1 else batch, 1.0), 3)
             for b, cost in zip(batches, row)] for row in ms]


def stale_note(policy) -> str | None:
    """Refines the target's stored profile where a run of `policy` (an AutoK) shows it was
    timed on a busier machine, and says so in one line; None otherwise (or where the stored
    file is another measurement by now, or cannot be written)."""
    from .profile_store import refine

    share, seen = policy.scale_at.get(1, (1.0, 0))
    live_ms, _ = policy.one_token_ms
    profile = policy.profile
    why = slower_than_run(live_ms / share if share > 0 else 0.0, share, seen,
                          bool(profile.busy))
    if not why:
        return None
    batch, batches_seen = policy.scale_at.get(2, (share, 0))
    table = refined_table(profile.ms, profile.batches, share,
                          batch if batches_seen >= MIN_BATCHES else share)
    if not refine(profile, table):
        return None
    return (f"the cost profile of {profile.model} is refined by this run's steps: {why}, "
            "so it priced drafts too dear for auto K")
