"""`specviz models list|pull|path`: the registry's models, Hub names and the models already on
this machine, from the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tqdm import tqdm

from specviz.engines.models import (
    fetch_allowed,
    get_spec,
    is_hub_name,
    is_present,
    load_registry,
    missing,
    model_path,
    pull,
    resolve,
    size_line,
    source_of,
)
from specviz.engines.models import local as local_models
from specviz.engines.oracles.registry import fetched_flags


def register(subparsers: argparse._SubParsersAction) -> None:
    models = subparsers.add_parser("models", help="list, fetch and locate the known models")
    commands = models.add_subparsers(dest="models_command", metavar="COMMAND", required=True)

    list_parser = commands.add_parser("list", help="the known models and whether they are here")
    list_parser.add_argument("--local", action="store_true",
                             help="the models already on this machine: the Hugging Face cache, "
                                  "LM Studio, llama.cpp's cache, Ollama and your folders")
    list_parser.add_argument("--folder", action="append", default=[], metavar="DIR",
                             help="also search this folder (with --local; the window's "
                                  "Model folders setting adds folders for good)")
    list_parser.set_defaults(func=cmd_list)

    pull_parser = commands.add_parser(
        "pull", help="download models into the cache and check them: registry names or Hub "
                     "names (org/repo, org/repo:QUANT, org/repo/file.gguf)")
    pull_parser.add_argument("names", nargs="+", metavar="NAME")
    pull_parser.set_defaults(func=cmd_pull)

    path_parser = commands.add_parser("path", help="print the path of a downloaded model")
    path_parser.add_argument("name", metavar="NAME")
    path_parser.set_defaults(func=cmd_path)


def cmd_list(args: argparse.Namespace) -> int:
    if args.local:
        return _list_local(args.folder)
    rows = [("NAME", "SIZE (MB)", "PRESENT", "SOURCE", "PATH")]
    for spec in load_registry().values():
        present = is_present(spec)
        rows.append((spec.name, f"{spec.size / 1e6:.0f}", "yes" if present else "no",
                     (source_of(spec) or "-") if present else "-", str(model_path(spec))))
    _print_table(rows, right=(1,))
    return 0


def _list_local(extra: list[str]) -> int:
    places = local_models.Places.here([*saved_folders(), *extra])
    found = local_models.find(places)
    if not found:
        print("no models found in the Hugging Face cache, LM Studio, llama.cpp's cache, Ollama "
              "or your folders (`--folder DIR` adds one)")
        return 0
    rows = [("NAME", "FORMAT", "SIZE (MB)", "QUANT", "WHERE", "PATH")]
    for m in found:
        rows.append((m.name, m.format, f"{m.size / 1e6:.0f}", m.quant or "-", m.where,
                     str(m.path)))
    _print_table(rows, right=(2,))
    return 0


def saved_folders() -> list[str]:
    """The model folders added in the window's settings (none where Qt cannot be read)."""
    try:
        from ..state.settings import AppSettings
    except ImportError:
        return []
    return AppSettings().model_folders()


def _print_table(rows: list[tuple[str, ...]], right: tuple[int, ...] = ()) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [f"{c:>{w}}" if i in right else f"{c:<{w}}"
                 for i, (c, w) in enumerate(zip(row, widths, strict=False))]
        print("  ".join([*cells, row[-1]]))


def cmd_pull(args: argparse.Namespace) -> int:
    for name in args.names:  # unknown names fail before any download
        if not is_hub_name(name):
            get_spec(name)
    for name in args.names:
        spec = load_registry().get(name)
        print(model_path(spec) if spec and is_present(spec) else pull_with_bar(name))
    return 0


def model_args() -> tuple[str, ...]:
    """The options that name models to fetch: --target and the oracles' inputs the registry
    says are fetched (--draft, --cross-draft, --eagle-head, ...), as argparse stores them."""
    return ("target", *(flag.replace("-", "_") for flag in fetched_flags()))


def fetch_named(args: argparse.Namespace) -> None:
    """Fetch the registry models a command names (--target, --draft, --cross-draft) that are
    not downloaded yet, with a progress bar, so that a first run needs no separate step.
    With --no-fetch or SPECVIZ_NO_FETCH=1 nothing is fetched: the command then stops at the
    missing model with the command that fetches it."""
    if getattr(args, "replay", None) or (getattr(args, "server", None)
                                          and not getattr(args, "oracles", None)):
        return  # no local model is loaded
    if getattr(args, "no_fetch", False) or not fetch_allowed():
        return
    for name in missing([getattr(args, name, None) for name in model_args()]):
        print(f"specviz: {name} is not downloaded yet; fetching it ({size_line(name)}; "
              "--no-fetch stops instead)", file=sys.stderr, flush=True)
        pull_with_bar(name)


def pull_with_bar(name: str) -> Path:
    with tqdm(total=None, desc=name, unit="B", unit_scale=True, file=sys.stderr) as bar:

        def show(done: int, total: int, message: str) -> None:
            bar.total = total
            bar.set_postfix_str(message, refresh=False)
            bar.update(done - bar.n)

        return pull(name, progress=show)


def cmd_path(args: argparse.Namespace) -> int:
    print(resolve(args.name))
    return 0
