"""What a speculating llama-server buys over a plain one, read through specviz's server lanes.

Starts two llama-servers of one target on 127.0.0.1 (the build the tests use:
tests/llama_server.py): one plain, one speculating with `--spec` (its draft model or n-gram
type). Each prompt is decoded on both, `--repeat` times, alternating which goes first; only one
server works at a time. Every run is a server lane (engines.servers), so the figures are the
engine's own clocks, the ones the window draws. Per prompt set: mean accepted tokens per step,
acceptance, the speedup (the median over prompts and repeats of speculating tok/s / plain
tok/s, both measured back to back), whether the outputs are identical, and a ceiling: tokens
per step, the speedup if a verification cost one token's step and drafting were free.

Usage: python benchmarks/server_lanes.py --target qwen2.5-coder-1.5b
         --spec "-md qwen2.5-coder-0.5b --spec-type draft-simple --spec-draft-n-max 8"
         [--sets code-edit,prose] [--max-tokens 128] [--repeat 2] [--threads 2] [--no-chat]
         [--both "--poll 0"]
(model names in --spec are resolved like --target: registry names or files)
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from pathlib import Path

from specviz.engines import events as ev
from specviz.engines.host import run_spec as rs
from specviz.engines.host.run_builder import build_server_lane
from specviz.engines.models import resolve
from specviz.engines.oracles.registry import SERVER

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the llama-server build the tests use

import llama_server  # noqa: E402

SETS = {"code-edit": "code-edit-*.txt", "prose": "[cs][hu]*.txt"}  # chat-*, summarise-*


def decode(url: str, prompt: str, args: argparse.Namespace) -> ev.SummaryEvent:
    request = rs.RunRequest(prompt, rs.ModelChoice("server"), max_tokens=args.max_tokens,
                            chat=args.chat)
    lane = build_server_lane("bench", rs.LaneSpec(SERVER, server=url), request)
    for _ in lane.steps():
        pass
    return lane.summary


def measure(plain: str, spec: str, prompts: list[Path], args) -> dict:
    ratios, same, totals = [], 0, []
    for rep in range(args.repeat):
        for i, path in enumerate(prompts):
            prompt = path.read_text()
            order = (plain, spec) if (rep + i) % 2 == 0 else (spec, plain)
            runs = {url: decode(url, prompt, args) for url in order}
            base, fast = runs[plain], runs[spec]
            ratios.append(fast.tok_per_s / base.tok_per_s)
            same += fast.text == base.text
            totals.append(fast.totals)
            print(f"  {path.name} #{rep + 1}: {ratios[-1]:.2f}x, "
                  f"{fast.totals.tokens / fast.totals.steps:.2f} tokens/step", file=sys.stderr)
    steps = sum(t.steps for t in totals)
    tokens = sum(t.tokens for t in totals)
    proposed = sum(t.proposed for t in totals)
    accepted = sum(t.accepted for t in totals)
    return {"speedup": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
            "accepted_per_step": accepted / steps, "tokens_per_step": tokens / steps,
            "acceptance": accepted / proposed if proposed else None,
            "identical": f"{same}/{len(ratios)}"}


def spec_args(text: str) -> list[str]:
    """--spec's words, with the model after -md resolved like --target."""
    words = shlex.split(text)
    return [str(resolve(w)) if i and words[i - 1] in ("-md", "--model-draft") else w
            for i, w in enumerate(words)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True)
    p.add_argument("--spec", required=True, help="llama-server's speculation arguments")
    p.add_argument("--sets", default="code-edit,prose")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-chat", dest="chat", action="store_false")
    p.add_argument("--both", default="", help="llama-server arguments for both servers, "
                   "e.g. \"--poll 0\"")
    args = p.parse_args()
    binary = llama_server.binary() or llama_server.build()
    target = resolve(args.target)
    both = shlex.split(args.both)
    plain = llama_server.RunningServer(binary, target, *both, threads=args.threads)
    spec = llama_server.RunningServer(binary, target, *both, *spec_args(args.spec),
                                      threads=args.threads)
    print(f"{target.name}, speculating with: {args.spec}; both: {args.both or '-'}; "
          f"{args.max_tokens} tokens, "
          f"{'chat' if args.chat else 'raw'}, {args.repeat} repeats\n")
    print("| prompts | drafts accepted / step | acceptance | tokens / step (ceiling) | "
          "speedup (min-max) | of the ceiling | identical |")
    print("|---|---|---|---|---|---|---|")
    try:
        for name in args.sets.split(","):
            prompts = sorted((ROOT / "assets/prompts").glob(SETS[name]))
            r = measure(plain.url, spec.url, prompts, args)
            acceptance = "-" if r["acceptance"] is None else f"{r['acceptance']:.0%}"
            print(f"| {name} ({len(prompts)}) | {r['accepted_per_step']:.2f} | {acceptance} | "
                  f"{r['tokens_per_step']:.2f}x | {r['speedup']:.2f}x ({r['min']:.2f}-"
                  f"{r['max']:.2f}) | {r['speedup'] / r['tokens_per_step']:.0%} | "
                  f"{r['identical']} |", flush=True)
    finally:
        plain.close()
        spec.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
