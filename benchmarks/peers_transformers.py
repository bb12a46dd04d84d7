"""specviz's transformers backend against Hugging Face transformers' own speculative decoding.

- plain: `model.generate()` greedy vs specviz with no oracle
- prompt lookup: `generate(prompt_lookup_num_tokens=K)` vs specviz's prompt-lookup oracle
  (same longest n-gram size)
- draft model: `generate(assistant_model=draft)` with a constant K and no confidence cut-off
  vs specviz's draft oracle

Same model objects (specviz's backend holds the transformers model; generate() runs on that
very object), same chat-formatted prompt ids, greedy, in this one script, alternating per
prompt. Tokens/s count the whole call on both sides (prompt processing included: generate()
does not report it apart). Writes a markdown table.

Usage: python benchmarks/peers_transformers.py --questions FILE.jsonl [--target M]
         [--draft M] [--k N] [--max-tokens N] [--limit N] [--threads N] [--markdown OUT.md]
Models: registry names, .gguf files (dequantised by transformers) or model folders.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from specviz.engines.backends.hf import TransformersBackend
from specviz.engines.bench import load_questions
from specviz.engines.models import resolve
from specviz.engines.oracles import make_oracle
from specviz.engines.session import RunSettings, Session

METHODS = ("none", "prompt-lookup", "draft")
PEER = {"none": "generate()", "prompt-lookup": "generate(prompt_lookup_num_tokens=K)",
        "draft": "generate(assistant_model=...)"}


def peer_run(target: TransformersBackend, draft: TransformersBackend | None, method: str,
             ids: list[int], args) -> tuple[int, float]:
    """(new tokens, seconds) of transformers' own generate()."""
    torch = target._torch
    model = target.model
    kwargs = {"max_new_tokens": args.max_tokens, "do_sample": False,
              "eos_token_id": sorted(target.eos_ids), "pad_token_id": min(target.eos_ids)}
    if method == "prompt-lookup":
        kwargs |= {"prompt_lookup_num_tokens": args.k, "max_matching_ngram_size": args.max_ngram}
    elif method == "draft":
        cfg = draft.model.generation_config
        cfg.num_assistant_tokens = args.k  # same work as ours: always K, no early cut-off
        cfg.num_assistant_tokens_schedule = "constant"
        cfg.assistant_confidence_threshold = 0.0
        kwargs["assistant_model"] = draft.model
    input_ids = torch.tensor([ids], device=model.device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
    seconds = time.perf_counter() - t0
    return int(out.shape[1] - input_ids.shape[1]), seconds


def ours_run(target: TransformersBackend, draft, method: str, prompt: str,
             args) -> tuple[int, float]:
    oracle = make_oracle(method, target=target, draft=draft, max_ngram=args.max_ngram)
    settings = RunSettings(prompt, k=0 if method == "none" else args.k,
                           max_tokens=args.max_tokens)
    summary = Session(target, oracle, settings).run_to_end()
    return summary.totals.tokens, summary.wall_ms / 1000.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--questions", type=Path, required=True)
    p.add_argument("--categories", default=None)
    p.add_argument("--limit", type=int, default=None, help="questions per category group")
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--draft", default=None, help="draft model (needed for the draft rows)")
    p.add_argument("--methods", default="none,prompt-lookup,draft")
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--max-ngram", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--markdown", type=Path, default=None)
    args = p.parse_args()

    methods = [m for m in args.methods.split(",") if m in METHODS]
    if "draft" in methods and not args.draft:
        methods.remove("draft")
        print("no --draft given: the draft-model rows are left out")
    questions = load_questions(args.questions, args.categories and args.categories.split(","),
                               args.limit)
    target = TransformersBackend(resolve(args.target), device=args.device, threads=args.threads)
    draft = (TransformersBackend(resolve(args.draft), device=args.device, threads=args.threads)
             if "draft" in methods else None)
    ours: dict[str, list[float]] = {m: [] for m in methods}
    theirs: dict[str, list[float]] = {m: [] for m in methods}
    same: dict[str, int] = {m: 0 for m in methods}
    for q in questions:
        prompt = q.turns[0]
        ids = target.encode_prompt(target.format_prompt(prompt, True), True)
        ours_run(target, draft, "none", prompt, args)  # warm-up
        for m in methods:
            n_theirs, s_theirs = peer_run(target, draft, m, ids, args)
            n_ours, s_ours = ours_run(target, draft, m, prompt, args)
            theirs[m].append(n_theirs / s_theirs)
            ours[m].append(n_ours / s_ours)
            same[m] += n_ours == n_theirs
            print(f"q{q.question_id} {m}: ours {ours[m][-1]:.1f} ({n_ours} tokens), "
                  f"transformers {theirs[m][-1]:.1f} ({n_theirs} tokens) tokens/s", flush=True)
    table = markdown(methods, ours, theirs, same, args, len(questions))
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n", encoding="utf-8")


def markdown(methods, ours, theirs, same, args, n) -> str:
    lines = [f"{args.target}" + (f" + {args.draft}" if args.draft else "") +
             f", transformers on {args.device}, K={args.k}, greedy, {args.max_tokens} tokens, "
             f"{n} prompts (median over prompts; tokens/s include prompt processing)", "",
             "| ours | peer | ours tokens/s | peer tokens/s | ratio (ours / peer) | same length |",
             "|---|---|---|---|---|---|"]
    for m in methods:
        a, b = statistics.median(ours[m]), statistics.median(theirs[m])
        ratio = statistics.median(x / y for x, y in zip(ours[m], theirs[m]))
        lines.append(f"| specviz {m} | {PEER[m]} | {a:.1f} | {b:.1f} | {ratio:.2f}x | "
                     f"{same[m]}/{n} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
