"""Command-line options shared by `run` and `bench`, and turning them into engine objects."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..engines.backends import BACKENDS, load_backend
from ..engines.backends.base import Backend
from ..engines.errors import SpecvizError
from ..engines.oracles import DRAFT_ORACLES, ORACLES, Oracle, make_oracle
from ..engines.sampling import SamplingParams
from ..engines.session import K_MAX

if TYPE_CHECKING:
    from ..engines.auto_k import AutoK

DEFAULT_TARGET = "smollm2-135m"
AUTO = "auto"  # --k auto


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
    g.add_argument("--draft", default=None,
                   help="draft model for the draft and cross-draft oracles")
    g.add_argument("--cross-draft", default=None,
                   help="draft model for the cross-draft oracle (default: --draft)")
    g.add_argument("--k", type=k_or_auto, default=4,
                   help=f"draft length, 0..{K_MAX}, or auto (cost-aware, chosen every step)")
    g.add_argument("--max-ngram", type=int, default=None, help="longest n-gram to match")
    g.add_argument("--min-ngram", type=int, default=None, help="shortest n-gram to match")
    g.add_argument("--ngram-corpus", type=Path, default=None,
                   help="text file whose n-grams seed the ngram oracle's static cache")
    g.add_argument("--exit-layer", type=int, default=None,
                   help="early-exit: draft with the target's first N layers (default: 3/4)")
    add_tree_args(g)


def add_tree_args(g) -> None:
    """Knobs of the tree, lookahead and medusa oracles (None: the oracle's default)."""
    g.add_argument("--split", type=float, default=None,
                   help="tree: a draft token below the top one branches off when its "
                        "probability is at least this (default 0.2)")
    g.add_argument("--budget", type=int, default=None,
                   help="tree: most nodes in a tree (default 16); medusa: verify a candidate "
                        "tree of this many nodes instead of the heads' top chain (default 0)")
    g.add_argument("--window", type=int, default=None, metavar="W",
                   help="lookahead: Jacobi window width W (default 5)")
    g.add_argument("--ngram-size", type=int, default=None, metavar="N",
                   help="lookahead: n-gram size N, the window has N-1 levels (default 4)")
    g.add_argument("--guesses", type=int, default=None, metavar="G",
                   help="lookahead: n-grams kept per first token and verified (default 5)")
    g.add_argument("--medusa-heads", type=Path, default=None, metavar="DIR",
                   help="Medusa heads folder for the medusa oracle (transformers backend; "
                        "default: beside the target, as `specviz train-heads` saves them)")


def oracle_knobs(name: str, args: argparse.Namespace) -> dict:
    if name == "tree":
        return {"split": args.split, "budget": args.budget}
    if name == "lookahead":
        return {"W": args.window, "N": args.ngram_size, "G": args.guesses}
    if name == "medusa":
        return {"budget": args.budget}
    return {}


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


def k_or_auto(text: str) -> int | str:
    return AUTO if text.strip().lower() == AUTO else k_value(text)


def k_policy(args: argparse.Namespace, oracle: Oracle, target: Backend,
             draft: Backend | None = None) -> AutoK | None:
    """The cost-aware K chooser for `--k auto` (None for a fixed K or plain decoding).

    It needs the target's cost profile (and the draft's, for the draft oracle): the stored one,
    or measured now on the loaded model and stored for next time.
    """
    if args.k != AUTO or oracle.name == "none":
        return None
    from ..engines import profile as prof
    from ..engines.auto_k import AutoK
    from .cmd_profile import get_profile

    def profile_of(model: str, backend: Backend) -> prof.Profile:
        stored = prof.load(model, args.backend, backend.device, args.threads)
        if stored is not None and not getattr(args, "refresh", False):
            return stored  # whatever sizes it has: the cost model interpolates
        print(f"specviz: measuring the cost profile of {model} once (see specviz profile)",
              file=sys.stderr)
        return get_profile(model, args, list(prof.BATCHES), list(prof.CONTEXTS), backend,
                           repeats=3)

    model = draft_model(oracle.name, args) or args.draft
    draft_profile = profile_of(model, draft) if draft is not None else None
    return AutoK(oracle, profile_of(args.target, target), draft_profile)


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


def draft_model(oracle: str, args: argparse.Namespace) -> str | None:
    """The draft model an oracle uses (cross-draft may have its own: --cross-draft)."""
    if oracle == "cross-draft":
        return getattr(args, "cross_draft", None) or args.draft
    return args.draft if oracle in DRAFT_ORACLES else None


def build_oracle(name: str, args: argparse.Namespace, target: Backend,
                 draft: Backend | None = None) -> Oracle:
    if name in DRAFT_ORACLES and draft is None:
        model = draft_model(name, args)
        if not model:
            raise SpecvizError(f"--oracle {name} needs --draft MODEL")
        draft = load_backend(args.backend, resolve_model(model), device=args.device,
                             threads=args.threads, n_ctx=args.n_ctx)
    corpus = None
    if name == "ngram" and args.ngram_corpus:
        try:
            corpus = target.tokenize(args.ngram_corpus.read_text(encoding="utf-8"), False)
        except OSError as exc:
            raise SpecvizError(f"cannot read n-gram corpus {args.ngram_corpus}: "
                               f"{exc.strerror}") from None
    try:
        return make_oracle(name, target=target, draft=draft, max_ngram=args.max_ngram,
                           min_ngram=args.min_ngram, corpus_ids=corpus,
                           exit_layer=getattr(args, "exit_layer", None),
                           knobs=oracle_knobs(name, args),
                           heads=getattr(args, "medusa_heads", None))
    except ValueError as exc:
        raise SpecvizError(str(exc)) from None
