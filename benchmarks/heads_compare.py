"""EAGLE head against Medusa heads trained on the same answers, the same way.

The target writes answers once (its layer features and final hidden states kept), from the
Spec-Bench and code-edit dev prompts in benchmarks/prompts; specviz's own sample prompts are
left out of training and are what the speed runs decode (code-edit-*.txt and the prose ones:
chat-*, summarise-*). Both kinds of heads train on those answers; their held-out figures print,
then `specviz run --baseline --json` for each oracle on each prompt set: mean accepted tokens
per step and the speedup over plain decoding timed in the same process, summed over prompts.
A training curve: `--curve 2000,4000,8000` trains the EAGLE head on the first N tokens of the
answers too, each with the same steps per token, and prints its held-out acceptance.

Usage: python benchmarks/heads_compare.py --target smollm2-135m --tokens 8000 --threads 2
         [--eagle-steps 600] [--medusa-epochs 6] [--out DIR] [--skip-train] [--runs eagle:4,...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from specviz.app.cli.cmd_train_heads import _answers, _prompts_read, _read_files, _reading
from specviz.engines.backends import load_backend
from specviz.engines.corpus import bundled_prompts, read_prompts
from specviz.engines.eagle.checkpoint import default_layers
from specviz.engines.machine.precision import PRECISIONS
from specviz.engines.medusa.heads import save_heads
from specviz.engines.models import resolve
from specviz.engines.training import answers as ta
from specviz.engines.training import eagle as et
from specviz.engines.training import medusa as mt

ROOT = Path(__file__).resolve().parent
SETS = {"code-edit": "code-edit-*.txt", "prose": "[cs][hu]*.txt"}  # chat-*, summarise-*


def specviz(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "specviz", *args], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def train_both(a, out: Path) -> None:
    import numpy as np

    target = load_backend("transformers", resolve(a.target), threads=a.threads)
    layers = default_layers(int(target.model.config.num_hidden_layers))
    prompts = read_prompts([ROOT / "prompts" / "code_edit_dev.jsonl",
                            ROOT / "prompts" / "spec_bench_dev.jsonl"])
    prompts = [prompts[i] for i in np.random.default_rng(0).permutation(len(prompts))
               for _ in range(a.samples)]
    settings = et.EagleSettings(tokens=a.tokens, max_new=a.max_new, steps=a.eagle_steps,
                                ttt=a.depth, temperature=a.temperature,
                                prompt_batch=a.prompt_batch, precision=a.precision)
    answers, gen_s = _answers(target, prompts, settings, out, True, layers)
    facts = {"tokens": sum(len(x.tokens) for x in answers), "generate_seconds": gen_s}
    print(f"answers: {len(answers)}, {facts['tokens']} tokens (written in {gen_s} s)")
    reading, read_s = _reading(target, _read_files(a.read), a.read_tokens, out, True, layers, 0)
    if a.read_prompts:
        prompts_read, seconds = _prompts_read(target, answers, settings, out, True, layers)
        reading += prompts_read
        read_s = seconds if read_s is None else read_s + (seconds or 0)
    if reading:
        facts |= {"read_tokens": sum(len(x.tokens) for x in reading), "read_seconds": read_s}
        print(f"read: {len(reading)} chunks, {facts['read_tokens']} tokens (in {read_s} s)")
    if "medusa" in a.kinds:
        medusa = ta.TrainSettings(n_heads=a.depth, tokens=a.tokens, max_new=a.max_new,
                                  epochs=a.medusa_epochs, temperature=a.temperature,
                                  precision=a.precision)
        t0 = time.perf_counter()
        m = mt.train(target, answers, medusa, None, facts, reading)
        save_heads(m.heads, m.config, out / "medusa")
        print(f"medusa: {m.config.training['steps']} steps in {time.perf_counter() - t0:.0f} "
              f"s; held-out top-1 by head {m.config.accuracy['top1']}", flush=True)
    if "eagle" not in a.kinds:
        return
    for n in a.curve:
        part = _first_tokens(answers, n)
        steps = max(1, round(a.eagle_steps * n / facts["tokens"]))
        r = et.train(target, part, et.EagleSettings(steps=steps, ttt=a.depth,
                                                    precision=a.precision), None, facts,
                     layers=layers)
        print(f"curve: {n} tokens, {steps} steps: acceptance by depth "
              f"{r.accuracy['acceptance']} (mean accepted {r.accuracy['mean_accepted']})",
              flush=True)
    t0 = time.perf_counter()
    e = et.train(target, answers, settings, _progress, facts, state_dir=out / "eagle",
                 layers=layers, reading=reading)
    et.save(e, target, out / "eagle")
    print(f"eagle: {e.training['steps']} steps in {time.perf_counter() - t0:.0f} s; held-out "
          f"acceptance by depth {e.accuracy['acceptance']} (mean accepted "
          f"{e.accuracy['mean_accepted']}); conditional {e.accuracy['conditional']}")


def _progress(step: int, steps: int, loss: float) -> None:
    if step % 100 == 0 or step + 1 == steps:
        print(f"  eagle step {step + 1}/{steps}, loss {loss:.3f}, {time.strftime('%H:%M:%S')}",
              flush=True)


def _first_tokens(answers, n):
    kept, total = [], 0
    for answer in answers:
        if total >= n:
            break
        kept.append(answer)
        total += len(answer.tokens)
    return kept


def speed_runs(a, out: Path) -> None:
    common = ["--backend", "transformers", "--target", a.target, "--max-tokens",
              str(a.max_tokens), "--medusa-heads", str(out / "medusa"), "--eagle-head",
              str(out / "eagle")]
    if a.threads:
        common += ["--threads", str(a.threads)]
    print("set        oracle     K     accepted/step  speedup  same as plain")
    for name, pattern in SETS.items():
        files = sorted(bundled_prompts().glob(pattern))
        for run in a.runs:
            oracle, k = run.split(":")
            tokens = steps = same = 0
            spec_s = plain_s = 0.0
            for f in files:
                r = specviz("run", *common, "--oracle", oracle, "--k", k, "--baseline",
                            "--json", "--prompt-file", str(f))
                tokens, steps = tokens + r["tokens"], steps + r["steps"]
                spec_s += r["tokens"] / r["tok_per_s"]
                plain_s += r["tokens"] / r["baseline_tok_per_s"]
                same += bool(r["identical_to_baseline"])
            print(f"{name:10} {oracle:10} {k:5} {tokens / steps:13.2f}  "
                  f"{plain_s / spec_s:6.2f}x  {same}/{len(files)}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--tokens", type=int, default=8000)
    p.add_argument("--max-new", type=int, default=128)
    p.add_argument("--samples", type=int, default=1, help="answers a prompt (train-heads)")
    p.add_argument("--temperature", type=float, default=0.0, help="of the answers")
    p.add_argument("--prompt-batch", type=int, default=8, help="prompts answered together")
    p.add_argument("--depth", type=int, default=4, help="medusa heads / eagle rollout steps")
    p.add_argument("--eagle-steps", type=int, default=600)
    p.add_argument("--medusa-epochs", type=float, default=6.0)
    p.add_argument("--curve", type=lambda s: [int(x) for x in s.split(",") if x], default=[])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="of the heads' training products (train-heads --precision)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--runs", type=lambda s: [r for r in s.split(",") if r],
                   default=["medusa:4", "eagle:4", "eagle:auto"])
    p.add_argument("--out", type=Path, default=Path.home() / ".cache/specviz/heads-compare")
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--kinds", type=lambda s: s.split(","), default=["medusa", "eagle"])
    p.add_argument("--read", type=Path, action="append", default=[],
                   help="text the target reads too (train-heads --read)")
    p.add_argument("--read-tokens", type=int, default=100_000)
    p.add_argument("--read-prompts", action="store_true",
                   help="the target also reads the training answers' prompts")
    a = p.parse_args()
    a.out = a.out / a.target
    if not a.skip_train:
        train_both(a, a.out)
    if a.runs:
        speed_runs(a, a.out)


if __name__ == "__main__":
    main()
