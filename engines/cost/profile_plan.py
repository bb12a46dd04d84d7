"""How much of a cost profile a first run can time: sized to the model and the machine.

A whole profile (3 contexts, 13 batch sizes, 3 repeats) took 10-35 s for smollm2 on 2 cores,
minutes for the 1.5B and beside other work, and a first run waited for all of it before its
first token. What a forward pass costs here, timed once for one token and once for a batch,
decides how much is timed at first: the plan gives up, in this order, a third repeat, the
longer contexts, a second repeat, then the batches wider than a chain's (24 and 32, then 12
and 16: trees' widths, priced along the last segment meanwhile), then 4, 6, 7 and 8 (priced
between their neighbours), until it fits the budget. One token's, 2, 3, 5 and 9 rows at the
shortest context stay. A profile missing some
is young: the engine's idle moments time them (profile_complete.py), and auto K scales
whatever it has by the run's own steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# What a first run waits for its profile, timing only (the model's load and the prompt come on
# top): the quick start's first token within 10 s of the model being on disk.
FIRST_RUN_S = 5.0
SETTLE = 2  # one-token forwards before every timing and after every batch (profile_measure)
# Batch sizes given up last, widest first: tree oracles' widths, seldom a chain's; then every
# other size up to 9 (priced between its neighbours until idle time times it).
WIDE = ((24, 32), (12, 16), (4, 6, 7, 8))


@dataclass(frozen=True)
class Plan:
    contexts: list[int]
    batches: list[int]
    repeats: int

    def young(self, contexts: Sequence[int], batches: Sequence[int]) -> bool:
        """Whether it leaves some of these contexts or batch sizes to be timed later."""
        return self.contexts != list(contexts) or self.batches != list(batches)


def seconds(contexts: Sequence[int], batches: Sequence[int], repeats: int, one_ms: float,
            big_ms: float, widest: int | None = None) -> float:
    """About how long timing these sizes takes: each batch costed on the line through one
    token's forward and a batch of `widest` (the largest of `batches` unless given), the
    settling one-token steps, an untimed first pass of every size and the context's fill per
    context at the largest batch's rate (the context's own cost left out: it is small
    beside the weights for these batch sizes)."""
    step = (big_ms - one_ms) / max((widest or batches[-1]) - 1, 1)
    passes = sum(one_ms + step * (b - 1) for b in batches)
    settling = SETTLE * one_ms * (2 * len(batches) - 1)  # before each timing, after each batch
    fill = sum((one_ms + step * (batches[-1] - 1)) * c / batches[-1] for c in contexts)
    return (fill + len(contexts) * (passes + repeats * (passes + settling))) / 1000.0


def fit(contexts: Sequence[int], batches: Sequence[int], repeats: int, one_ms: float,
        big_ms: float, budget_s: float) -> Plan:
    """The most of these sizes that times within `budget_s` (the least there is, where
    nothing fits: the shortest context, batches of 1, 2, 3, 5 and 9, one repeat)."""
    plan = Plan(list(contexts), list(batches), repeats)
    for smaller in _smaller(plan):
        if seconds(plan.contexts, plan.batches, plan.repeats, one_ms, big_ms,
                   batches[-1]) <= budget_s:
            return plan
        plan = smaller
    return plan


def _smaller(plan: Plan):
    """Ever smaller plans, each yielded after the one before it is tried."""
    if plan.repeats > 2:
        yield (plan := Plan(plan.contexts, plan.batches, 2))
    while len(plan.contexts) > 1:
        yield (plan := Plan(plan.contexts[:-1], plan.batches, plan.repeats))
    if plan.repeats > 1:
        yield (plan := Plan(plan.contexts, plan.batches, 1))
    for sizes in WIDE:
        if any(b in plan.batches for b in sizes):
            yield (plan := Plan(plan.contexts, [b for b in plan.batches if b not in sizes],
                                plan.repeats))
    yield plan
