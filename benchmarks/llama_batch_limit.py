"""What a verification batch costs on llama.cpp against this machine's limits.

Two limits bound a forward pass of b tokens:
- memory: the weights are read once per pass whatever b is, so a pass can take no less than
  the model file's size over the machine's read bandwidth (measured here with numpy, on as
  many threads as llama.cpp uses);
- compute: b tokens need b times one token's quantized dot products; the best rate the
  kernels reach is a long batch's (prompt processing), so b tokens take at least b times
  that per-token time.
A pass's floor is the larger of the two. The script times passes of 1..8 and longer batches
at a 512-token context, interleaved across the settings tried (llama.cpp's repacked weight
layouts on and off; one or two threads), and prints each cost in units of one token and over
its floor.

Usage: python benchmarks/llama_batch_limit.py [--model qwen2.5-coder-1.5b] [--rounds 5]
       [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from llama_buffers import load

from specviz.engines.backends.llama import LlamaBackend
from specviz.engines.cost.profile_measure import filler_tokens
from specviz.engines.models import resolve

CONTEXT = 512
BATCHES = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32, 64, 128)


def read_bandwidth_gb_s(threads: int, mb: int = 1024, rounds: int = 5) -> float:
    """Bytes `threads` cores read per second from memory: each sums its share of an array far
    beyond the caches (numpy lets go of the GIL while it sums)."""
    data = np.ones(mb * 2**20 // 4, dtype=np.float32)
    parts = np.array_split(data, threads)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(np.sum, parts))
        best = min(_timed(lambda: list(pool.map(np.sum, parts))) for _ in range(rounds))
    return data.nbytes / best / 1e9


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def pass_ms(backend: LlamaBackend, tokens: list[int]) -> float:
    start = time.perf_counter()
    backend.forward(tokens, "all")
    elapsed = (time.perf_counter() - start) * 1000.0
    backend.truncate(CONTEXT)
    return elapsed


def settings(path: str) -> dict[str, LlamaBackend]:
    repacked = load(path, 2, extra=True)
    return {
        "repacked, 2 threads": repacked,
        "repacked, 1 thread": LlamaBackend(path, n_ctx=1024, threads=1,
                                           weights=repacked._weights.acquire()),
        "plain layout, 2 threads": load(path, 2, extra=False),
    }


def measure(backends: dict[str, LlamaBackend], rounds: int) -> dict[str, dict[int, float]]:
    some = next(iter(backends.values()))
    filler = filler_tokens(some, CONTEXT + max(BATCHES))
    for b in backends.values():
        b.reset()
        b.forward(filler[:CONTEXT])
        for n in BATCHES:  # first calls of a shape set it up
            pass_ms(b, filler[CONTEXT:CONTEXT + n])
    times = {name: {n: [] for n in BATCHES} for name in backends}
    for _ in range(rounds):
        for n in BATCHES:
            for name, b in backends.items():
                times[name][n].append(pass_ms(b, filler[CONTEXT:CONTEXT + n]))
    return {name: {n: statistics.median(v) for n, v in per.items()} for name, per in times.items()}


def report(model: str, weights_mb: float, gb_s: float, costs: dict[str, dict[int, float]]) -> dict:
    memory_ms = weights_mb * 2**20 / (gb_s * 1e9) * 1000.0
    rows = {}
    for name, per in costs.items():
        per_token = per[max(BATCHES)] / max(BATCHES)  # the kernels' best rate
        rows[name] = {n: {"ms": round(ms, 2), "x_one": round(ms / per[1], 2),
                          "x_floor": round(ms / max(memory_ms, n * per_token), 2)}
                      for n, ms in per.items()}
    print(f"{model}: weights {weights_mb:.0f} MiB, read at {gb_s:.1f} GB/s -> memory floor "
          f"{memory_ms:.1f} ms a pass")
    for name, per in rows.items():
        print(f"\n{name}: one token {per[1]['ms']:.1f} ms; long-batch rate "
              f"{costs[name][max(BATCHES)] / max(BATCHES):.2f} ms a token")
        print("  tokens  " + "  ".join(f"{n:>6}" for n in BATCHES))
        print("  x one   " + "  ".join(f"{per[n]['x_one']:>6.2f}" for n in BATCHES))
        print("  x floor " + "  ".join(f"{per[n]['x_floor']:>6.2f}" for n in BATCHES))
    return {"model": model, "weights_mib": weights_mb, "read_gb_s": gb_s,
            "memory_floor_ms": memory_ms, "context": CONTEXT, "settings": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    path = str(resolve(args.model))
    backends = settings(path)
    gb_s = read_bandwidth_gb_s(next(iter(backends.values())).threads)
    weights_mb = Path(path).stat().st_size / 2**20  # every weight is read once a pass
    result = report(args.model, weights_mb, gb_s, measure(backends, args.rounds))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
