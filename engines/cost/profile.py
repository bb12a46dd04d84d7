"""Hardware cost profile: what one forward pass of n tokens costs at a given context length.

Speculative decoding pays off only when verifying K+1 tokens at once costs little more than
one token. On a GPU that holds; on a CPU a batch of 4 can cost three times one token. The
profile measures it on the machine in hand: for a few context lengths, the forward time of
batches of 1..32 tokens, each repeated and reduced to its median. Batch sizes are interleaved
within every repetition so that machine noise hits them all alike.

Profiles are stored as JSON per model, backend, device and thread count in the cache
(`<cache>/profiles/`, beside `<cache>/models/`), and reused unless asked to measure again.
One timed while other work had the cores is measured again by the next runs, and stored at
the last of a few tries all the same, smoothed and marked busy (`save`, profile_noise.py).
"""

from __future__ import annotations

import bisect
import json
import os
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..atomic import cannot_write, write_text
from ..backends.base import Backend, sync_device
from ..errors import SpecvizError
from ..machine.hardware import compute_threads
from ..models import home_dir
from . import profile_shape
from .profile_noise import cheapest, smoothed
from .profile_noise import uneven as uneven  # the busy rule, read through this module too

Say = Callable[[str], None]

# Every size up to 9 (K up to 8): llama.cpp's CPU kernels take rows in blocks, so single sizes
# sit off the line through their neighbours (on a 2-core EPYC the 0.5B's 5th token costs 0.9 of
# one token and its 4th and 6th 0.2; the 1.5B's 8th 1.1-1.6), and which ones varies with the
# machine and the model (benchmarks/llama_batch_limit.py, docs/results/cost-profile.md).
BATCHES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 32)
CONTEXTS = (128, 512, 1024)
REPEATS = 5
# 2: every batch size up to 9; 3: each batch priced as a loop meets it, the switch back to
# one-token steps included (an older profile is measured again).
PROFILE_VERSION = 3
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


@dataclass
class Profile:
    """Median forward milliseconds, `ms[i][j]` for `contexts[i]` and `batches[j]`."""

    model: str
    backend: str
    device: str
    threads: int | None
    contexts: list[int]
    batches: list[int]
    ms: list[list[float]]
    repeats: int = REPEATS
    created: float = field(default_factory=time.time)
    machine: dict = field(default_factory=dict)
    version: int = PROFILE_VERSION
    small_rows: list[int] = field(default_factory=list)  # the backend's routed row counts
    dtype: str | None = None  # what the products computed in (None: float32, or llama.cpp's)
    variant: str = ""  # the backend's profile_variant: steps that cost otherwise (padded)
    busy: str = ""  # why it was kept as measured on a busy machine, smoothed ("": quiet)

    def fits(self, backend: Backend) -> bool:
        """Whether it was measured with the products `backend` computes now (in its dtype; on
        a CPU the transformers backend routes small ones its own way, which changes the
        profile's shape: see backends/small_rows.py)."""
        return (self.small_rows == routed_rows(backend)
                and _dtype_key(self.dtype) == _dtype_key(backend.dtype)
                and self.variant == backend.profile_variant)

    def cost_ms(self, n_tokens: int, context: int) -> float:
        """Forward time of `n_tokens` at `context` tokens already cached, interpolated.

        Linear in the batch size between measured sizes and in the context between measured
        lengths (clamped at the ends; past the largest batch, extrapolated along the last
        segment). A measured dip is kept: where kernels take rows in blocks a bigger batch can
        cost less than a smaller one (16 tokens against 12 on a 2-core EPYC), and is then the
        cheaper draft.
        """
        return max(0.0, _interp(self.batches, self._row_at(context), n_tokens))

    def _row_at(self, context: int) -> list[float]:
        """Every batch's cost at this context (bilinear interpolation, the context first:
        the same figures), kept for the last context asked: auto K prices every K of a
        step at one context, and a declined step must cost what a plain one does. The
        context moves on every step, so each segment between measured contexts is kept
        ready to interpolate along."""
        cached = self.__dict__.get("_row")
        if cached is None or cached[0] is not self.ms or cached[1] != context:
            x0, width, low, rise = self._segment(context)
            row = low if not width else [y + d * (context - x0) / width
                                         for y, d in zip(low, rise)]
            cached = self.__dict__["_row"] = (self.ms, context, row)
        return cached[2]

    def _segment(self, context: int) -> tuple[int, int, list[float], list[float]]:
        """(its first context, its width, its first row, each batch's rise along it): the
        measured contexts' segment that `context` falls in; width 0 where it is clamped to
        the first or last measured row."""
        xs = self.contexts
        if len(xs) == 1 or context <= xs[0]:
            i, clamped = 0, True
        elif context >= xs[-1]:
            i, clamped = len(xs) - 1, True
        else:
            i, clamped = bisect.bisect_right(xs, context) - 1, False
        key = (i, clamped)
        segments = self.__dict__.get("_segments")
        if segments is None or segments[0] is not self.ms:  # a table replaced: anew
            segments = self.__dict__["_segments"] = (self.ms, {})
        kept = segments[1]
        if key not in kept:
            if clamped:
                kept[key] = (xs[i], 0, list(self.ms[i]), [])
            else:
                low, high = self.ms[i], self.ms[i + 1]
                kept[key] = (xs[i], xs[i + 1] - xs[i], list(low),
                             [b - a for a, b in zip(low, high)])
        return kept[key]

    def relative(self, n_tokens: int, context: int) -> float:
        """Cost of n tokens over the cost of one token at the same context."""
        one = self.cost_ms(1, context)
        return self.cost_ms(n_tokens, context) / one if one > 0 else float("inf")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Profile:
        """The profile `data` holds; SpecvizError saying what is wrong where its shape, types
        or values are not a profile's (profile_shape.py)."""
        wrong = profile_shape.problem(data, PROFILE_VERSION)
        if wrong:
            raise SpecvizError(f"not a cost profile: {wrong}")
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def measure(
    backend: Backend,
    model: str,
    threads: int | None = None,
    batches: Sequence[int] = BATCHES,
    contexts: Sequence[int] = CONTEXTS,
    repeats: int = REPEATS,
    on_progress: Callable[[int, int], None] | None = None,
) -> Profile:
    """Time forward passes of every batch size at every context length on `backend`."""
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
    batches = sorted({1, *batches})  # a batch's switch back is priced in one-token steps
    filler = _filler_tokens(backend, usable[-1] + batches[-1])
    count = _Count(len(usable) * repeats * len(batches), on_progress)
    with backend.holding_threads():  # timed at the count the profile is named for
        table = _table(backend, filler, usable, batches, repeats, count)
    backend.reset()
    from ..trace import machine_info

    return Profile(model, backend.name, backend.device, threads, usable, batches, table,
                   repeats, machine=machine_info(),
                   small_rows=routed_rows(backend), dtype=backend.dtype,
                   variant=backend.profile_variant)


def _table(backend: Backend, filler: list[int], usable: list[int], batches: list[int],
           repeats: int, count: _Count) -> list[list[float]]:
    table = [_row(backend, filler, ctx, batches, repeats, count) for ctx in usable]
    for i, ctx in enumerate(usable):  # a row timed while other work took the cores: once more
        if uneven([ctx], batches, [table[i]]):
            count.total += repeats * len(batches)
            table[i] = _row(backend, filler, ctx, batches, repeats, count)
    return table


class _Count:
    """Forwards timed so far, out of `total` (which grows where a row is timed again)."""

    def __init__(self, total: int, on_progress: Callable[[int, int], None] | None) -> None:
        self.total, self.done, self.on_progress = total, 0, on_progress

    def tick(self) -> None:
        self.done += 1
        if self.on_progress:
            self.on_progress(self.done, self.total)


def _row(backend: Backend, filler: list[int], ctx: int, batches: list[int], repeats: int,
         count: _Count) -> list[float]:
    """Each batch's cost at `ctx` cached tokens, as a decoding loop meets it."""
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


def routed_rows(backend: Backend) -> list[int]:
    """The row counts whose products `backend` routes (none, for most backends)."""
    return sorted(getattr(backend, "small_rows", ()))


def estimate_seconds(backend: Backend, batches: Sequence[int] = BATCHES,
                     contexts: Sequence[int] = CONTEXTS, repeats: int = REPEATS) -> float:
    """About how long `measure` would take here: one forward of one token and one of the
    largest batch timed now, batches in between costed on the line through them, the
    context's own cost left out (it is small beside the weights for these batch sizes)."""
    batches = sorted({int(b) for b in batches})
    usable = [c for c in sorted({int(c) for c in contexts}) if c + batches[-1] <= backend.n_ctx]
    start = min(64, max(backend.n_ctx - batches[-1], 1))
    filler = _filler_tokens(backend, start + batches[-1])
    backend.reset()
    backend.forward(filler[:start])
    one = time_forward(backend, filler[start : start + 1], start)
    big = time_forward(backend, filler[start:], start)
    backend.reset()
    step = (big - one) / max(batches[-1] - 1, 1)
    settling = SETTLE * one * (2 * len(batches) - 1)  # before each timing, after each batch
    per_pass = sum(one + step * (b - 1) for b in batches) + settling
    prefill = sum(big * c / batches[-1] for c in usable)
    return (prefill + len(usable) * (repeats + 1) * per_pass) / 1000.0


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


def _filler_tokens(backend: Backend, n: int) -> list[int]:
    piece = backend.tokenize(_FILLER, add_special=False) or [0]
    return (piece * (n // len(piece) + 1))[:n]


# ---------------------------------------------------------------- storage


def profiles_dir() -> Path:
    """`<cache>/profiles`, beside the models folder (SPECVIZ_HOME respected)."""
    return home_dir("cache") / "profiles"


def profile_path(model: str, backend: str, device: str, threads: int | None,
                 dtype: str | None = None, variant: str = "") -> Path:
    name = Path(model).name if ("/" in model or "\\" in model) else model
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name)
    kind = "" if _dtype_key(dtype) == "float32" else f"--{dtype}"  # float32: as ever named
    kind += f"--{variant}" if variant else ""
    return profiles_dir() / f"{stem}--{backend}--{device}--t{threads_run(threads)}{kind}.json"


def planned_variant(backend: str, device: str, target: str, threads: int | None,
                    dtype: str | None, compile: str | None = None) -> str:
    """The `profile_variant` a backend of these settings will have, known before it loads
    (the window's curves, `specviz profile`'s lookup): llama.cpp's padded widths as set; the
    transformers backend's compiled steps where asked, or raced here before and kept."""
    from ..backends import compile_choice, llama_widths
    from ..models import resolve

    if backend == "llama":
        return llama_widths.profile_variant(backend)
    try:
        choice = compile_choice.asked_choice(compile, device)
        if choice == "auto":
            choice = compile_choice.remembered(compile_choice.store_path(), resolve(target),
                                               threads, device, dtype or "float32")
    except SpecvizError:  # a target not here yet, a setting it does not know: said elsewhere
        return ""
    return "compiled" if backend == "transformers" and choice == "on" else ""


def threads_run(threads: int | None) -> int:
    """The threads a profile's steps run on, which name it: None (the command line's "auto")
    runs on every core, so it shares the profile of a window that asks for that many (one
    profile measured twice, 25 s each, for the same 2 cores otherwise)."""
    return threads or compute_threads()


def _before_threads_were_counted(path: Path) -> Path:
    """Where a profile of every core was stored before, named `tauto`."""
    return path.with_name(re.sub(r"--t\d+(--|\.json$)", r"--tauto\1", path.name, count=1))


def _dtype_key(dtype: str | None) -> str:
    return dtype or "float32"


# Busy-looking measurements of one profile before it is stored all the same: each run until
# then measures it again, in the hope of a quieter moment, and each cell keeps its cheapest.
BUSY_TRIES = 3
TRIES_ENV = "SPECVIZ_PROFILE_TRIES"


def busy_tries() -> int:
    """How many busy-looking measurements of a profile are made before it is stored all the
    same, smoothed (SPECVIZ_PROFILE_TRIES, else BUSY_TRIES; 1 stores the first)."""
    text = os.environ.get(TRIES_ENV, "").strip()
    try:
        return max(1, int(text)) if text else BUSY_TRIES
    except ValueError:
        raise SpecvizError(f"{TRIES_ENV} takes a whole number of tries, got {text!r}") from None


def save(profile: Profile) -> Path:
    """Store the profile whole (a reader never sees half of one); SpecvizError naming the
    file where it cannot be written. One timed on a busy machine is stored only at its
    `busy_tries()`th measurement (`store` says how); before that SpecvizError says why not,
    and the next run measures it again."""
    return store(profile)[0]


def store(profile: Profile) -> tuple[Path, Profile]:
    """`save`, and the profile as stored: as measured where the machine was quiet; else each
    cell at its cheapest over the tries, quiet as that where it is, or else its noisy cells
    smoothed (profile_noise.py) and marked `busy`. A quiet measurement replaces a busy one."""
    path = profile_path(profile.model, profile.backend, profile.device, profile.threads,
                        profile.dtype, profile.variant)
    if uneven(profile.contexts, profile.batches, profile.ms):
        profile = _busy_try(profile, path)
    _write(path, profile.to_dict())
    _forget_tries(path)
    return path, profile


def _busy_try(profile: Profile, path: Path) -> Profile:
    """The profile to store after one more busy-looking measurement; SpecvizError, the try
    counted beside the profile, where tries are left."""
    earlier, tries = _earlier(profile, path)
    ms = cheapest(profile.ms, earlier) if earlier else profile.ms
    why = uneven(profile.contexts, profile.batches, ms)
    if not why:  # the tries' quieter moments make a quiet table together
        return replace(profile, ms=ms, busy="")
    limit, tries = busy_tries(), tries + 1
    if tries >= limit:
        return replace(profile, ms=smoothed(profile.contexts, profile.batches, ms), busy=why)
    _write(_tries_path(path), {**replace(profile, ms=ms).to_dict(), "tries": tries})
    raise SpecvizError(f"{why}; it is measured again on the next run (try {tries} of "
                       f"{limit}; after the last it is stored all the same, smoothed)")


def _earlier(profile: Profile, path: Path) -> tuple[list[list[float]] | None, int]:
    """The table of the earlier busy tries of this profile and how many there were: those
    counted beside it, or a stored busy profile (its tries all spent); (None, 0) for none."""
    for where in (_tries_path(path), path):
        try:
            data = json.loads(where.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # none, or torn: no earlier tries to go by
            continue
        if profile_shape.problem(data, PROFILE_VERSION) or not _alike(data, profile):
            continue
        if where != path:
            return data["ms"], data["tries"] if isinstance(data.get("tries"), int) else 0
        if data.get("busy"):
            return data["ms"], busy_tries() - 1
    return None, 0


def _alike(data: dict, profile: Profile) -> bool:
    """Whether `data` was measured on the same sizes and products as `profile`."""
    return all(data.get(key) == getattr(profile, key)
               for key in ("contexts", "batches", "small_rows", "dtype", "variant"))


def _tries_path(path: Path) -> Path:
    """Beside the profile, not named like one (`specviz doctor` lists `*--*.json`)."""
    return path.with_suffix(".tries")


def _forget_tries(path: Path) -> None:
    try:
        _tries_path(path).unlink(missing_ok=True)
    except OSError:  # a count left behind only merges into the next busy try
        pass


def _write(path: Path, data: dict) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(path, exc) from None
    return write_text(path, json.dumps(data, indent=1))


def keep(profile: Profile, say: Say) -> Path | None:
    """`save`, where a profile measured for minutes must not be lost to a folder it cannot
    be written to: the caller goes on with it, and `say` gets one line of why it was not
    stored (None then). A busy-looking profile takes the cells it is stored with (or would
    be, smoothed), so this run prices as later runs will; once it is stored as busy, `say`
    is told so, once."""
    try:
        path, stored = store(profile)
    except SpecvizError as exc:
        why = uneven(profile.contexts, profile.batches, profile.ms)
        if why:
            _take(profile, smoothed(profile.contexts, profile.batches, profile.ms), why)
        say(f"the cost profile was measured but not stored ({exc}); it is used for this "
            "run only")
        return None
    _take(profile, stored.ms, stored.busy)
    if stored.busy:
        say(f"the cost profile of {profile.model} kept looking busy ({stored.busy}): it is "
            "stored with its noisy cells smoothed and marked so, until a measurement on a "
            f"quiet machine replaces it (`specviz profile --target {profile.model} --refresh`)")
    return path


def _take(profile: Profile, ms: list[list[float]], busy: str) -> None:
    profile.ms, profile.busy = ms, busy


def read(model: str, backend: str, device: str, threads: int | None,
         dtype: str | None = None, variant: str = "") -> tuple[Profile | None, str]:
    """The stored profile and "", (None, "") where there is none, or (None, why) where
    the file there is not a usable profile (unreadable, corrupt, of the wrong shape)."""
    path = profile_path(model, backend, device, threads, dtype, variant)
    if not path.exists() and threads_run(threads) == compute_threads():
        older = _before_threads_were_counted(path)
        path = older if older.exists() else path
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, ""
    except (OSError, ValueError) as exc:  # a folder, no permission, not UTF-8
        return None, f"{path} cannot be read ({getattr(exc, 'strerror', None) or exc})"
    try:
        data = json.loads(text)
    except ValueError as exc:  # json's errors are ValueErrors
        return None, f"{path}: not JSON ({exc})"
    wrong = profile_shape.problem(data, PROFILE_VERSION) or uneven(
        data["contexts"], data["batches"], data["ms"])
    if wrong:
        return None, f"{path}: {wrong}"
    return Profile.from_dict(data), ""


def load(model: str, backend: str, device: str, threads: int | None,
         dtype: str | None = None, say: Say | None = None, variant: str = "") -> Profile | None:
    """The stored profile, or None when there is none or it is not usable (then `say`,
    where given, gets one line of why it is not used)."""
    profile, problem = read(model, backend, device, threads, dtype, variant)
    if problem and say:
        say(f"not using the stored cost profile {problem}")
    return profile


def table(profile: Profile) -> str:
    """A text table: one row per batch size, ms and cost relative to one token per context."""
    head = ["tokens"] + [f"ctx {c}: ms (x1)" for c in profile.contexts]
    rows = [head]
    for j, b in enumerate(profile.batches):
        cells = [str(b)]
        for i, _ in enumerate(profile.contexts):
            one = profile.ms[i][0] if profile.batches[0] == 1 else None
            rel = f" ({profile.ms[i][j] / one:.2f}x)" if one else ""
            cells.append(f"{profile.ms[i][j]:.1f}{rel}")
        rows.append(cells)
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    text = "\n".join("  ".join(cell.rjust(w) for cell, w in zip(r, widths)) for r in rows)
    return text + (f"\nmeasured on a busy machine, its noisy cells smoothed ({profile.busy}); "
                   "--refresh on a quiet one replaces it" if profile.busy else "")


# ---------------------------------------------------------------- interpolation


def _interp(xs: Sequence[int], ys: Sequence[float], x: float, extrapolate: bool = True) -> float:
    if len(xs) == 1:
        return ys[0] * (x / xs[0] if extrapolate and x > xs[0] else 1.0)
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1] and not extrapolate:
        return ys[-1]
    i = min(max(bisect.bisect_right(xs, x) - 1, 0), len(xs) - 2)
    x0, x1, y0, y1 = xs[i], xs[i + 1], ys[i], ys[i + 1]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
