"""A cost profile timed while other work had the cores: told from a quiet machine's, and
smoothed where it has to be kept all the same.

Other work on the cores only ever adds time to a forward. So a batch that costs far more than
a larger batch at the same context was slowed down, not cheap the other way round; and the
cell-wise minimum of two measurements is nearer the quiet machine than either. On a machine
that is never quiet (a laptop with a browser and a chat app) a profile keeps looking busy, and
is then kept with its noisy cells rebuilt: from the shape of a row measured quietly at another
context where there is one, else from the quiet cells beside them in its own row; a noisy row
is then made monotone in the batch size (its larger batch's time bounds what a smaller one can
cost, and a busy row cannot tell a real dip from noise).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence

# A batch that costs this many times a larger one at the same context (and this many ms more)
# was timed while other work had the cores: a quiet machine's dips stay within 1.2x (16
# tokens against 12 on a 2-core EPYC), a busy one's reached 5x and 300 ms for smollm2's 23.
UNEVEN_RATIO, UNEVEN_MS = 1.5, 2.0

Table = Sequence[Sequence[float]]


def uneven(contexts: Sequence[int], batches: Sequence[int], ms: Table) -> str:
    """"" for a table a quiet machine could have measured; else, in words, the batch that cost
    far more than a larger one: auto K would take batches as that dear and never draft, and a
    stored profile is used on every later run."""
    for context, row in zip(contexts, ms):
        for i, j in _dearer(row):
            cost, cheaper = row[i], row[j]
            return (f"at {context} cached tokens a batch of {batches[i]} took {cost:.1f} ms, "
                    f"{cost / max(cheaper, 1e-9):.1f}x a batch of {batches[j]} ({cheaper:.1f} "
                    "ms): timed while other work had the cores")
    return ""


def _dearer(row: Sequence[float]) -> Iterator[tuple[int, int]]:
    """(i, j): cell i costs far more than cell j, the cheapest of the larger batches."""
    for i, cost in enumerate(row[:-1]):
        larger = row[i + 1:]
        cheaper = min(larger)
        if cost > UNEVEN_RATIO * cheaper and cost - cheaper > UNEVEN_MS:
            yield i, i + 1 + list(larger).index(cheaper)


def noisy_cells(row: Sequence[float]) -> set[int]:
    """The cells of a row that the busy rule condemns."""
    return {i for i, _ in _dearer(row)}


def cheapest(first: Table, second: Table) -> list[list[float]]:
    """Each cell's cheaper time of two measurements of one table: noise only adds time."""
    return [[min(a, b) for a, b in zip(x, y)] for x, y in zip(first, second)]


def smoothed(contexts: Sequence[int], batches: Sequence[int], ms: Table) -> list[list[float]]:
    """The table with its noisy rows rebuilt (see the module's note); rows the busy rule
    passes are kept as measured, dips and all. The result passes `uneven`."""
    quiet = [i for i, row in enumerate(ms) if not noisy_cells(row)]
    out = []
    for i, row in enumerate(ms):
        bad = noisy_cells(row)
        if not bad:
            out.append(list(row))
            continue
        shape = ms[min(quiet, key=lambda q: abs(contexts[q] - contexts[i]))] if quiet else None
        rebuilt = _from_shape(row, bad, shape) if shape else _between(batches, row, bad)
        out.append([round(ms_, 3) for ms_ in _monotone(rebuilt)])
    return out


def _from_shape(row: Sequence[float], bad: set[int], shape: Sequence[float]) -> list[float]:
    """Noisy cells as the quiet row's, scaled by how this row's own quiet cells compare."""
    scale = statistics.median(row[j] / shape[j] for j in range(len(row)) if j not in bad)
    return [shape[j] * scale if j in bad else cost for j, cost in enumerate(row)]


def _between(batches: Sequence[int], row: Sequence[float], bad: set[int]) -> list[float]:
    """Noisy cells on the line through the nearest quiet cells beside them (the last cell is
    never noisy: it has no larger batch to be dearer than)."""
    good = [j for j in range(len(row)) if j not in bad]
    out = list(row)
    for j in bad:
        left = max((g for g in good if g < j), default=None)
        right = min(g for g in good if g > j)
        if left is None:
            out[j] = row[right]
            continue
        share = (batches[j] - batches[left]) / (batches[right] - batches[left])
        out[j] = row[left] + (row[right] - row[left]) * share
    return out


def _monotone(row: Sequence[float]) -> list[float]:
    """No batch dearer than a larger one: each capped at the cheapest larger batch."""
    out = list(row)
    for j in range(len(out) - 2, -1, -1):
        out[j] = min(out[j], out[j + 1])
    return out
