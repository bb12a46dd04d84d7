"""specviz's llama.cpp backend against llama.cpp's own speculative examples, same work.

- draft model: `llama-speculative-simple` vs specviz's draft oracle (same target, draft, K)
- lookup: `llama-lookup` (an n-gram cache over the context) vs specviz's ngram oracle (the
  same idea) and its prompt-lookup oracle; `llama-speculative-simple --spec-type
  ngram-simple` (match the last n tokens, copy K: prompt lookup) vs specviz's prompt lookup

Both sides decode the same chat-formatted prompt (first turn of each question), greedy, same
threads and K, in this one script, alternating per prompt so machine noise hits both alike.
On a shared machine identical runs differ by 10% or more: `--repeat N` runs every pairing N
times, interleaved, and keeps each side's median time per prompt (auto K restarts every repeat
from its state before the prompt, so it never learns a prompt twice).
Tokens/s are generation only (prompt processing excluded) on both sides: llama.cpp's
"decoded N tokens in S seconds" line, specviz's generation time; per configuration, all
tokens over all generation time. Writes a markdown table, with each side's accepted and
drafted tokens (the peer's own n_accept / n_drafted lines): where they match, both sides did
the same work and the ratio is the loops' speed alone; and the median and quartiles of the
ratios of every repeat's two back-to-back runs, which show how far the machine's noise reaches.

Against ngram-simple (which matches exactly the last `--max-ngram` tokens), specviz's prompt
lookup matches that n-gram size only, so both do the same work. `--k 2,4,8` runs both sides
at each K; `--auto` also runs specviz with `--k auto` (cost-aware K per step, from the stored
profile) and sets it against the peer's best K in hindsight, which a user of the peer would
have to find by trying.

Build the examples from the llama.cpp sources inside the llama-cpp-python sdist (the same
llama.cpp the binding uses), into a cache folder (see plain_vs_llama_bench.py):

    cmake --build build --target llama-speculative-simple llama-lookup

Usage: python benchmarks/peers_llama_cpp.py --bin-dir DIR --questions FILE.jsonl
         [--target M] [--draft M] [--pairs draft,ngram,prompt-lookup] [--k N[,N...]]
         [--auto] [--repeat N] [--threads N] [--max-tokens N] [--limit N] [--markdown OUT.md]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import NamedTuple

from specviz.engines.backends.llama import LlamaBackend
from specviz.engines.bench.spec_bench import load_questions
from specviz.engines.cost import profile as prof
from specviz.engines.cost.auto_k import AutoK
from specviz.engines.events import StepEvent
from specviz.engines.loop.session import RunSettings, Session, warm_up
from specviz.engines.models import resolve
from specviz.engines.oracles import info, make_oracle

DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
DRAFTED = re.compile(r"n_drafted\s*=\s*(\d+)")
ACCEPTED = re.compile(r"n_accept\s*=\s*(\d+)")
# (our oracle, peer): which of ours does the same work as which of theirs. Peers:
# "speculative-simple" (draft model), "lookup" (llama-lookup's n-gram cache),
# "ngram-simple" (llama-speculative-simple --spec-type ngram-simple: prompt lookup).
PAIRS = (("draft", "speculative-simple"), ("ngram", "lookup"), ("prompt-lookup", "lookup"),
         ("prompt-lookup", "ngram-simple"))
AUTO = "auto"  # specviz's cost-aware K
PEER_LABEL = {"speculative-simple": "llama-speculative-simple (draft-simple)",
              "lookup": "llama-lookup",
              "ngram-simple": "llama-speculative-simple (ngram-simple)"}


class Run(NamedTuple):
    """One side's generation on one prompt; drafted and accepted show whether both sides
    did the same work (same drafts, same verdicts)."""

    tokens: int
    seconds: float
    drafted: int
    accepted: int


def peer_run(peer: str, k: int, args, prompt_file: Path, work: Path) -> Run:
    """The peer's generation, from its own log lines."""
    binary = args.bin_dir / ("llama-lookup" if peer == "lookup" else "llama-speculative-simple")
    # -bf and --no-escape: the prompt byte for byte. (-f drops a final newline, here the one
    # after the chat template's "assistant" line, and escapes like \n in code would be
    # expanded: the peer would continue a different prompt.)
    cmd = [str(binary), "-m", str(resolve(args.target)), "-bf", str(prompt_file), "--no-escape",
           "-n", str(args.max_tokens), "-t", str(args.threads), "-c", str(args.n_ctx),
           "--temp", "0", "--spec-draft-n-max", str(k), "--seed", "0"]
    if peer == "speculative-simple":
        # p-min 0: draft K tokens every time, as specviz's draft oracle does (same work).
        cmd += ["--spec-type", "draft-simple", "-md", str(resolve(args.draft)),
                "--spec-draft-n-min", "0", "--spec-draft-p-min", str(args.p_min)]
    elif peer == "ngram-simple":  # match the last max-ngram tokens, copy K: prompt lookup
        cmd += ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(args.max_ngram),
                "--spec-ngram-simple-size-m", str(k)]
    else:
        dynamic = work / "lookup-dynamic.bin"
        dynamic.unlink(missing_ok=True)  # no learning carried over between prompts
        cmd += ["-lcd", str(dynamic)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    log = out.stderr + out.stdout
    found = [pattern.search(log) for pattern in (DECODED, DRAFTED, ACCEPTED)]
    if out.returncode != 0 or not all(found):
        tail = (out.stderr or out.stdout).strip().splitlines()[-5:]
        raise SystemExit(f"{peer} failed ({out.returncode}): " + " | ".join(tail))
    decoded, drafted, accepted = found
    # llama-lookup's clock starts after its first token (sampled from the prompt's logits):
    # that token is left out, as specviz's first step is (see our_run).
    free = 1 if peer == "lookup" else 0
    return Run(int(decoded.group(1)) - free, float(decoded.group(2)), int(drafted.group(1)),
               int(accepted.group(1)))


def our_run(target: LlamaBackend, oracle, k: int | str, prompt: str, args,
            policy: AutoK | None = None, skip_first: bool = False) -> Run:
    """specviz's generation; k "auto" with `policy`. Against llama-lookup the first step is
    left out (`skip_first`): llama-lookup runs the whole prompt before its clock starts, so
    its first token costs it nothing, while specviz's first step runs the prompt's last token
    (with a draft). Both sides then count the rounds after the first."""
    settings = RunSettings(prompt, k=32 if k == AUTO else k, max_tokens=args.max_tokens)
    steps = [e for e in Session(target, oracle, settings, k_policy=policy)
             if isinstance(e, StepEvent)]
    totals, first = steps[-1].totals, steps[0].totals
    if not skip_first:
        return Run(totals.tokens, totals.compute_ms / 1000, totals.proposed, totals.accepted)
    return Run(totals.tokens - first.tokens, (totals.compute_ms - first.compute_ms) / 1000,
               totals.proposed - first.proposed, totals.accepted - first.accepted)



def our_oracle(name: str, peer: str, target, draft, args):
    # ngram-simple matches exactly max-ngram tokens: ours matches that size only (same work).
    min_ngram = args.max_ngram if peer == "ngram-simple" else None
    sizes = {"max_ngram": args.max_ngram, "min_ngram": min_ngram}
    described = info(name)  # the n-gram sizes where the oracle has them (not a draft model)
    return make_oracle(name, target=target, draft=draft,
                       settings={k: v for k, v in sizes.items() if described.setting(k)})


def auto_policy(oracle, target, draft, args) -> AutoK:
    profiles = []
    for model, backend in ((args.target, target), (args.draft, draft)):
        if backend is None or (backend is draft and not info(oracle.name).needs_draft):
            profiles.append(None)
            continue
        stored = prof.load(model, "llama", backend.device, args.threads)
        if stored is None:
            raise SystemExit(f"--auto needs a stored profile: specviz profile --target {model} "
                             f"--threads {args.threads}")
        profiles.append(stored)
    return AutoK(oracle, profiles[0], profiles[1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin-dir", type=Path, required=True, help="folder with the built examples")
    p.add_argument("--questions", type=Path, required=True)
    p.add_argument("--categories", default=None)
    p.add_argument("--limit", type=int, default=None, help="questions per category group")
    p.add_argument("--target", default="qwen2.5-coder-1.5b")
    p.add_argument("--draft", default="qwen2.5-coder-0.5b")
    p.add_argument("--pairs", default="draft,ngram,prompt-lookup", help="our oracles to compare")
    p.add_argument("--k", default="4", help="draft length(s), comma-separated")
    p.add_argument("--auto", action="store_true",
                   help="also run ours with auto K, against the peer's best K")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per pairing and prompt, interleaved; the median time is kept")
    p.add_argument("--p-min", type=float, default=0.0,
                   help="llama-speculative-simple's --spec-draft-p-min (0: same work as ours)")
    p.add_argument("--max-ngram", type=int, default=3, help="prompt lookup's n-gram size")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--n-ctx", type=int, default=4096)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--markdown", type=Path, default=None)
    args = p.parse_args()
    ks = [int(k) for k in args.k.split(",")]
    if args.repeat < 1:
        raise SystemExit("--repeat must be at least 1")

    wanted = [pair for pair in PAIRS if pair[0] in args.pairs.split(",")]
    questions = load_questions(args.questions, args.categories and args.categories.split(","),
                               args.limit)
    target = LlamaBackend(resolve(args.target), n_ctx=args.n_ctx, threads=args.threads)
    draft = None
    if any(info(o).needs_draft for o, _ in wanted):
        draft = LlamaBackend(resolve(args.draft), n_ctx=args.n_ctx, threads=args.threads)
    oracles = {pair: our_oracle(*pair, target, draft, args) for pair in wanted}
    policies = {pair: auto_policy(oracles[pair], target, draft, args)
                for pair in wanted if args.auto}
    # (pair, side, k) -> [tokens, seconds, drafted, accepted] summed over the prompts
    sums: dict[tuple, list[float]] = {}
    paired: dict[tuple, list[float]] = {}  # (pair, k) -> ours/peer ratio of every repeat
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for q in questions:
            prompt_text = target.format_prompt(q.turns[0], chat=True)
            prompt_file = work / "prompt.txt"
            prompt_file.write_text(prompt_text, encoding="utf-8")
            warm_up(target, target.encode_prompt(prompt_text, True))
            before = {pair: policy.snapshot() for pair, policy in policies.items()}
            runs: dict[tuple, list[Run]] = {}
            for _ in range(args.repeat):
                for pair in wanted:
                    for k in ks:
                        runs.setdefault((pair, "peer", k), []).append(
                            peer_run(pair[1], k, args, prompt_file, work))
                        runs.setdefault((pair, "ours", k), []).append(
                            our_run(target, oracles[pair], k, q.turns[0], args,
                                    skip_first=pair[1] == "lookup"))
                    if args.auto:
                        policies[pair].restore(before[pair])
                        runs.setdefault((pair, "ours", AUTO), []).append(our_run(
                            target, oracles[pair], AUTO, q.turns[0], args, policies[pair],
                            skip_first=pair[1] == "lookup"))
            rates = {key: add_median(sums, key, results) for key, results in runs.items()}
            for pair in wanted:
                for k in ks:  # each repeat's two back-to-back runs, as one ratio
                    paired.setdefault((pair, k), []).extend(
                        (o.tokens / o.seconds) / (p.tokens / p.seconds)
                        for o, p in zip(runs[pair, "ours", k], runs[pair, "peer", k]))
            for pair in wanted:
                for k in ks:
                    ours, peer = runs[pair, "ours", k][0], runs[pair, "peer", k][0]
                    print(f"q{q.question_id} {pair[0]} k={k}: ours {rates[pair, 'ours', k]:.1f}, "
                          f"{PEER_LABEL[pair[1]]} {rates[pair, 'peer', k]:.1f} tokens/s; "
                          f"accepted/drafted {ours.accepted}/{ours.drafted} vs "
                          f"{peer.accepted}/{peer.drafted}", flush=True)
                if args.auto:
                    print(f"q{q.question_id} {pair[0]} k=auto: ours "
                          f"{rates[pair, 'ours', AUTO]:.1f}", flush=True)
    table = markdown(wanted, ks, sums, paired, args, len(questions))
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n", encoding="utf-8")


def add_median(sums: dict, key, results: list[Run]) -> float:
    """Add one prompt's tokens, median seconds over the repeats, drafted and accepted (of
    the first repeat: greedy, so every repeat does the same work) to the totals; its rate."""
    first = results[0]
    seconds = statistics.median(run.seconds for run in results)
    total = sums.setdefault(key, [0, 0.0, 0, 0])
    for i, value in enumerate((first.tokens, seconds, first.drafted, first.accepted)):
        total[i] += value
    return first.tokens / seconds


def spread(ratios: list[float]) -> str:
    """Median and quartiles of the paired ratios: how far one run's noise reaches."""
    if len(ratios) < 4:
        return f"{statistics.median(ratios):.2f}x"
    q1, q2, q3 = statistics.quantiles(ratios, n=4)
    return f"{q2:.2f}x ({q1:.2f}-{q3:.2f})"


def markdown(wanted, ks, sums, paired, args, n_prompts: int) -> str:
    def rate(key):
        tokens, seconds, _, _ = sums[key]
        return tokens / seconds

    def work(key):
        _, _, drafted, accepted = sums[key]
        return f"{accepted}/{drafted}"

    drafted = any(info(o).needs_draft for o, _ in wanted)
    lines = [f"{args.target}" + (f" + {args.draft}" if drafted else "") +
             f", llama.cpp, {args.threads} threads, greedy, {args.max_tokens} tokens, "
             f"{n_prompts} prompts (all tokens / all generation time"
             + (f", median of {args.repeat} runs per prompt" if args.repeat > 1 else "") + ")", "",
             "| ours | peer | K | ours tokens/s | peer tokens/s | ratio (ours / peer) "
             "| paired ratios: median (quartiles) | accepted/drafted, ours "
             "| accepted/drafted, peer |",
             "|---|---|---|---|---|---|---|---|---|"]
    for pair in wanted:
        ours_label = f"specviz {pair[0]}" + (f" ({args.max_ngram}-gram only)"
                                              if pair[1] == "ngram-simple" else "")
        for k in ks:
            ours, peer = (pair, "ours", k), (pair, "peer", k)
            a, b = rate(ours), rate(peer)
            lines.append(f"| {ours_label} | {PEER_LABEL[pair[1]]} | {k} | {a:.1f} | {b:.1f} | "
                         f"{a / b:.2f}x | {spread(paired[pair, k])} | {work(ours)} | "
                         f"{work(peer)} |")
        if args.auto:
            best = max(ks, key=lambda k: rate((pair, "peer", k)))
            ours, peer = (pair, "ours", AUTO), (pair, "peer", best)
            a, b = rate(ours), rate(peer)
            lines.append(f"| {ours_label} | {PEER_LABEL[pair[1]]} | auto vs the peer's best "
                         f"({best}) | {a:.1f} | {b:.1f} | {a / b:.2f}x | - | {work(ours)} | "
                         f"{work(peer)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
