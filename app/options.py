"""Command-line options shared by `run` and `bench`, and turning them into engine objects."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..engines.backends import BACKENDS, load_backend
from ..engines.backends.base import Backend
from ..engines.errors import SpecvizError
from ..engines.oracles import ORACLES, Oracle, make_oracle
from ..engines.sampling import SamplingParams
from ..engines.session import K_MAX

DEFAULT_TARGET = "smollm2-135m"


def add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--target", default=DEFAULT_TARGET,
                   help="registry name, .gguf file or model folder (default: %(default)s)")
    g.add_argument("--backend", choices=BACKENDS, default="llama")
    g.add_argument("--device", default=None, help="cpu, cuda, mps (default: best available)")
    g.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    g.add_argument("--n-ctx", type=int, default=4096, help="context length (llama backend)")


def add_oracle_args(p: argparse.ArgumentParser, many: bool = False) -> None:
    g = p.add_argument_group("speculation")
    if many:
        g.add_argument("--oracles", default="none,prompt-lookup,ngram",
                       help=f"comma-separated, from {', '.join(ORACLES)}")
    else:
        g.add_argument("--oracle", choices=ORACLES, default="none")
    g.add_argument("--draft", default=None, help="draft model for the draft oracle")
    g.add_argument("--k", type=k_value, default=4, help=f"draft length, 0..{K_MAX}")
    g.add_argument("--max-ngram", type=int, default=None, help="longest n-gram to match")
    g.add_argument("--min-ngram", type=int, default=None, help="shortest n-gram to match")
    g.add_argument("--ngram-corpus", type=Path, default=None,
                   help="text file whose n-grams seed the ngram oracle's static cache")
    g.add_argument("--medusa-heads", type=Path, default=None, metavar="DIR",
                   help="Medusa heads folder for the medusa oracle (transformers backend; "
                        "default: beside the target, as `specviz train-heads` saves them)")


def add_acceptance_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("acceptance")
    g.add_argument("--typical-acceptance", action="store_true",
                   help="LOSSY: with sampling, keep proposals the target finds typical "
                        "(Medusa's p > min(epsilon, alpha*exp(-entropy))) instead of exact "
                        "rejection sampling; the output no longer follows the target's "
                        "distribution. Greedy (temperature 0) stays exact")
    g.add_argument("--typical-epsilon", type=float, default=0.09,
                   help="typical acceptance's posterior threshold (default: %(default)s)")
    g.add_argument("--typical-alpha", type=float, default=0.3,
                   help="typical acceptance's entropy factor (default: %(default)s)")


def typical(args: argparse.Namespace):
    """The typical-acceptance rule asked for, or None (exact verification)."""
    if not getattr(args, "typical_acceptance", False):
        return None
    from ..engines.typical import TypicalAcceptance

    try:
        return TypicalAcceptance(args.typical_epsilon, args.typical_alpha)
    except ValueError as exc:
        raise SpecvizError(str(exc)) from None


def add_decoding_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("decoding")
    g.add_argument("--max-tokens", type=int, default=256)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--chat", action=argparse.BooleanOptionalAction, default=True,
                   help="wrap the prompt in the model's chat template (default: on)")
    g.add_argument("--system", default=None, help="system message (with --chat)")
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")


def k_value(text: str) -> int:
    k = int(text)
    if not 0 <= k <= K_MAX:
        raise argparse.ArgumentTypeError(f"K must be between 0 and {K_MAX}")
    return k


def sampling(args: argparse.Namespace) -> SamplingParams:
    try:
        return SamplingParams(args.temperature, args.top_p, args.seed)
    except ValueError as exc:
        raise SpecvizError(str(exc)) from None


def resolve_model(name_or_path: str) -> Path:
    from ..engines.models import resolve

    return resolve(name_or_path)


def load_target(args: argparse.Namespace) -> Backend:
    return load_backend(args.backend, resolve_model(args.target), device=args.device,
                        threads=args.threads, n_ctx=args.n_ctx)


def build_oracle(name: str, args: argparse.Namespace, target: Backend,
                 draft: Backend | None = None) -> Oracle:
    if name == "draft" and draft is None:
        if not args.draft:
            raise SpecvizError("--oracle draft needs --draft MODEL")
        draft = load_backend(args.backend, resolve_model(args.draft), device=args.device,
                             threads=args.threads, n_ctx=args.n_ctx)
    corpus = None
    if name == "ngram" and args.ngram_corpus:
        try:
            corpus = target.tokenize(args.ngram_corpus.read_text(encoding="utf-8"), False)
        except OSError as exc:
            raise SpecvizError(f"cannot read n-gram corpus {args.ngram_corpus}: {exc.strerror}")
    try:
        return make_oracle(name, target=target, draft=draft, max_ngram=args.max_ngram,
                           min_ngram=args.min_ngram, corpus_ids=corpus,
                           heads=getattr(args, "medusa_heads", None))
    except ValueError as exc:
        raise SpecvizError(str(exc)) from None
