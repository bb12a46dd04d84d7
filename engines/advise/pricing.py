"""What a step costs on this machine now, for every candidate alike.

The target's stored cost profile says how a forward's cost grows with the rows and the
context; it is scaled, row count by row count, to forwards timed now after the first prompt
(as `specviz pair` does: a shared machine is seldom as idle as when the profile was taken, and
one row, which mostly reads weights, and a batch, which mostly computes, drift apart). A
step's work besides the forward is the median the target's plain answers measured.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..backends.base import Backend
from ..cost import profile as prof
from ..cost.profile import Profile, step_costs, time_forward, time_in_loop
from ..cost.profile_plan import FIRST_RUN_S
from ..cost.step_cost import break_even_acceptance, first_k_reaching
from ..pair.acceptance import Answer

TIMED_ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16)  # K up to 8 each, longer drafts sampled
REPEATS = 5  # of each forward timed now
PROFILE_REPEATS = 3  # a missing profile measured as a lane's auto K measures it
# A draft that would not gain this much over a plain step even if this share of its tokens
# held is not worth its teacher-forced pass (auto K's own test before it explores a draft).
OPTIMISTIC_ACCEPT, MIN_GAIN = 0.9, 0.05


@dataclass(frozen=True)
class Costs:
    """Milliseconds of a step here: `scales[rows]` is the live forward over the profiled one,
    for the row counts given (interpolated between them, the last beyond)."""

    profile: Profile
    scales: dict[int, float] = field(default_factory=lambda: {1: 1.0})
    other_ms: float = 0.0  # a step's work besides the forward

    def scale(self, rows: int) -> float:
        sizes = sorted(self.scales)
        if rows <= sizes[0]:
            return self.scales[sizes[0]]
        if rows >= sizes[-1]:
            return self.scales[sizes[-1]]
        i = bisect.bisect_right(sizes, rows) - 1
        lo, hi = sizes[i], sizes[i + 1]
        return self.scales[lo] + (self.scales[hi] - self.scales[lo]) * (rows - lo) / (hi - lo)

    def verify_ms(self, rows: int, context: int) -> float:
        return self.scale(rows) * self.profile.cost_ms(rows, context)

    def plain_ms(self, context: int) -> float:
        return self.verify_ms(1, context) + self.other_ms

    def step_ms(self, drafted: int, context: int, draft_ms: float = 0.0) -> float:
        return self.verify_ms(drafted + 1, context) + self.other_ms + draft_ms

    def break_even(self, k: int, context: int, draft_ms: float = 0.0) -> float | None:
        """The constant acceptance at which draft length k (drafting costing `draft_ms`) just
        matches plain decoding; None where even every token held would not."""
        if k < 1:
            return None
        alpha = break_even_acceptance(k, self.step_ms(k, context, draft_ms)
                                      / self.plain_ms(context))
        return None if alpha is None else round(alpha, 4)

    def cannot_pay(self, per_token_ms: Callable[[int], float], context: int,
                   k_max: int) -> bool:
        """Whether no K up to k_max would gain MIN_GAIN even with OPTIMISTIC_ACCEPT per
        token, drafting k tokens costing per_token_ms(k)."""
        rate = (1 + MIN_GAIN) / self.plain_ms(context)
        return first_k_reaching([OPTIMISTIC_ACCEPT] * k_max,
                                lambda k: self.step_ms(k, context, per_token_ms(k)),
                                k_max, rate) == 0


DRIFT = 2.0  # batches timed now this many times dearer or cheaper than the profile says


def drift_line(costs: Costs, name: str) -> str:
    """One line where batches timed now are far from the stored profile, against one row
    (auto K prices with the stored profile, so a lane would choose from a wrong shape), else
    ""."""
    one = costs.scale(1)
    ratio = costs.scale(max(costs.scales)) / one if one > 0 else 1.0
    if 1 / DRIFT <= ratio <= DRIFT:
        return ""
    return (f"the cost profile of {name} is far from forwards timed now (a batch costs "
            f"{ratio:.2f}x what it says, against one row); `specviz profile --target {name} "
            "--refresh` measures it again (auto K, here and in a lane, prices with the stored "
            "one)")


def live_costs(target: Backend, profile: Profile, answers: Sequence[Answer],
               rows: Sequence[int] = TIMED_ROWS, repeats: int = REPEATS) -> Costs:
    """The profile scaled to forwards of `rows` tokens timed now after the first prompt (sizes
    interleaved, so machine noise hits them all alike). Scaled per cost regime, as auto K
    scales it (one row, which mostly reads weights; a batch, which mostly computes), each by
    the median ratio over its sizes: on a busy machine one timing preempted (a 2-row forward
    of 8 s among ones of 50 ms) would otherwise make its size look free or ruinous."""
    prefix = answers[0].prompt_ids
    rows = [n for n in rows if len(prefix) + n < target.n_ctx] or [1]
    filler = (list(prefix) * (rows[-1] // len(prefix) + 1))[: rows[-1]]
    target.reset()
    target.forward(list(prefix))
    for n in rows:  # untimed: the first call of a shape pays for setting it up
        time_forward(target, filler[:n], len(prefix))
    times: dict[int, list[float]] = {n: [] for n in rows}
    settled: list[float] = []
    for _ in range(repeats):
        for n in rows:
            times[n].append(time_in_loop(target, filler[:n], len(prefix), settled))
    target.reset()
    live = step_costs(times, settled)
    ratio = {n: live[n] / max(profile.cost_ms(n, len(prefix)), 1e-9) for n in rows}
    scales = {1: ratio[1]}
    if len(rows) > 1:
        scales[2] = statistics.median(ratio[n] for n in rows if n > 1)
    other = statistics.median([ms for a in answers for ms in a.other_ms] or [0.0])
    return Costs(profile, scales, other)


def target_profile(target: Backend, name: str, threads: int | None,
                   say: Callable[[str], None]) -> tuple[Profile, str]:
    """The target's stored cost profile, or one measured now (with progress) and stored; and
    a line saying which. Measured rather than assumed: without one the cost model would take
    batches as free, as on a GPU, and promise a CPU speedups it never gives."""
    stored, problem = prof.read(name, target.name, target.device, threads, target.dtype,
                                target.profile_variant)
    if stored is not None and stored.fits(target):
        return stored, f"the stored {target.name}/{target.device} profile"
    why = (f"the stored one is not usable: {problem}" if problem else
           "the stored one was measured with other products" if stored else "none stored")
    say(f"measuring the cost profile of {name} ({why}; what {FIRST_RUN_S:.0f} s hold here, "
        "once)")
    measured = prof.measure(target, name, threads, repeats=PROFILE_REPEATS,
                            on_progress=prof.progress_lines(f"cost profile of {name}", say),
                            budget_s=FIRST_RUN_S)
    prof.keep(measured, say)
    return measured, f"a {target.name}/{target.device} profile measured now"
