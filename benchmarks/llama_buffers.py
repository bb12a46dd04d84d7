"""What llama.cpp's weight buffer types are worth: specviz's rule against no extra types.

Loads the same GGUF twice in one process: once as specviz does (extra buffer types minus AMX,
so CPU_REPACK where the CPU has kernels for it), once with `use_extra_bufts = False` (the
blunt way to avoid AMX). Times, interleaved so machine noise hits both alike, a one-token
forward (plain decoding) and an 8-token forward (a verification of K=7) at a 256-token
context. Prints medians, the buffers each load used, and the ratios.

Usage: python benchmarks/llama_buffers.py [--model qwen2.5-coder-1.5b] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

from specviz.engines.backends import llama as llama_backend
from specviz.engines.backends.llama import LlamaBackend, system_info
from specviz.engines.machine.hardware import read_cpu
from specviz.engines.models import resolve

CONTEXT, BATCH = 256, 8


def load(path: str, threads: int, extra: bool) -> LlamaBackend:
    if extra:
        return LlamaBackend(path, n_ctx=1024, threads=threads)
    choose = llama_backend._choose_extra_buffers
    llama_backend._choose_extra_buffers = lambda lib, params: setattr(
        params, "use_extra_bufts", False)
    try:
        return LlamaBackend(path, n_ctx=1024, threads=threads)
    finally:
        llama_backend._choose_extra_buffers = choose


def forward_ms(backend: LlamaBackend, n: int) -> float:
    backend.truncate(CONTEXT)
    start = time.perf_counter()
    backend.forward(list(range(100, 100 + n)), logits="all")
    return (time.perf_counter() - start) * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=30)
    args = p.parse_args()
    path = str(resolve(args.model))
    backends = {"specviz": load(path, args.threads, True),
                "no extra": load(path, args.threads, False)}
    times: dict[tuple[str, int], list[float]] = {}
    for b in backends.values():
        b.forward(list(range(100, 100 + CONTEXT)))
    for _ in range(args.rounds):
        for name, b in backends.items():
            for n in (1, BATCH):
                times.setdefault((name, n), []).append(forward_ms(b, n))
    print(f"{args.model}, {args.threads} threads; CPU {read_cpu().one_line()}")
    print(f"llama.cpp: {system_info()}")
    med = {key: statistics.median(v) for key, v in times.items()}
    for name, b in backends.items():
        buffers = ", ".join(f"{k} {v:.0f} MiB" for k, v in b.weight_buffers.items())
        print(f"{name:>9}: 1 token {med[name, 1]:6.1f} ms ({1000 / med[name, 1]:5.1f} tok/s), "
              f"{BATCH} tokens {med[name, BATCH]:6.1f} ms ({med[name, BATCH] / med[name, 1]:.2f}x)"
              f"  [{buffers}]")
    for n in (1, BATCH):
        print(f"no extra / specviz, {n} token(s): {med['no extra', n] / med['specviz', n]:.2f}")


if __name__ == "__main__":
    main()
