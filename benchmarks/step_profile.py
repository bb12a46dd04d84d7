"""Where one plain decoding step of the transformers backend goes, eager or compiled (#64).

Loads the model (`--compile on|off`), caches `--context` tokens of a prompt, takes a few
untimed one-token steps, times `--steps` more (as the backend takes them: the forward, the LM
head, the logits to numpy), then records the same number under torch.profiler and sums each
operator's own CPU time a step, in classes: the matrix products (aten's mm/addmm/linear/bmm,
oneDNN's), attention, inductor's fused kernels (named with `--kernel-profile`, which makes
inductor's C++ record each kernel: a separate compile), other operators, and what no operator
accounts for (Python, dynamo's guards, the wrapper's calls). With the weights' bytes, what a
step would cost if reading them were all it did, at `--bandwidth` GB/s.

    python benchmarks/step_profile.py --target smollm2-135m --dtype float32 --compile on \\
        --threads 2 [--kernel-profile] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

PROMPT = Path("assets/prompts/code-edit-scale.txt")
CLASSES = (("compiled graph's own time (its fused kernels, unless named)",
            ("compiledfxgraph", "compiledfunction")),
           ("dynamo's frame (guards)", ("torch-compiled region",)),
           ("fused kernels", ("cpp_fused", "kernel_cpp")),
           ("matmul", ("aten::mm", "aten::addmm", "aten::linear", "aten::matmul", "aten::bmm",
                       "mkldnn", "onednn", "_mkl_", "aten::baddbmm")),
           ("attention", ("scaled_dot_product", "attention", "softmax")))


def kind_of(name: str) -> str:
    low = name.lower()
    for kind, parts in CLASSES:
        if any(p in low for p in parts):
            return kind
    return "other operators"


def step_ms(backend, tokens: list[int], n_past: int) -> float:
    started = time.perf_counter()
    backend.forward(tokens)
    backend.synchronize()
    took = time.perf_counter() - started
    backend.truncate(n_past)
    return 1000 * took


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--compile", choices=("on", "off"), default="on")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--kernel-profile", action="store_true")
    p.add_argument("--bandwidth", type=float, default=None,
                   help="GB/s the weights are read at, for the ceiling (default: none)")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    import torch

    if args.kernel_profile:
        torch._inductor.config.cpp.enable_kernel_profile = True
    from specviz.engines.backends import load_backend
    from specviz.engines.models import resolve

    backend = load_backend("transformers", resolve(args.target), threads=args.threads,
                           dtype=args.dtype, compile=args.compile, probe=False)
    ids = backend.tokenize(PROMPT.read_text(encoding="utf-8"))
    ids = (ids * (1 + args.context // max(len(ids), 1)))[:args.context + 1]
    backend.reset()
    backend.forward(ids[:args.context])
    n_past, token = args.context, ids[args.context:args.context + 1]
    for _ in range(3):
        step_ms(backend, token, n_past)
    timed = [step_ms(backend, token, n_past) for _ in range(args.steps)]
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        for _ in range(args.steps):
            step_ms(backend, token, n_past)
        profiled_ms = 1000 * (time.perf_counter() - started) / args.steps
    per_op, per_kind = defaultdict(float), defaultdict(float)
    for event in prof.key_averages():
        ms = event.self_cpu_time_total / 1000 / args.steps
        per_op[event.key] += ms
        per_kind[kind_of(event.key)] += ms
    accounted = sum(per_kind.values())
    per_kind["no operator (Python, guards, calls)"] = max(profiled_ms - accounted, 0.0)
    weights = sum(t.numel() * t.element_size() for t in backend.model.parameters())
    result = {"target": args.target, "dtype": backend.dtype, "compile": backend.compiled,
              "threads": torch.get_num_threads(), "context": args.context,
              "step_ms_median": round(statistics.median(timed), 3),
              "step_ms_spread": round(max(timed) / min(timed), 3),
              "profiled_step_ms": round(profiled_ms, 3),
              "per_kind_ms": {k: round(v, 3) for k, v in
                              sorted(per_kind.items(), key=lambda kv: -kv[1])},
              "top_ops_ms": {k: round(v, 3) for k, v in
                             sorted(per_op.items(), key=lambda kv: -kv[1])[:args.top]},
              "weights_bytes": weights}
    if args.bandwidth:
        result["weights_at_bandwidth_ms"] = round(weights / (args.bandwidth * 1e9) * 1000, 3)
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
