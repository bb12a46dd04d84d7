"""specviz's transformers backend against Hugging Face transformers' own speculative decoding.

- plain: `model.generate()` greedy vs specviz with no oracle
- prompt lookup: `generate(prompt_lookup_num_tokens=K)` vs specviz's prompt-lookup oracle
  (same n-gram sizes: `--max-ngram` down to 1)
- draft model: `generate(assistant_model=draft)` with a constant K and no confidence cut-off
  vs specviz's draft oracle

Same model objects (specviz's backend holds the transformers model; generate() runs on that
very object), same chat-formatted prompt ids, greedy, in this one script, alternating per
prompt; `--repeat N` runs every pairing N times, interleaved, and keeps each side's median
time per prompt. Tokens/s count the whole call on both sides (prompt processing included:
generate() does not report it apart), all tokens over all time. Writes a markdown table with
each side's accepted and drafted tokens (generate()'s counted by wrapping its candidate
generator for the call), which show whether both sides did the same work. Prompt lookup
copies after the first (leftmost) match on both sides, as transformers does (specviz's
default is the latest). The draft model's cache is emptied before every specviz run:
generate() runs the draft on the whole prompt every time, and specviz would otherwise reuse
the previous repeat's cache of the same prompt.

Usage: python benchmarks/peers_transformers.py --questions FILE.jsonl [--target M]
         [--draft M] [--k N] [--max-tokens N] [--limit N] [--threads N] [--repeat N]
         [--markdown OUT.md] [--json OUT.json]
Models: registry names, .gguf files (dequantised by transformers) or model folders.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from pathlib import Path
from typing import NamedTuple

from specviz.engines.backends.hf import TransformersBackend
from specviz.engines.bench.spec_bench import load_questions
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.models import resolve
from specviz.engines.oracles import info, is_plain, make_oracle
from specviz.engines.oracles.prompt_lookup import PromptLookupOracle

METHODS = ("none", "prompt-lookup", "draft")
PEER = {"none": "generate()", "prompt-lookup": "generate(prompt_lookup_num_tokens=K)",
        "draft": "generate(assistant_model=...)"}


def _prompt_lookup(_draft, args) -> dict:
    return {"prompt_lookup_num_tokens": args.k, "max_matching_ngram_size": args.max_ngram}


def _assistant(draft, args) -> dict:
    cfg = draft.model.generation_config
    cfg.num_assistant_tokens = args.k  # same work as ours: always K, no early cut-off
    cfg.num_assistant_tokens_schedule = "constant"
    cfg.assistant_confidence_threshold = 0.0
    return {"assistant_model": draft.model}


# What generate() is given for each method, beside greedy decoding's arguments.
PEER_KWARGS = {"none": lambda _draft, _args: {}, "prompt-lookup": _prompt_lookup,
               "draft": _assistant}
# Our side where the registry's defaults would not do the same work: prompt lookup as
# generate() looks, down to 1-gram matches and the first match (specviz's defaults: 2, the
# latest).
OURS = {"prompt-lookup": lambda args: PromptLookupOracle(earliest=True,
                                                         max_ngram=args.max_ngram, min_ngram=1)}


class Run(NamedTuple):
    tokens: int
    seconds: float
    drafted: int
    accepted: int


@contextlib.contextmanager
def counting_candidates(counts: list[int]):
    """Count generate()'s drafted and accepted tokens into counts [drafted, accepted] by
    wrapping its candidate generators' two hooks for the call (transformers keeps no
    such totals)."""
    from transformers.generation import candidate_generator as cg

    classes = (cg.PromptLookupCandidateGenerator, cg.AssistedCandidateGenerator)
    saved = [(c, c.get_candidates, c.update_candidate_strategy) for c in classes]

    def wrap(get, update):
        def get_candidates(self, input_ids, *a, **kw):
            candidates, logits = get(self, input_ids, *a, **kw)
            counts[0] += candidates.shape[1] - input_ids.shape[1]
            return candidates, logits

        def update_candidate_strategy(self, input_ids, scores, num_matches):
            counts[1] += int(num_matches)
            return update(self, input_ids, scores, num_matches)

        return get_candidates, update_candidate_strategy

    try:
        for cls, get, update in saved:
            cls.get_candidates, cls.update_candidate_strategy = wrap(get, update)
        yield counts
    finally:
        for cls, get, update in saved:
            cls.get_candidates, cls.update_candidate_strategy = get, update


def peer_run(target: TransformersBackend, draft: TransformersBackend | None, method: str,
             ids: list[int], args) -> Run:
    """transformers' own generate()."""
    torch = target._torch
    model = target.model
    kwargs = {"max_new_tokens": args.max_tokens, "do_sample": False,
              "eos_token_id": sorted(target.eos_ids), "pad_token_id": min(target.eos_ids),
              **PEER_KWARGS[method](draft, args)}
    input_ids = torch.tensor([ids], device=model.device)
    counts = [0, 0]
    with counting_candidates(counts), torch.inference_mode():
        t0 = time.perf_counter()
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
        seconds = time.perf_counter() - t0
    return Run(int(out.shape[1] - input_ids.shape[1]), seconds, *counts)


def ours_run(target: TransformersBackend, draft, method: str, prompt: str, args) -> Run:
    made = OURS.get(method)
    oracle = made(args) if made else make_oracle(method, target=target, draft=draft)
    if draft is not None:
        draft.reset()
    settings = RunSettings(prompt, k=0 if is_plain(method) else args.k,
                           max_tokens=args.max_tokens)
    summary = Session(target, oracle, settings).run_to_end()
    totals = summary.totals
    return Run(totals.tokens, summary.wall_ms / 1000.0, totals.proposed, totals.accepted)


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
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per pairing and prompt, interleaved; the median time is kept")
    p.add_argument("--markdown", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None,
                   help="write the sums per method and side (tokens, seconds, drafted, "
                        "accepted) here")
    args = p.parse_args()
    if args.repeat < 1:
        raise SystemExit("--repeat must be at least 1")

    methods = [m for m in args.methods.split(",") if m in METHODS]
    if any(info(m).needs_draft for m in methods) and not args.draft:
        methods = [m for m in methods if not info(m).needs_draft]
        print("no --draft given: the draft-model rows are left out")
    questions = load_questions(args.questions, args.categories and args.categories.split(","),
                               args.limit)
    target = TransformersBackend(resolve(args.target), device=args.device, threads=args.threads)
    draft = (TransformersBackend(resolve(args.draft), device=args.device, threads=args.threads)
             if any(info(m).needs_draft for m in methods) else None)
    # (method, side) -> [tokens, seconds, drafted, accepted] summed over the prompts
    sums: dict[tuple[str, str], list[float]] = {}
    same: dict[str, int] = {m: 0 for m in methods}
    for q in questions:
        prompt = q.turns[0]
        ids = target.encode_prompt(target.format_prompt(prompt, True), True)
        ours_run(target, draft, "none", prompt, args)  # warm-up
        runs: dict[tuple[str, str], list[Run]] = {}
        for _ in range(args.repeat):
            for m in methods:
                runs.setdefault((m, "peer"), []).append(peer_run(target, draft, m, ids, args))
                runs.setdefault((m, "ours"), []).append(ours_run(target, draft, m, prompt, args))
        for m in methods:
            ours, peer = (add_median(sums, (m, side), runs[m, side]) for side in ("ours", "peer"))
            same[m] += ours.tokens == peer.tokens
            print(f"q{q.question_id} {m}: ours {ours.tokens / ours.seconds:.1f} ({ours.tokens} "
                  f"tokens, accepted/drafted {ours.accepted}/{ours.drafted}), transformers "
                  f"{peer.tokens / peer.seconds:.1f} ({peer.tokens} tokens, "
                  f"{peer.accepted}/{peer.drafted}) tokens/s", flush=True)
    table = markdown(methods, sums, same, args, len(questions))
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n", encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps(as_json(sums, same, args, target, len(questions)),
                                        indent=1), encoding="utf-8")


def as_json(sums, same, args, target: TransformersBackend, n: int) -> dict:
    """The table's figures, with what made them (the device and dtype are the backend's)."""
    rows = [{"method": m, "side": side, "peer": PEER[m] if side == "peer" else "specviz",
             "tokens": t, "seconds": s, "drafted": d, "accepted": a,
             "tok_per_s": t / s if s else None}
            for (m, side), (t, s, d, a) in sums.items()]
    return {"target": args.target, "draft": args.draft, "device": target.device,
            "dtype": target.dtype, "k": args.k, "max_tokens": args.max_tokens, "prompts": n,
            "repeat": args.repeat, "same_length": same, "rows": rows}


def add_median(sums: dict, key, results: list[Run]) -> Run:
    """Add one prompt's run (median seconds over the repeats; greedy, so every repeat does
    the same work) to the totals; that run."""
    run = results[0]._replace(seconds=statistics.median(r.seconds for r in results))
    total = sums.setdefault(key, [0, 0.0, 0, 0])
    for i, value in enumerate(run):
        total[i] += value
    return run


def markdown(methods, sums, same, args, n) -> str:
    def rate(key):
        return sums[key][0] / sums[key][1]

    def work(key):
        return "-" if key[0] == "none" else f"{sums[key][3]}/{sums[key][2]}"

    lines = [f"{args.target}" + (f" + {args.draft}" if args.draft else "") +
             f", transformers on {args.device}, K={args.k}, greedy, {args.max_tokens} tokens, "
             f"{n} prompts (all tokens / all time, prompt processing included"
             + (f", median of {args.repeat} runs per prompt" if args.repeat > 1 else "") + ")",
             "",
             "| ours | peer | ours tokens/s | peer tokens/s | ratio (ours / peer) | same length "
             "| accepted/drafted, ours | accepted/drafted, peer |",
             "|---|---|---|---|---|---|---|---|"]
    for m in methods:
        ours, peer = (m, "ours"), (m, "peer")
        a, b = rate(ours), rate(peer)
        lines.append(f"| specviz {m} | {PEER[m]} | {a:.1f} | {b:.1f} | {a / b:.2f}x | "
                     f"{same[m]}/{n} | {work(ours)} | {work(peer)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
