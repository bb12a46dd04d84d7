"""`specviz profile`: what a verification batch costs on this machine, per model."""

from __future__ import annotations

import argparse
import json
import sys

from tqdm import tqdm

from ...engines.backends import load_backend
from ...engines.backends.base import Backend
from ...engines.backends.cpu_dtype import remembered_for
from ...engines.cost import profile as prof
from ...engines.errors import SpecvizError
from ...engines.machine.device_choice import DeviceFacts, model_dtype
from ...engines.models import resolve
from . import option_values as values
from . import options


def register(sub) -> None:
    p = sub.add_parser("profile", help="measure forward time per batch size (the cost profile)",
                       description="Measure how long a forward pass of 1..32 tokens takes at a "
                       "few context lengths; stored in the cache and reused.")
    options.add_model_args(p)
    p.add_argument("--draft", default=None, help="also profile this draft model")
    p.add_argument("--batches", default=",".join(map(str, prof.BATCHES)),
                   help="comma-separated batch sizes (default: %(default)s)")
    p.add_argument("--contexts", default=",".join(map(str, prof.CONTEXTS)),
                   help="comma-separated context lengths (default: %(default)s)")
    p.add_argument("--repeats", type=values.positive, default=prof.REPEATS,
                   help="repetitions per cell; the median is kept (default: %(default)s)")
    p.add_argument("--refresh", action="store_true", help="measure again even if stored")
    p.add_argument("--json", action="store_true", help="print the profiles as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    batches, contexts = _ints(args.batches, "--batches"), _ints(args.contexts, "--contexts")
    models = [args.target] + ([args.draft] if args.draft else [])
    profiles = [get_profile(m, args, batches, contexts) for m in models]
    if args.json:
        print(json.dumps([p.to_dict() for p in profiles], indent=1))
        return 0
    for p in profiles:
        print(f"{p.model} on {p.backend}/{p.device}, {p.threads or 'default'} threads, median "
              f"of {p.repeats}: forward ms (x cost of one token)")
        print(prof.table(p))
        print()
    return 0


def get_profile(model: str, args: argparse.Namespace, batches: list[int],
                contexts: list[int], backend: Backend | None = None,
                repeats: int | None = None) -> prof.Profile:
    """The stored profile for this model and settings, or a fresh measurement (then stored).

    `backend`: measure on this already loaded model instead of loading it again.
    """
    device = backend.device if backend else _device_name(args)
    dtype = backend.dtype if backend else model_dtype(
        args.backend, device, getattr(args, "dtype", None), DeviceFacts.about(device),
        remembered_for(model, args.threads) if args.backend == "transformers" else None)
    if not getattr(args, "refresh", False):
        variant = (backend.profile_variant if backend else prof.planned_variant(
            args.backend, device, model, args.threads, dtype, getattr(args, "compile", None)))
        stored = prof.load(model, args.backend, device, args.threads, dtype,
                           say=lambda line: _say(f"{line}; measuring it again"),
                           variant=variant)
        if stored and set(batches) <= set(stored.batches) and set(contexts) <= set(stored.contexts):
            return stored
    own = backend is None
    if own:
        backend = load_backend(args.backend, resolve(model), device=args.device,
                               threads=args.threads,
                               n_ctx=max(args.n_ctx, max(contexts) + max(batches)),
                               dtype=getattr(args, "dtype", None),
                               compile=getattr(args, "compile", None))
    try:
        with tqdm(total=1, desc=f"profile {model}", unit="pass", file=sys.stderr,
                  leave=False) as bar:
            def progress(done: int, total: int) -> None:
                bar.total = total
                bar.n = done
                bar.refresh()

            result = prof.measure(backend, model, args.threads, batches, contexts,
                                  repeats or args.repeats, progress)
    finally:
        if own:
            backend.close()
    prof.keep(result, _say)  # minutes of measuring: shown even where it cannot be stored
    return result


def _say(line: str) -> None:
    print(f"specviz: {line}", file=sys.stderr)


def _device_name(args: argparse.Namespace) -> str:
    """The device a stored profile is filed under, found without loading the model."""
    if args.backend == "transformers":
        from ...engines.backends.hf_setup import pick_device

        return pick_device(args.device)
    from ...engines.backends.llama import device_for

    return device_for(args.device)


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecvizError(f"{flag} takes comma-separated whole numbers, got {text!r}") from None
    if not values or min(values) < 1:
        raise SpecvizError(f"{flag} needs positive numbers, got {text!r}")
    return values
