"""specviz's compiled plain decoding against transformers' own `generate()` at its best: a
static cache (`cache_implementation="static"`) and `torch.compile` (issue #64, point 3).

The peer is what transformers' documentation recommends for speed: `generate()` with a static
cache compiles the model's forward itself, with its default CompileConfig (CUDA graphs:
"reduce-overhead"); on a device other than CUDA it compiles only when told to, which this
script does (a rehearsal on a CPU). Beside it, `generate()` with its default dynamic cache
(eager), and specviz's transformers backend with `--compile on`, all on the same model object
(the backend's), the same chat-formatted prompt ids, greedy, interleaved round by round.

Speeds are of the generation alone, as specviz reports its own (prompt processing apart):
for `generate()` the tokens after the first over the time after the first, from two calls
with the same settings (a cache of the same size, so nothing compiles again), one stopped by
a criterion after its first token. Two untimed calls first (the compile, then the CUDA
graphs' recording).

    python benchmarks/gpu/hf_generate_peer.py --target smollm2-135m --device cuda \\
        --max-tokens 256 --rounds 3 --json out.json --markdown out.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from specviz.engines.backends import load_backend
from specviz.engines.models import resolve

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from compiled_plain import plain  # benchmarks/: specviz's plain decoding, timed

WAYS = ("generate-static", "generate", "specviz")
PROMPT = Path("assets/prompts/code-edit-scale.txt")
UNTIMED = 2  # calls before timing: the compile, then the CUDA graphs' recording


def stop_after_first(prompt_len: int):
    """A stopping criterion that ends generate() once it has its first new token."""
    import torch
    from transformers import StoppingCriteria

    class FirstToken(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            done = input_ids.shape[1] > prompt_len
            return torch.full((input_ids.shape[0],), done, dtype=torch.bool,
                              device=input_ids.device)

    return FirstToken()


def generate_kwargs(backend, way: str, tokens: int) -> dict:
    from transformers import CompileConfig

    eos = sorted(backend.eos_ids)
    kwargs = {"max_new_tokens": tokens, "do_sample": False, "eos_token_id": eos,
              "pad_token_id": eos[0]}
    if way == "generate-static":
        config = CompileConfig()  # transformers' defaults: what a user gets
        if not backend.device.startswith("cuda"):
            config._compile_all_devices = True  # generate() compiles only on GPUs unless told
        kwargs |= {"cache_implementation": "static", "compile_config": config}
    return kwargs


def generate_once(backend, ids, kwargs: dict, first_only: bool) -> tuple[int, float]:
    import torch

    model = backend.model
    input_ids = torch.tensor([ids], device=model.device)
    extra = {"stopping_criteria": [stop_after_first(len(ids))]} if first_only else {}
    with torch.inference_mode():
        backend.synchronize()
        started = time.perf_counter()
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs,
                             **extra)
        backend.synchronize()
    return int(out.shape[1] - len(ids)), time.perf_counter() - started


def generate_rate(backend, ids, way: str, tokens: int) -> dict:
    """generate()'s tokens/s after its first token: a whole call against one stopped there."""
    kwargs = generate_kwargs(backend, way, tokens)
    n, whole = generate_once(backend, ids, kwargs, first_only=False)
    _, first = generate_once(backend, ids, kwargs, first_only=True)
    return {"tokens": n, "tok_s": round((n - 1) / max(whole - first, 1e-9), 2),
            "step_ms": round(1000 * (whole - first) / max(n - 1, 1), 3)}


def one(backend, way: str, prompt: str, ids, tokens: int) -> dict:
    if way == "specviz":
        return plain(backend, prompt, tokens)
    return generate_rate(backend, ids, way, tokens)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default=None, help="default: the backend's choice")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--ways", default=",".join(WAYS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--prompt-file", type=Path, default=PROMPT)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--markdown", type=Path, default=None)
    args = p.parse_args(argv)
    ways = [w for w in args.ways.split(",") if w in WAYS]
    backend = load_backend("transformers", resolve(args.target), device=args.device,
                           threads=args.threads, dtype=args.dtype, compile="on")
    prompt = args.prompt_file.read_text(encoding="utf-8")
    ids = backend.encode_prompt(backend.format_prompt(prompt, True), True)
    warm = {}
    for way in ways:  # the compiles and recordings, each way's once
        started = time.perf_counter()
        for _ in range(UNTIMED):
            one(backend, way, prompt, ids, args.max_tokens)
        warm[way] = round(time.perf_counter() - started, 1)
        print(f"{way}: warmed in {warm[way]} s", flush=True)
    rounds = []
    for i in range(args.rounds):
        rounds.append({way: one(backend, way, prompt, ids, args.max_tokens) for way in ways})
        print(f"round {i + 1}: " + ", ".join(f"{w} {r['tok_s']:.1f} tok/s ({r['tokens']})"
                                             for w, r in rounds[-1].items()), flush=True)
    summary = {}
    for way in ways:
        speeds = [r[way]["tok_s"] for r in rounds]
        summary[way] = {"tok_s": speeds, "median_tok_s": round(statistics.median(speeds), 2),
                        "spread": round(max(speeds) / max(min(speeds), 1e-9), 3),
                        "median_step_ms": round(statistics.median(r[way]["step_ms"]
                                                                  for r in rounds), 3),
                        "warm_s": warm[way]}
    result = {"target": args.target, "device": backend.device, "dtype": backend.dtype,
              "compiled": backend.compiled, "max_tokens": args.max_tokens,
              "prompt_tokens": len(ids), "ways": summary, "rounds": rounds}
    table = markdown(result)
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n", encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")


def markdown(result: dict) -> str:
    base = result["ways"].get("generate-static", {}).get("median_tok_s")
    lines = [f"{result['target']} on {result['device']}, {result['dtype']}, up to "
             f"{result['max_tokens']} tokens, {len(result['rounds'])} rounds interleaved", "",
             "| way | tok/s each round | median | spread | step ms | over generate-static "
             "| warm-up s |", "|---|---|---|---|---|---|---|"]
    for way, s in result["ways"].items():
        ratio = f"{s['median_tok_s'] / base:.2f}x" if base else ""
        lines.append(f"| {way} | {', '.join(f'{x:.1f}' for x in s['tok_s'])} | "
                     f"{s['median_tok_s']:.1f} | {s['spread']:.2f} | {s['median_step_ms']:.2f} "
                     f"| {ratio} | {s['warm_s']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
