"""A race of N streams without a model: trace headers and batch steps, a speculating lane
that keeps 2 of 3 guesses a step (3 tokens a step) and a plain one (1 token a step)."""

from __future__ import annotations

from step_factory import make_step

from specviz.engines import events as ev
from specviz.engines.loop.streams import BatchStep, StreamsSummary


def header(oracle: str, n: int, pass_ms: list[float] | None = None) -> dict:
    return {"oracle": oracle, "prompt": "p0", "prompt_text": "p0",
            "streams": {"n": n, "prompts": [f"p{i}" for i in range(n)],
                        "prompt_texts": [f"p{i}" for i in range(n)], "pass_ms": pass_ms,
                        "widest": len(pass_ms) if pass_ms else None}}


def guesses(kept: int, k: int = 3) -> tuple[ev.ProposedToken, ...]:
    return tuple(ev.ProposedToken(10 + j, f"g{j}", "prompt", j < kept) for j in range(k))


def batch(index: int, n: int, plain: bool, ms: float) -> BatchStep:
    """Step `index` of every stream: speculating, 3 tokens each; plain, 1 each."""
    per = 1 if plain else 3
    steps = tuple((s, make_step(index, k=0 if plain else 3, tokens=(index + 1) * per,
                                oracle="none" if plain else "prompt-lookup",
                                proposed=() if plain else guesses(2), text=f"s{s}t{index}"))
                  for s in range(n))
    return BatchStep(index, steps, n * (1 if plain else 4), ev.Timing(0.0, ms, 0.0))


def summary(steps: list[BatchStep]) -> StreamsSummary:
    n = len(steps[-1].steps)
    ends = tuple(ev.SummaryEvent(e.oracle, "max-tokens", f"text{s}", e.totals, 1.0, 2.0)
                 for s, e in steps[-1].steps)
    return StreamsSummary(ends, len(steps), sum(b.timing.total_ms for b in steps), 1.0, 2.0,
                          (0.0,) * n)
