"""A K-token verification against one token through the transformers backend's compiled path,
on a random-weight model of a realistic shape, against the memory's limit (issue #64).

A plain token reads every weight once, so it costs at least bytes / bandwidth; a verification
of K tokens reads the same weights (and K tokens' compute on top), so on a device that is
bound by its memory K tokens cost about one. This times, on one static cache holding
`--context` tokens, the step the decoding loop takes (hf_compiled.run_rows, the graph of the
smallest width that holds the rows, then the LM head on every row and the logits copied to
the host, as TransformersBackend._compiled_forward does), for each width in `--widths`,
compiled and eagerly; the weights' bytes that a token reads (all but the input embedding's,
and the cache's slots, which attention reads whole); the device's copy bandwidth, measured
(a large device-to-device copy: read + write), and its nominal one where known.

    python benchmarks/gpu/verify_width.py --shape llama3.1-8b --device cuda --widths 1,9 \\
        --json out.json
    python benchmarks/gpu/verify_width.py --shape tiny --device cpu --dtype float32   # here

The model is made in memory on the device (shapes.random_model): nothing is written to disk.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import shapes  # beside this script

# Nominal memory bandwidth, bytes/s, by a part of the device's name (the vendors' sheets).
NOMINAL = {"H200": 4.8e12, "H100 80GB HBM3": 3.35e12, "H100 NVL": 3.9e12, "H100 PCIe": 2.0e12,
           "A100-SXM4-80GB": 2.04e12, "A100-SXM4-40GB": 1.56e12}
COPY_BYTES = 1 << 30  # the bandwidth probe's tensor: far above any cache


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def copy_bandwidth(device: str, repeats: int = 10) -> float:
    """Bytes/s moved by a device-to-device copy (each byte read once and written once)."""
    import torch

    src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    times = []
    for _ in range(repeats + 1):
        sync(device)
        started = time.perf_counter()
        dst.copy_(src)
        sync(device)
        times.append(time.perf_counter() - started)
    del src, dst
    return 2 * COPY_BYTES / statistics.median(times[1:])


def nominal_bandwidth(device: str) -> float | None:
    import torch

    if not device.startswith("cuda"):
        return None
    name = torch.cuda.get_device_name(0)
    return next((bw for part, bw in NOMINAL.items() if part in name), None)


def bytes_read(model, capacity: int) -> dict:
    """What one token's forward reads: every weight but the input embedding's (a token reads
    one row of it), unless it is tied to the LM head; and every cache slot of every layer."""
    config = model.config
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    embed = model.get_input_embeddings().weight
    tied = embed is model.get_output_embeddings().weight
    read = weights - (0 if tied else embed.numel() * embed.element_size())
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv = (2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * capacity
          * embed.element_size())
    return {"weights": weights, "weights_read": read, "cache_read": kv, "token_reads": read + kv}


def timed_step(steps, kv, head, tokens: list[int], n_past: int, eager: bool, device: str):
    """Seconds for one step as the backend takes it, the cache rolled back after."""
    import torch

    from specviz.engines.backends import hf_compiled

    sync(device)
    started = time.perf_counter()
    with torch.inference_mode():
        rows = hf_compiled.run_rows(steps, kv, tokens, n_past, eager=eager)
        head(rows).float().cpu().numpy()
    took = time.perf_counter() - started
    kv.set_length(n_past)
    return took


def measure(model, device: str, widths: list[int], context: int, repeats: int, ways):
    """{way: {width: [seconds...]}} with the ways interleaved each repeat; the compile times."""
    import torch

    from specviz.engines.backends import hf_compiled

    steps = hf_compiled.CompiledSteps(model, device_kind=torch.device(device).type)
    kv = hf_compiled.StaticKV(model, device, model.dtype, model.config.max_position_embeddings)
    head = model.get_output_embeddings()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (context + max(widths),), generator=gen)
    ids = ids.tolist()
    with torch.inference_mode():
        hf_compiled.run_rows(steps, kv, ids[:context], 0, eager=True)
    times = {way: {w: [] for w in widths} for way in ways}
    for i in range(repeats + 2):  # compile, then a CUDA graph's recording, are not timed
        for way in ways:
            for w in widths:
                took = timed_step(steps, kv, head, ids[context:context + w], context,
                                  way == "eager", device)
                if i >= 2:
                    times[way][w].append(took)
    return times, steps.compile_seconds, kv.capacity


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=sorted(shapes.SHAPES), default="llama3.1-8b")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--widths", default="1,9", help="tokens a step, e.g. 1,9 (a draft of 8)")
    p.add_argument("--context", type=int, default=256, help="tokens cached before the steps")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--ways", default="compiled,eager")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    import torch

    widths = [int(w) for w in args.widths.split(",")]
    ways = [w for w in args.ways.split(",") if w in ("compiled", "eager")]
    started = time.perf_counter()
    model = shapes.random_model(shapes.SHAPES[args.shape], args.device, args.dtype)
    made_s = time.perf_counter() - started
    bandwidth = copy_bandwidth(args.device)
    times, compile_s, capacity = measure(model, args.device, widths, args.context,
                                         args.repeats, ways)
    reads = bytes_read(model, capacity)
    nominal = nominal_bandwidth(args.device)
    result = {"shape": args.shape, "device": args.device, "dtype": args.dtype,
              "device_name": (torch.cuda.get_device_name(0) if args.device.startswith("cuda")
                              else "cpu"),
              "threads": torch.get_num_threads(), "context": args.context,
              "cache_capacity": capacity, "made_s": round(made_s, 1),
              "compile_s": compile_s, "bytes": reads,
              "copy_bandwidth_GBps": round(bandwidth / 1e9, 1),
              "nominal_bandwidth_GBps": nominal and round(nominal / 1e9),
              "limit_ms_at_copy_bandwidth": round(1000 * reads["token_reads"] / bandwidth, 3),
              "ways": {}}
    for way, per_width in times.items():
        ms = {w: round(1000 * statistics.median(t), 3) for w, t in per_width.items()}
        entry = {"median_ms": ms,
                 "spread": {w: round(max(t) / min(t), 3) for w, t in per_width.items()},
                 "share_of_limit": round(result["limit_ms_at_copy_bandwidth"] / ms[widths[0]],
                                         3)}
        if nominal:
            entry["share_of_nominal_limit"] = round(
                1000 * reads["token_reads"] / nominal / ms[widths[0]], 3)
        entry["over_first_width"] = {w: round(ms[w] / ms[widths[0]], 3) for w in widths}
        result["ways"][way] = entry
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
