"""Step events for tests that need a few without a model: one factory, sensible defaults."""

from __future__ import annotations

from specviz.engines import events as ev


def make_step(step: int = 0, k: int = 4, tokens: int | None = None, *,
              oracle: str = "prompt-lookup", proposed: tuple[ev.ProposedToken, ...] = (),
              text: str = "a", target: ev.TargetToken | None = None,
              timing: ev.Timing | None = None) -> ev.StepEvent:
    """Step `step` of a run at K = `k` that has emitted `tokens` tokens so far (default: one
    a step); totals count `proposed` as this step's only proposals."""
    accepted = sum(t.accepted for t in proposed)
    totals = ev.Totals(step + 1 if tokens is None else tokens, step + 1, len(proposed),
                       accepted, 1.0, 1.0, 1.0)
    return ev.StepEvent(step, oracle, k, step, proposed,
                        target or ev.TargetToken(1, text, ev.TARGET_BONUS, 1.0, 1.0), text,
                        timing or ev.Timing(1.0, 1.0, 1.0), totals)
