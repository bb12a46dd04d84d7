"""Times given to what reads the clock, for tests whose verdict rests on those times.

A test whose verdict rests on a profile being measured and stored (reused by the next run,
shown by `specviz profile`) would otherwise depend on how busy the machine running it is: a
profile timed while other work had the cores is not stored at once (engines/cost/profile.py).
`profile_measure.time_forward` is the one place a profile's samples are read from the clock;
here the forward still runs on the model, and takes the time a quiet machine would give it.

Auto K reads the clock twice: each step's timing (the session's, learnt in `observe`) and each
oracle lookup (its own `clock`). Which K it picks and why it declined follow from them: beside
busy processes a lookup that was 1% of a step looked dear, and auto K stopped asking the
oracle ("idle") where a quiet machine said "no-match".
"""

from __future__ import annotations

import dataclasses
import itertools

from specviz.engines import events as ev
from specviz.engines.cost import profile_measure as measuring
from specviz.engines.cost.auto_k import AutoK, sent_rows


def steady_forwards(monkeypatch, one_ms: float = 2.0, row_ms: float = 0.5) -> None:
    """Each forward of n tokens takes one_ms, row_ms more for every further row, and a little
    more the longer the context (so contexts differ as they do on a real machine)."""
    real = measuring.time_forward

    def timed(backend, tokens, ctx):
        real(backend, tokens, ctx)
        return one_ms + row_ms * (len(tokens) - 1) + ctx / 1000

    monkeypatch.setattr(measuring, "time_forward", timed)


def steady_auto_k(policy: AutoK, lookup_ms: float = 0.001, other_ms: float = 0.1) -> AutoK:
    """The policy learns each step as its profiles price it (the rows verified, the tokens
    drafted, `other_ms` besides) and each oracle lookup as taking `lookup_ms`; the steps still
    run on the model, and the events keep the times they took."""
    ticks = itertools.count()
    policy.clock = lambda: next(ticks) * lookup_ms / 1000  # read before and after a lookup
    observe = policy.observe

    def steadily(event: ev.StepEvent) -> None:
        drafted = len(event.proposed)
        draft_ms = (drafted * policy.draft_profile.cost_ms(1, event.position)
                    if policy.draft_profile is not None else 0.0)
        verify_ms = policy.profile.cost_ms(sent_rows(event), event.position)
        observe(dataclasses.replace(event, timing=ev.Timing(draft_ms, verify_ms, other_ms)))

    policy.observe = steadily
    return policy


def jittered_session_clock(monkeypatch, tick_ms: float = 4.0, spread: float = 0.3,
                           seed: int = 0) -> None:
    """The session's clock (engines/loop/session.py, where each step's timing is read) moves
    on `tick_ms` times a seeded random factor within 1 ± `spread` at every reading: lanes doing
    the same work take the same times but for noise as large as a busy machine's, and the
    same noise on any machine. The steps still run on the model."""
    import random
    import types

    from specviz.engines.loop import session

    draw = random.Random(seed)
    now = [0.0]

    def perf_counter() -> float:
        now[0] += tick_ms / 1000 * (1 + spread * (2 * draw.random() - 1))
        return now[0]

    monkeypatch.setattr(session, "time", types.SimpleNamespace(perf_counter=perf_counter))
