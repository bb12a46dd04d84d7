"""specviz's llama.cpp backend against llama.cpp's own speculative examples, same work.

- draft model: `llama-speculative-simple` vs specviz's draft oracle (same target, draft, K)
- lookup: `llama-lookup` (an n-gram cache over the context) vs specviz's ngram oracle (the
  same idea) and its prompt-lookup oracle; `llama-speculative-simple --spec-type
  ngram-simple` (match the last n tokens, copy K: prompt lookup) vs specviz's prompt lookup

Both sides decode the same chat-formatted prompt (first turn of each question), greedy, same
threads and K, in this one script, alternating per prompt so machine noise hits both alike.
Tokens/s are generation only (prompt processing excluded) on both sides: llama.cpp's
"decoded N tokens in S seconds" line, specviz's generation time. Writes a markdown table.

Build the examples from the llama.cpp sources inside the llama-cpp-python sdist (the same
llama.cpp the binding uses), into a cache folder (see plain_vs_llama_bench.py):

    cmake --build build --target llama-speculative-simple llama-lookup

Usage: python benchmarks/peers_llama_cpp.py --bin-dir DIR --questions FILE.jsonl
         [--target M] [--draft M] [--k N] [--threads N] [--max-tokens N] [--limit N]
         [--markdown OUT.md]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

from specviz.engines.backends.llama import LlamaBackend
from specviz.engines.bench import load_questions
from specviz.engines.models import resolve
from specviz.engines.oracles import make_oracle
from specviz.engines.session import RunSettings, Session, warm_up

DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
# (our oracle, peer): which of ours does the same work as which of theirs. Peers:
# "speculative-simple" (draft model), "lookup" (llama-lookup's n-gram cache),
# "ngram-simple" (llama-speculative-simple --spec-type ngram-simple: prompt lookup).
PAIRS = (("draft", "speculative-simple"), ("ngram", "lookup"), ("prompt-lookup", "lookup"),
         ("prompt-lookup", "ngram-simple"))
PEER_LABEL = {"speculative-simple": "llama-speculative-simple (draft-simple)",
              "lookup": "llama-lookup",
              "ngram-simple": "llama-speculative-simple (ngram-simple)"}


def peer_tok_per_s(peer: str, args, prompt_file: Path, work: Path) -> float:
    binary = args.bin_dir / ("llama-lookup" if peer == "lookup" else "llama-speculative-simple")
    cmd = [str(binary), "-m", str(resolve(args.target)), "-f", str(prompt_file),
           "-n", str(args.max_tokens), "-t", str(args.threads), "-c", str(args.n_ctx),
           "--temp", "0", "--spec-draft-n-max", str(args.k), "--seed", "0"]
    if peer == "speculative-simple":
        # p-min 0: draft K tokens every time, as specviz's draft oracle does (same work).
        cmd += ["--spec-type", "draft-simple", "-md", str(resolve(args.draft)),
                "--spec-draft-n-min", "0", "--spec-draft-p-min", str(args.p_min)]
    elif peer == "ngram-simple":  # match the last max-ngram tokens, copy K: prompt lookup
        cmd += ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(args.max_ngram),
                "--spec-ngram-simple-size-m", str(args.k)]
    else:
        dynamic = work / "lookup-dynamic.bin"
        dynamic.unlink(missing_ok=True)  # no learning carried over between prompts
        cmd += ["-lcd", str(dynamic)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    match = DECODED.search(out.stderr + out.stdout)
    if out.returncode != 0 or not match:
        tail = (out.stderr or out.stdout).strip().splitlines()[-5:]
        raise SystemExit(f"{peer} failed ({out.returncode}): " + " | ".join(tail))
    return int(match.group(1)) / float(match.group(2))


def ours_tok_per_s(target: LlamaBackend, oracle, prompt: str, args) -> float:
    settings = RunSettings(prompt, k=args.k if oracle.name != "none" else 0,
                           max_tokens=args.max_tokens)
    session = Session(target, oracle, settings)
    return session.run_to_end().tok_per_s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin-dir", type=Path, required=True, help="folder with the built examples")
    p.add_argument("--questions", type=Path, required=True)
    p.add_argument("--categories", default=None)
    p.add_argument("--limit", type=int, default=None, help="questions per category group")
    p.add_argument("--target", default="qwen2.5-coder-1.5b")
    p.add_argument("--draft", default="qwen2.5-coder-0.5b")
    p.add_argument("--pairs", default="draft,ngram,prompt-lookup", help="our oracles to compare")
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--p-min", type=float, default=0.0,
                   help="llama-speculative-simple's --spec-draft-p-min (0: same work as ours)")
    p.add_argument("--max-ngram", type=int, default=3, help="prompt lookup's n-gram size")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--n-ctx", type=int, default=4096)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--markdown", type=Path, default=None)
    args = p.parse_args()

    wanted = [pair for pair in PAIRS if pair[0] in args.pairs.split(",")]
    keys = [f"{o}/{peer}" for o, peer in wanted]
    questions = load_questions(args.questions, args.categories and args.categories.split(","),
                               args.limit)
    target = LlamaBackend(resolve(args.target), n_ctx=args.n_ctx, threads=args.threads)
    draft = None
    if any(o == "draft" for o, _ in wanted):
        draft = LlamaBackend(resolve(args.draft), n_ctx=args.n_ctx, threads=args.threads)
    ours: dict[str, list[float]] = {key: [] for key in keys}
    theirs: dict[str, list[float]] = {key: [] for key in keys}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for q in questions:
            prompt_text = target.format_prompt(q.turns[0], chat=True)
            prompt_file = work / "prompt.txt"
            prompt_file.write_text(prompt_text, encoding="utf-8")
            warm_up(target, target.encode_prompt(prompt_text, True))
            for key, (oracle_name, peer) in zip(keys, wanted):
                oracle = make_oracle(oracle_name, target=target, draft=draft,
                                     max_ngram=args.max_ngram)
                theirs[key].append(peer_tok_per_s(peer, args, prompt_file, work))
                ours[key].append(ours_tok_per_s(target, oracle, q.turns[0], args))
                print(f"q{q.question_id} {oracle_name}: ours {ours[key][-1]:.1f}, "
                      f"{PEER_LABEL[peer]} {theirs[key][-1]:.1f} tokens/s", flush=True)
    table = markdown(wanted, ours, theirs, args)
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n", encoding="utf-8")


def markdown(wanted, ours, theirs, args) -> str:
    lines = [f"{args.target}" + (f" + {args.draft}" if any(o == "draft" for o, _ in wanted)
                                 else "") +
             f", llama.cpp, {args.threads} threads, K={args.k}, greedy, {args.max_tokens} "
             f"tokens, {len(next(iter(ours.values())))} prompts (median over prompts)", "",
             "| ours | peer | ours tokens/s | peer tokens/s | ratio (ours / peer) |",
             "|---|---|---|---|---|"]
    for oracle_name, peer in wanted:
        key = f"{oracle_name}/{peer}"
        a, b = statistics.median(ours[key]), statistics.median(theirs[key])
        ratios = [x / y for x, y in zip(ours[key], theirs[key])]
        lines.append(f"| specviz {oracle_name} | {PEER_LABEL[peer]} | {a:.1f} | {b:.1f} | "
                     f"{statistics.median(ratios):.2f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
