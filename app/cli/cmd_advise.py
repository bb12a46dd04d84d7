"""`specviz advise`: every oracle and draft model on this machine, ranked for a target before
any run: the target answers a few prompts once, each candidate is predicted on those answers
and priced with this machine's costs (engines/advise/)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ...engines.advise import prompts as kinds
from ...engines.advise.advise import Options, advise, choices
from ...engines.advise.report import render
from ...engines.errors import SpecvizError
from ...engines.models import local as local_models
from . import option_values as values
from . import options


def register(sub) -> None:
    p = sub.add_parser(
        "advise", help="which oracle or draft model for this target, here? every candidate "
                       "on this machine ranked, before any run",
        description="The target answers a few prompts of each kind once (kept for next "
        "time); every candidate is then predicted on those answers without a speculative run "
        "(draft models by a teacher-forced pass, prompt lookup, the n-gram cache, suffix "
        "decoding and the rules by replaying their proposals, trained heads by their "
        "held-out acceptance), priced with this machine's cost profile under auto K's policy.")
    options.add_model_args(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--kind", type=_kinds, default=list(kinds.KINDS),
                     help=f"prompt kinds, comma-separated, from {', '.join(kinds.KINDS)} "
                          "(default: all three)")
    src.add_argument("--prompts", type=Path, nargs="+", default=None,
                     help="your own prompt files or folders instead (.txt: one prompt each; "
                          ".jsonl: one a line); each is a kind of its own")
    p.add_argument("--per-kind", type=values.positive, default=kinds.PER_KIND,
                   help="prompts of each kind the target answers (default: %(default)s)")
    p.add_argument("--max-tokens", type=values.whole_at_least(8), default=128,
                   help="tokens of each answer, at least 8 (default: %(default)s)")
    p.add_argument("--only", type=_only, default=None,
                   help=f"consider only these, comma-separated, from {', '.join(choices())} "
                        "(draft: every draft model here; default: all)")
    p.add_argument("--folder", action="append", default=[], metavar="DIR",
                   help="also look for draft models in this folder")
    p.add_argument("--json", action="store_true", help="print the advice as JSON")
    p.set_defaults(func=run)


def _kinds(text: str) -> list[str]:
    try:
        return kinds.parse_kinds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _only(text: str) -> list[str]:
    chosen = [c.strip() for c in text.split(",") if c.strip()]
    wrong = [c for c in chosen if c not in choices()]
    if wrong or not chosen:
        raise argparse.ArgumentTypeError(f"takes candidates from {', '.join(choices())}, "
                                         f"got {text!r}")
    return chosen


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.prompts:
        sets, problems = kinds.file_sets(args.prompts)
    else:
        sets, problems = kinds.bundled_sets(args.kind, args.per_kind)
    for line in problems:
        say(line)
    from .cmd_models import saved_folders

    places = local_models.Places.here([*saved_folders(), *args.folder])
    chosen = Options(args.max_tokens, args.threads, args.n_ctx, args.only, places,
                     problems=problems)
    if not sets:  # before loading anything: nothing would be asked
        raise SpecvizError("no prompts to answer: " + ("; ".join(problems) or "none given"))
    say(f"loading the target {args.target}")
    target = options.load_target(args)
    try:
        advice = advise(target, args.target, sets, chosen, say)
    finally:
        target.close()
    advice.seconds = round(time.perf_counter() - started, 1)
    print(json.dumps(advice.to_dict(), indent=1) if args.json else render(advice))
    for line in advice.problems[len(problems):]:  # those not said already
        say(line)
    if not advice.predicted:
        raise SpecvizError("no candidate could be predicted for this target: "
                           + _why_none(advice))
    return 0


def _why_none(advice) -> str:
    reasons = [f"{c.name}: {c.skipped}" for c in advice.candidates]
    return "; ".join(reasons[:3]) + (f" and {len(reasons) - 3} more" if len(reasons) > 3
                                     else "") if reasons else "none to consider (see --only)"


def say(line: str) -> None:
    print(f"specviz advise: {line}", file=sys.stderr, flush=True)
