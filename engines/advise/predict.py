"""A candidate's cells from replays: auto K and every fixed K on each kind's answers, the
better policy kept per kind, and the one policy best over every kind together."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from .concurrency import speedups, stops_paying_at
from .pricing import Costs
from .replay import K_MAX, Drafter, Record, Tally, replay
from .report import ALL, PAYS, Cell

FIXED_KS = (1, 2, 3, 4, 6, 8, 12, 16)
Progress = Callable[[str], None]


def predict(records: Mapping[str, Sequence[Record]], make: Callable[[], Drafter], costs: Costs,
            ks: Sequence[int] = FIXED_KS, auto: bool = True,
            draft_ms: Callable[[int], float] = lambda k: 0.0,
            eos_ids: frozenset[int] = frozenset()) -> dict[str, Cell]:
    """Cells by kind and ALL. Each kind is replayed on its own (a lane given only such
    prompts); `draft_ms(k)` is what drafting k tokens costs, for the break-even acceptance;
    drafts stop before `eos_ids`."""
    policies: list[int | None] = [*([None] if auto else []), *(k for k in ks if k <= K_MAX)]
    by_kind = {kind: {p: replay(recs, make, costs, p, eos_ids=eos_ids) for p in policies}
               for kind, recs in records.items() if recs}
    cells = {kind: cell(t, costs, draft_ms) for kind, t in by_kind.items()}
    if by_kind:
        cells[ALL] = cell({p: merged([t[p] for t in by_kind.values()]) for p in policies},
                          costs, draft_ms)
    return cells


NOISE = 0.01  # a fixed K must beat auto K by this share: lookups are timed, so both wobble


def cell(tallies: Mapping[int | None, Tally], costs: Costs,
         draft_ms: Callable[[int], float] = lambda k: 0.0) -> Cell:
    """The better of auto K (key None) and the best fixed K (0 where no fixed K drafted
    anything); a tie goes to the smaller K, and to auto K, what a lane runs by default."""
    fixed = {k: t for k, t in tallies.items() if k is not None and t.drafted}
    best_k = max(fixed, key=lambda k: (fixed[k].speedup, -k)) if fixed else 0
    best = fixed.get(best_k)
    auto = tallies.get(None)
    if auto is not None and (best is None or auto.speedup >= best.speedup * (1 - NOISE)):
        chosen, policy = auto, "auto"
    elif best is not None:
        chosen, policy = best, f"K={best_k}"
    else:  # auto K not replayed, and no fixed K drafted anything: plain decoding's figures
        chosen, policy = next(iter(tallies.values())), "K=0"
    context = chosen.mean_context
    rows = 1 + (chosen.drafted / chosen.steps if chosen.steps else 0.0)
    return Cell(speedup=round(chosen.speedup, 4), policy=policy, best_k=best_k,
                auto_speedup=None if auto is None else round(auto.speedup, 4),
                fixed_speedup=round(best.speedup, 4) if best else 1.0,
                acceptance=None if chosen.acceptance is None else round(chosen.acceptance, 4),
                tokens_per_step=round(chosen.tokens_per_step, 4),
                break_even=costs.break_even(best_k, context, draft_ms(best_k)) if best_k else None,
                tokens=chosen.tokens, rows_per_step=round(rows, 4),
                stops_paying_at=stops_paying_at(speedups(costs, context, chosen.speedup,
                                                         chosen.tokens_per_step, rows), PAYS))


def merged(tallies: Sequence[Tally]) -> Tally:
    """Several replays' totals as one."""
    out = Tally()
    for t in tallies:
        out.plain_ms += t.plain_ms
        out.spent_ms += t.spent_ms
        out.steps += t.steps
        out.tokens += t.tokens
        out.drafted += t.drafted
        out.accepted += t.accepted
        out.k_sum += t.k_sum
        out.contexts += t.contexts
    return out
