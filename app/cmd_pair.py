"""`specviz pair`: a target and a draft model checked before anyone runs them together."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

from ..engines.backends import load_backend
from ..engines.corpus import pair_prompts, read_prompts
from ..engines.errors import SpecvizError
from ..engines.models import resolve
from ..engines.pair import K_MAX, PairReport
from ..engines.pair_check import check_pair
from . import options


def register(sub) -> None:
    p = sub.add_parser(
        "pair", help="will a draft model pay for a target here? (before running them)",
        description="Compare the two tokenizers, estimate the draft's acceptance from one "
        "teacher-forced pass of each model over the target's own answers, and predict the "
        "speedup by K on this machine from its cost profile.")
    options.add_model_args(p)
    p.add_argument("--draft", required=True, help="the draft model: registry name, .gguf "
                   "file or model folder")
    p.add_argument("--prompts", type=Path, nargs="+", default=None,
                   help="prompt files or folders (.txt: one prompt each; .jsonl: one per "
                   "line); default: three of specviz's own (code edit, summary, chat)")
    p.add_argument("--max-tokens", type=int, default=96,
                   help="tokens of each answer the target writes (default: %(default)s)")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="the sampling temperature alpha is estimated at (default: %(default)s)")
    p.add_argument("--k-max", type=int, default=K_MAX, help="largest K to predict")
    p.add_argument("--no-measure", action="store_true",
                   help="do not measure a missing cost profile; say so instead")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.k_max <= 31:
        raise SpecvizError(f"--k-max must be between 1 and 31, got {args.k_max}")
    if args.max_tokens < 8:
        raise SpecvizError("--max-tokens must be at least 8")
    prompts = _prompts(args.prompts)
    target = options.load_target(args)
    draft = load_backend(args.backend, resolve(args.draft), device=args.device,
                         threads=args.threads, n_ctx=args.n_ctx)
    bars: dict[str, tqdm] = {}

    def progress(stage: str, done: int, total: int) -> None:
        bar = bars.get(stage)
        if bar is None:
            bar = bars[stage] = tqdm(total=total, desc=stage, file=sys.stderr, leave=False,
                                     disable=None)
        bar.total, bar.n = total, done
        bar.refresh()

    try:
        report = check_pair(target, draft, prompts, target_name=args.target,
                            draft_name=args.draft, threads=args.threads,
                            max_tokens=args.max_tokens, temperature=args.temperature,
                            k_max=args.k_max, measure_profile=not args.no_measure,
                            progress=progress)
    finally:
        for bar in bars.values():
            bar.close()
        draft.close()
        target.close()
    print(json.dumps(report.to_dict(), indent=1) if args.json else render(report))
    return 0


def _prompts(paths: list[Path] | None) -> list[str]:
    if paths:
        for path in paths:
            if not path.exists():
                raise SpecvizError(f"prompts not found: {path}")
        return read_prompts(paths)
    return pair_prompts()


def render(report: PairReport) -> str:
    """The report as a person reads it: tokenizers, acceptance, speedup by K, verdict."""
    lines = [f"target {report.target}, draft {report.draft}", "", "tokenizers:"]
    width = max(len(i.name) for i in report.vocab.items)
    for item in report.vocab.items:
        mark = "ok" if item.ok else "DIFFERS"
        values = item.target if item.target == item.draft else f"{item.target} | {item.draft}"
        note = f" ({item.note})" if item.note else ""
        lines.append(f"  {item.name.ljust(width)}  {mark:7}  {values}{note}")
    lines.append(f"  -> {report.vocab.verdict}: {report.vocab.reason}")
    if report.predictions:
        lines += ["", _acceptance_line(report), "by draft position: " + " ".join(
            "-" if a is None else f"{a:.2f}" for a in report.by_position[:8]), "",
            "K  tokens/step  speedup  break-even acceptance"]
        for p in report.predictions:
            even = "never pays" if p.break_even is None else f"{p.break_even:.2f}"
            best = "  <- best" if p.k == report.best_k else ""
            lines.append(f"{p.k:<2} {p.tokens_per_step:11.2f}  {p.speedup:6.2f}x  {even}{best}")
        costs = report.costs
        lines.append(f"(costs: the {costs.get('profile')} profile, scaled to forwards timed "
                     f"now; a plain step {costs.get('plain_step_ms')} ms, a draft token "
                     f"{costs.get('draft_ms')} ms; {report.note})")
    lines += ["", f"verdict: {report.verdict}"]
    return "\n".join(lines)


def _acceptance_line(report: PairReport) -> str:
    line = (f"acceptance over {report.answer_tokens} tokens of {report.prompts} answers: "
            f"greedy agreement {report.greedy_agreement:.0%}")
    if report.alpha is not None:
        line += f", alpha {report.alpha:.2f} at temperature {report.temperature:g}"
    return line
