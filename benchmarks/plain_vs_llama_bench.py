"""Plain decoding through specviz's llama.cpp backend against llama.cpp's own `llama-bench`.

Both decode one token at a time on the same GGUF file with the same thread count, in this
one script, alternating runs so machine noise hits both alike. Prints tokens/s of each and
the ratio (specviz / llama-bench). Build llama-bench from the llama.cpp sources inside the
llama-cpp-python sdist (same llama.cpp version as the binding), into a cache folder:

    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d ~/.cache/specviz-peers
    tar xzf ... && cmake -B build vendor/llama.cpp && cmake --build build --target llama-bench

Usage: python benchmarks/plain_vs_llama_bench.py --llama-bench PATH [--model NAME] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess

from specviz.engines.backends.llama import LlamaBackend
from specviz.engines.loop.session import RunSettings, Session, warm_up
from specviz.engines.models import resolve
from specviz.engines.oracles.none import NoOracle


def llama_bench(binary: str, model: str, threads: int, tokens: int) -> float:
    out = subprocess.run(
        [binary, "-m", model, "-p", "0", "-n", str(tokens), "-t", str(threads), "-r", "1",
         "-o", "json"],
        check=True, capture_output=True, text=True,
    ).stdout
    return float(json.loads(out)[0]["avg_ts"])


def specviz_plain(backend: LlamaBackend, tokens: int) -> float:
    # A one-token prompt, like llama-bench's generation test; EOS is not allowed to end it early.
    settings = RunSettings("The", chat=False, k=0, max_tokens=tokens)
    session = Session(backend, NoOracle(), settings)
    warm_up(backend, session.prompt_ids)
    summary = session.run_to_end()
    if summary.totals.tokens < tokens:
        raise SystemExit(f"stopped early ({summary.reason}); use a longer-running prompt")
    return summary.tok_per_s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--llama-bench", required=True)
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    path = str(resolve(args.model))
    backend = LlamaBackend(path, n_ctx=1024, threads=args.threads)
    ours, theirs = [], []
    for _ in range(args.rounds):
        theirs.append(llama_bench(args.llama_bench, path, args.threads, args.tokens))
        ours.append(specviz_plain(backend, args.tokens))
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"model {args.model}, {args.threads} threads, {args.tokens} tokens, "
          f"median of {args.rounds} alternating rounds")
    print(f"llama-bench: {b:.2f} tokens/s  {[f'{x:.2f}' for x in theirs]}")
    print(f"specviz:     {a:.2f} tokens/s  {[f'{x:.2f}' for x in ours]}")
    print(f"ratio specviz / llama-bench: {a / b:.3f}")


if __name__ == "__main__":
    main()
