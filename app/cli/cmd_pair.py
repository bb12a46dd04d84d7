"""`specviz pair`: a target and a draft model checked before anyone runs them together."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

from ...engines.backends import load_backend
from ...engines.corpus import pair_prompts, read_prompts
from ...engines.errors import SpecvizError
from ...engines.models import resolve
from ...engines.pair.check import check_pair
from ...engines.pair.report import K_MAX
from ...engines.pair.text import render
from . import option_values as values
from . import options

K_MAX_ALLOWED = 31  # the largest K a prediction prices


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
    p.add_argument("--max-tokens", type=values.whole_at_least(8), default=96,
                   help="tokens of each answer the target writes, at least 8 (default: "
                        "%(default)s)")
    p.add_argument("--temperature", type=values.temperature, default=1.0,
                   help="the sampling temperature alpha is estimated at (default: %(default)s)")
    p.add_argument("--k-max", type=k_max, default=K_MAX,
                   help=f"largest K to predict, 1..{K_MAX_ALLOWED} (default: %(default)s)")
    p.add_argument("--no-measure", action="store_true",
                   help="do not measure a missing cost profile; say so instead")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def k_max(text: str) -> int:
    value = values.positive(text)
    if value > K_MAX_ALLOWED:
        raise argparse.ArgumentTypeError(f"takes a whole number from 1 to {K_MAX_ALLOWED}, "
                                         f"got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
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
                            progress=progress,
                            say=lambda text: print(f"specviz: {text}", file=sys.stderr))
    finally:
        for bar in bars.values():
            bar.close()
        draft.close()
        target.close()
    data = report.to_dict()
    print(json.dumps(data, indent=1) if args.json else render(data))
    return 0


def _prompts(paths: list[Path] | None) -> list[str]:
    if paths:
        for path in paths:
            if not path.exists():
                raise SpecvizError(f"prompts not found: {path}")
        return read_prompts(paths)
    return pair_prompts()
