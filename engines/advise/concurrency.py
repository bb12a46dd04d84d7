"""At how many streams at once a candidate stops paying, from its own single-stream figures.

A batch of N streams verifies every stream's pending token and guesses in one pass: N x w
rows where one stream sends w (its guesses and its own token), against N rows for plain
decoding of the same streams (engines/bench/concurrency.py measures it). Each stream still
drafts on its own. Anchored at the candidate's predicted single-stream speedup s1 (so one
stream reads as the table does): a step of one stream costs m x plain(1) / s1, of which
verify(w) is the pass and the rest its drafting and bookkeeping; at N streams
speedup(N) = m x plain(N) / (verify(N x w) + other + N x drafting).
"""

from __future__ import annotations

from collections.abc import Sequence

from .pricing import Costs

STREAMS = (1, 2, 4, 8, 16)


def speedups(costs: Costs, context: int, speedup_one: float, tokens_per_step: float,
             rows_per_step: float, streams: Sequence[int] = STREAMS) -> dict[int, float]:
    """Predicted speedup over plain decoding of as many streams, at each count."""
    if speedup_one <= 0:
        return {n: 0.0 for n in streams}
    step_one = tokens_per_step * costs.plain_ms(context) / speedup_one
    drafting = max(0.0, step_one - costs.verify_ms(round(rows_per_step), context)
                   - costs.other_ms)
    out = {}
    for n in streams:
        plain = costs.verify_ms(n, context) + costs.other_ms
        spec = costs.verify_ms(round(n * rows_per_step), context) + costs.other_ms + n * drafting
        out[n] = tokens_per_step * plain / spec
    return out


def stops_paying_at(by_streams: dict[int, float], pays: float) -> int | None:
    """The fewest streams whose speedup falls below `pays` (None: it pays at every count)."""
    return next((n for n in sorted(by_streams) if by_streams[n] < pays), None)
