"""`specviz pair`'s prediction against what `specviz run` measures, on the same prompts.

Runs `specviz pair --json` once, then for each K `specviz run --oracle ORACLE --k K
--baseline --json` on each of the pair's default prompts (the same answers' length), and sums
tokens and seconds over the prompts: the measured speedup is the speculative tokens/s over the
plain run's, both timed in the same process. Prints predicted and measured tokens per step and
speedup per K, and the relative error of the predicted speedup.

Usage: python benchmarks/pair_check.py --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b
         [--oracle draft] [--ks 1,2,4] [--max-tokens 96] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from specviz.engines.corpus import PAIR_PROMPTS, bundled_prompts
from specviz.engines.oracles import info


def specviz(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "specviz", *args], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--target", required=True)
    p.add_argument("--draft", required=True)
    p.add_argument("--oracle", default="draft")
    p.add_argument("--ks", default="1,2,4")
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--threads", type=int, default=None)
    a = p.parse_args()
    common = ["--target", a.target, "--max-tokens", str(a.max_tokens)]
    if a.threads:
        common += ["--threads", str(a.threads)]
    ks = [int(k) for k in a.ks.split(",")]
    report = specviz("pair", *common, "--draft", a.draft, "--k-max", str(max(ks)), "--json")
    predicted = {r["k"]: r for r in report["predictions"]}
    print(f"pair: {report['verdict']} (greedy agreement {report['greedy_agreement']:.2f})")
    print("K  tokens/step pred  meas   speedup pred  meas   error")
    draft_flag = f"--{info(a.oracle).input('draft').option}"  # cross-draft's own, or --draft
    for k in ks:
        tokens = steps = 0
        spec_s = plain_s = 0.0
        for name in PAIR_PROMPTS:
            r = specviz("run", *common, "--oracle", a.oracle, draft_flag, a.draft, "--k", str(k),
                        "--baseline", "--json", "--prompt-file",
                        str(bundled_prompts() / name))
            tokens, steps = tokens + r["tokens"], steps + r["steps"]
            spec_s += r["tokens"] / r["tok_per_s"]
            plain_s += r["tokens"] / r["baseline_tok_per_s"]
        measured = plain_s / spec_s
        pred = predicted[k]
        error = pred["speedup"] / measured - 1
        print(f"{k:<2} {pred['tokens_per_step']:15.2f} {tokens / steps:5.2f}   "
              f"{pred['speedup']:11.2f}x {measured:5.2f}x  {error:+.0%}")


if __name__ == "__main__":
    main()
