"""Forward times given to the cost profile instead of read from the clock.

A test whose verdict rests on a profile being measured and stored (reused by the next run,
shown by `specviz profile`) would otherwise depend on how busy the machine running it is: a
profile timed while other work had the cores is not stored at once (engines/cost/profile.py).
`profile_measure.time_forward` is the one place a profile's samples are read from the clock;
here the forward still runs on the model, and takes the time a quiet machine would give it.
"""

from __future__ import annotations

from specviz.engines.cost import profile_measure as measuring


def steady_forwards(monkeypatch, one_ms: float = 2.0, row_ms: float = 0.5) -> None:
    """Each forward of n tokens takes one_ms, row_ms more for every further row, and a little
    more the longer the context (so contexts differ as they do on a real machine)."""
    real = measuring.time_forward

    def timed(backend, tokens, ctx):
        real(backend, tokens, ctx)
        return one_ms + row_ms * (len(tokens) - 1) + ctx / 1000

    monkeypatch.setattr(measuring, "time_forward", timed)
