"""Linear layers' products for a few rows on a CPU, computed the way this machine does fastest.

Decoding multiplies every weight matrix by 1 row (a plain step) or a few (a verification
batch). PyTorch's `F.linear(x, W)` hands those to the BLAS as `x @ W.T`, and MKL's kernels for
that form read the whole weight matrix once per row on some CPUs (2 or 3 rows then cost more
than 4 to 12). The same product written `W @ x.T`, with `x` contiguous and a lone row
repeated to make two, goes through the blocked matrix product, which reads the weights once
(measured: docs/results/transformers-cpu.md, docs/architecture.md). A speculative step's cost
hinges on how much a few extra rows cost, so this decides whether short drafts can pay at all.

Whether routing pays depends on the CPU and the BLAS, so it is measured on the model's own
weight shapes, once per CPU, torch version, thread count and set of shapes, and remembered.
`SPECVIZ_SMALL_ROWS=off` (or `on`) overrides the measurement.
"""

from __future__ import annotations

import hashlib
import os
import time
import types
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..machine.json_file import read_dict, update_dict

ROWS = (1, 2, 3, 4, 5, 6, 8, 12, 16)  # row counts measured; above 16 the default is kept
MARGIN = 0.9  # route a row count only where it is at least 10% faster
REPEATS = 2  # timed passes per row count and way; the fastest is kept (others were disturbed)
ENV = "SPECVIZ_SMALL_ROWS"


def faster_rows(default_ms: Mapping[int, float], routed_ms: Mapping[int, float],
                margin: float = MARGIN) -> frozenset[int]:
    """The row counts whose routed products took less than `margin` of the default's."""
    return frozenset(m for m, ms in routed_ms.items() if ms < margin * default_ms[m])


def covers(rows: frozenset[int], m: int) -> bool:
    """Whether a product of `m` rows is routed: by the measured count at or above it."""
    above = [r for r in ROWS if r >= m]
    return bool(above) and above[0] in rows


def routed_product(weight, bias, x):
    """`x @ weight.T + bias` for a few rows of `x`, as `weight @ x.T`."""
    shape = x.shape
    rows = x.reshape(-1, shape[-1])
    m = rows.shape[0]
    rows = rows.repeat(2, 1) if m == 1 else rows.contiguous()
    y = (weight @ rows.T)[:, :m].T
    if bias is not None:
        y = y + bias
    return y.reshape(*shape[:-1], y.shape[-1])


def route(model, rows: frozenset[int]) -> int:
    """Make `model`'s linear layers route products of `rows` rows; returns how many layers."""
    from torch import nn

    if not rows:
        return 0
    routed = frozenset(m for m in range(ROWS[-1] + 1) if covers(rows, m))
    layers = [m for m in model.modules() if type(m) is nn.Linear]
    for layer in layers:
        layer.routed_rows = routed
        layer.forward = types.MethodType(_routed_forward, layer)  # a deep copy rebinds it
    return len(layers)


def _routed_forward(layer, x):
    import torch.nn.functional as F

    if x.numel() // x.shape[-1] in layer.routed_rows:
        return routed_product(layer.weight, layer.bias, x)
    return F.linear(x, layer.weight, layer.bias)


def time_products(weights: list, rows: Iterable[int] = ROWS, repeats: int = REPEATS):
    """Milliseconds, by row count, of one product with every weight in `weights` in turn, both
    ways. In turn, as a forward pass does: the weights then come from memory, not a cache,
    which is where the two ways differ most (timed one at a time, they hardly differ)."""
    import torch
    import torch.nn.functional as F

    default: dict[int, float] = {}
    routed: dict[int, float] = {}
    with torch.inference_mode():
        for m in rows:
            xs = {w.shape[1]: torch.randn(m, w.shape[1], dtype=w.dtype) for w in weights}
            pairs = [(w, xs[w.shape[1]]) for w in weights]
            default[m] = _fastest(lambda p=pairs: [F.linear(x, w) for w, x in p], repeats)
            routed[m] = _fastest(lambda p=pairs: [routed_product(w, None, x) for w, x in p],
                                 repeats)
    return default, routed


def plan(model, threads: int | None, store: Path | None) -> frozenset[int]:
    """The row counts to route for `model` on this machine: measured once, then remembered."""
    choice = os.environ.get(ENV, "auto").lower()
    if choice in ("off", "0"):
        return frozenset()
    if choice in ("on", "1"):
        return frozenset(ROWS)
    weights = _weights(model)
    if not weights:
        return frozenset()
    key = _key(weights, threads)
    known = read_dict(store)
    if key in known:
        return frozenset(known[key])
    rows = faster_rows(*time_products(weights))
    _write(store, key, sorted(rows))
    return rows


def _weights(model) -> list:
    from torch import nn

    return [m.weight.detach() for m in model.modules() if type(m) is nn.Linear]


def _key(weights, threads: int | None) -> str:
    import torch

    from ..machine.hardware import read_cpu

    shapes = Counter(f"{n}x{k}" for n, k in (w.shape for w in weights))
    layers = ",".join(f"{shape}*{n}" for shape, n in sorted(shapes.items()))
    dtype = weights[0].dtype
    text = f"{read_cpu().fingerprint}|torch {torch.__version__}|t{threads}|{dtype}|{layers}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _fastest(fn, repeats: int) -> float:
    fn()  # the first call sets the kernel up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1000.0


def _write(store: Path | None, key: str, rows: list[int]) -> None:
    if store is None:
        return
    try:
        update_dict(store, lambda known: {**known, key: rows})
    except OSError:
        pass  # measured again next time
