"""Measuring a cost profile: forward passes of every batch size at every context length,
each timed as a decoding loop meets it, repeated and reduced to its median; batch sizes are
interleaved within every repetition so that machine noise hits them all alike, and a row
timed while other work took the cores is timed once more."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

from ..backends.base import Backend, sync_device
from ..errors import SpecvizError
from ..machine import cpu_load
from .profile_data import BATCHES, CONTEXTS, REPEATS, Profile, routed_rows
from .profile_noise import uneven
from .profile_plan import fit, seconds

# One-token forwards before every timing, and timed after every batch. llama.cpp builds its
# graph again when the batch's shape changes, and on CUDA replays a captured graph only after
# two calls of one shape: on an H200 a settled one-token step verified in 1.06 ms, the two
# after a batch in 2.8 and 2.1, so a batch costs its own forward and the dearer steps after it.
SETTLE = 2

# Filler for the context: code-like text, since code editing is where lookup oracles shine.
# The token ids do not change the cost of a forward pass; only how many there are does.
_FILLER = (
    "def scale(values, factor):\n    result = []\n    for v in values:\n"
    "        result.append(v * factor)\n    return result\n\n"
)


def measure(
    backend: Backend,
    model: str,
    threads: int | None = None,
    batches: Sequence[int] = BATCHES,
    contexts: Sequence[int] = CONTEXTS,
    repeats: int = REPEATS,
    on_progress: Callable[[int, int], None] | None = None,
    budget_s: float | None = None,
) -> Profile:
    """Time forward passes of every batch size at every context length on `backend`; with
    `budget_s`, only as much of that as this machine times within it (profile_plan.py): a
    young profile, which later runs' steps and idle moments complete.

    A whole profile is timed at the thread count it is named for. A first run's is timed at
    the threads the cores free now allow: beside a busy process two llama.cpp threads wait
    on each other at every operation (a batch of 2 took 2.6 s where one thread takes 20 ms),
    and the profile took half a minute. It is then marked busy, and quieter runs refine it."""
    batches, usable = _sizes(backend, batches, contexts)
    young, held, busy = False, None, ""
    if budget_s is not None:
        held, busy = _free_threads(backend)
    with backend.holding_threads(held):
        filled = budget_s is not None  # the probe leaves the first context in the cache
        if filled:
            one, big = _probe(backend, batches[-1], usable[0])
            plan = fit(usable, batches, repeats, one, big, budget_s)
            young = plan.young(usable, batches)
            usable, batches, repeats = plan.contexts, plan.batches, plan.repeats
        filler = filler_tokens(backend, usable[-1] + max(batches[-1], PROBE_ROWS))
        count = Count(len(usable) * repeats * len(batches), on_progress)
        table = _table(backend, filler, usable, batches, repeats, count, again=not filled,
                       filled=filled)
    backend.reset()
    from ..trace import machine_info

    return Profile(model, backend.name, backend.device, threads, usable, batches, table,
                   repeats, machine=machine_info(),
                   small_rows=routed_rows(backend), dtype=backend.dtype,
                   variant=backend.profile_variant, busy=busy, young=young,
                   timed_threads=held)


def _free_threads(backend: Backend) -> tuple[int | None, str]:
    """The threads the cores free now allow (None: the nominal count), and why fewer."""
    nominal = backend.nominal_threads
    if not nominal or nominal < 2:
        return None, ""
    free = cpu_load.start_threads(nominal)
    if free >= nominal:
        return None, ""
    return free, f"timed on {free} of {nominal} threads: other work had the other cores"


def _sizes(backend: Backend, batches: Sequence[int], contexts: Sequence[int]
           ) -> tuple[list[int], list[int]]:
    """The batch sizes (one token's among them) and the contexts that fit the model."""
    batches = sorted({int(b) for b in batches})
    if not batches or batches[0] < 1:
        raise SpecvizError("batch sizes must be positive")
    usable = [c for c in sorted({int(c) for c in contexts}) if c + batches[-1] <= backend.n_ctx]
    if not usable:
        raise SpecvizError(
            f"no context length of a cost profile fits: the model's context holds "
            f"{backend.n_ctx} tokens, the largest batch is {batches[-1]} (give a larger "
            f"--n-ctx, or a fixed --k)"
        )
    return sorted({1, *batches}), usable  # a batch's switch back is priced in one-token steps


PROBE_ROWS = 9  # the batch the plan is priced from; wider ones on the line through it


def _probe(backend: Backend, largest: int, start: int | None = None) -> tuple[float, float]:
    """One token's forward and the largest batch's, priced from one token's and a batch of
    PROBE_ROWS timed now, as the machine is now (the line through them prices a wider batch
    dearer than it is: forwards grow slower than their rows, so a plan errs short). At
    `start` cached tokens, left in the cache for the first row; else at 64, cache emptied."""
    rows = min(largest, PROBE_ROWS)
    ctx = start or min(64, max(backend.n_ctx - rows, 1))
    filler = filler_tokens(backend, ctx + rows)
    backend.reset()
    backend.forward(filler[:ctx])
    for _ in range(2):  # the first call of each shape sets it up: the second is timed
        one = time_forward(backend, filler[ctx : ctx + 1], ctx)
        batch = time_forward(backend, filler[ctx:], ctx)
    if start is None:
        backend.reset()
    if rows <= 1:
        return one, batch
    return one, one + (batch - one) * (largest - 1) / (rows - 1)


def _table(backend: Backend, filler: list[int], usable: list[int], batches: list[int],
           repeats: int, count: Count, again: bool = True, filled: bool = False
           ) -> list[list[float]]:
    """Every context's row; `filled`: the cache holds the first context's tokens already."""
    table = [time_row(backend, filler, ctx, batches, repeats, count, filled and i == 0)
             for i, ctx in enumerate(usable)]
    for i, ctx in enumerate(usable):  # a row timed while other work took the cores: once more
        if again and uneven([ctx], batches, [table[i]]):
            count.total += repeats * len(batches)
            table[i] = time_row(backend, filler, ctx, batches, repeats, count)
    return table


class Count:
    """Forwards timed so far, out of `total` (which grows where a row is timed again)."""

    def __init__(self, total: int, on_progress: Callable[[int, int], None] | None) -> None:
        self.total, self.done, self.on_progress = total, 0, on_progress

    def tick(self) -> None:
        self.done += 1
        if self.on_progress:
            self.on_progress(self.done, self.total)


def time_row(backend: Backend, filler: list[int], ctx: int, batches: list[int], repeats: int,
             count: Count, filled: bool = False) -> list[float]:
    """Each batch's cost at `ctx` cached tokens, as a decoding loop meets it (`filled`: the
    cache holds `filler[:ctx]` already)."""
    if not filled:
        backend.reset()
        backend.forward(filler[:ctx])
    for b in batches:  # untimed: first calls of a batch shape pay for setting it up
        time_forward(backend, filler[ctx : ctx + b], ctx)
    times: dict[int, list[float]] = {b: [] for b in batches}
    settled: list[float] = []
    for _ in range(repeats):
        for b in batches:
            times[b].append(time_in_loop(backend, filler[ctx : ctx + b], ctx, settled))
            count.tick()
    costs = step_costs(times, settled)
    return [round(costs[b], 3) for b in batches]


def progress_lines(what: str, say: Callable[[str], None], every_s: float = 3.0,
                   clock: Callable[[], float] = time.monotonic) -> Callable[[int, int], None]:
    """A `measure` progress callback that says "what: 40%, about 20 s left" at most every
    `every_s` seconds (a status line in the window, a line on the console for `run`)."""
    began = clock()
    last = [began]

    def report(done: int, total: int) -> None:
        now = clock()
        if now - last[0] < every_s or done >= total:
            return
        last[0] = now
        say(f"{what}: {done / total:.0%}{time_left(now - began, done, total)}")

    return report


def time_left(elapsed_s: float, done: int, total: int) -> str:
    """", about 40 s left" at the rate so far; nothing until there is a rate to go by."""
    if done < 2 or done >= total or elapsed_s <= 0:
        return ""
    left = elapsed_s / done * (total - done)
    return f", about {left:.0f} s left" if left < 90 else f", about {left / 60:.0f} min left"


def estimate_seconds(backend: Backend, batches: Sequence[int] = BATCHES,
                     contexts: Sequence[int] = CONTEXTS, repeats: int = REPEATS) -> float:
    """About how long `measure` would take here (profile_plan.seconds, priced from one
    forward of one token and one of the largest batch timed now)."""
    batches, usable = _sizes(backend, batches, contexts)
    one, big = _probe(backend, batches[-1])
    return seconds(usable, batches, repeats, one, big)


def time_forward(backend: Backend, tokens: list[int], ctx: int) -> float:
    """Milliseconds of one verification-like forward (logits for every row), then roll back."""
    t0 = time.perf_counter()
    backend.forward(tokens, "all")
    sync_device(backend)
    elapsed = (time.perf_counter() - t0) * 1000.0
    backend.truncate(ctx)
    return elapsed


def time_in_loop(backend: Backend, tokens: list[int], ctx: int,
                 settled: list[float] | None = None) -> float:
    """Milliseconds of a forward of `tokens` met as a decoding loop meets it: after one-token
    steps, and for a batch with the SETTLE one-token steps after it (`step_costs` takes off
    what those would have cost anyway). The settling steps' own times go to `settled`."""
    one = tokens[:1]
    for _ in range(SETTLE):
        ms = time_forward(backend, one, ctx)
        if settled is not None:
            settled.append(ms)
    ms = time_forward(backend, tokens, ctx)
    if len(tokens) > 1:
        ms += sum(time_forward(backend, one, ctx) for _ in range(SETTLE))
    return ms


def step_costs(times: dict[int, list[float]], settled: Sequence[float] = ()) -> dict[int, float]:
    """Each size's median `time_in_loop`, less the settled one-token steps a batch's sample
    holds: what a step of that size adds to a loop of one-token steps. One token's price is
    the median of every settled one-token step (a few slow samples on a launch-bound GPU
    cannot move it), and no batch is priced below it (a batch runs at least one token's
    forward)."""
    one = statistics.median([*times[1], *settled])
    return {n: one if n == 1 else max(statistics.median(t) - SETTLE * one, one)
            for n, t in times.items()}


def filler_tokens(backend: Backend, n: int) -> list[int]:
    piece = backend.tokenize(_FILLER, add_special=False) or [0]
    return (piece * (n // len(piece) + 1))[:n]
