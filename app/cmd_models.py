"""`specviz models list|pull|path`: the model registry from the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tqdm import tqdm

from specviz.engines.models import (
    ModelSpec,
    fetch_allowed,
    get_spec,
    is_present,
    load_registry,
    missing,
    model_path,
    pull,
    resolve,
)

MODEL_ARGS = ("target", "draft", "cross_draft")


def register(subparsers: argparse._SubParsersAction) -> None:
    models = subparsers.add_parser("models", help="list, fetch and locate the known models")
    commands = models.add_subparsers(dest="models_command", metavar="COMMAND", required=True)

    list_parser = commands.add_parser("list", help="the known models and whether they are here")
    list_parser.set_defaults(func=cmd_list)

    pull_parser = commands.add_parser("pull", help="download models into the cache and check them")
    pull_parser.add_argument("names", nargs="+", metavar="NAME")
    pull_parser.set_defaults(func=cmd_pull)

    path_parser = commands.add_parser("path", help="print the path of a downloaded model")
    path_parser.add_argument("name", metavar="NAME")
    path_parser.set_defaults(func=cmd_path)


def cmd_list(args: argparse.Namespace) -> int:
    rows = [("NAME", "SIZE (MB)", "PRESENT", "PATH")]
    for spec in load_registry().values():
        present = "yes" if is_present(spec) else "no"
        rows.append((spec.name, f"{spec.size / 1e6:.0f}", present, str(model_path(spec))))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for name, size, present, path in rows:
        print(f"{name:<{widths[0]}}  {size:>{widths[1]}}  {present:<{widths[2]}}  {path}")
    return 0


def cmd_pull(args: argparse.Namespace) -> int:
    specs = [get_spec(name) for name in args.names]  # unknown names fail before any download
    for spec in specs:
        print(model_path(spec) if is_present(spec) else _pull_with_bar(spec))
    return 0


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
    for spec in missing([getattr(args, name, None) for name in MODEL_ARGS]):
        print(f"specviz: {spec.name} is not downloaded yet; fetching it "
              f"({spec.size / 1e6:.0f} MB, checked against its SHA-256; --no-fetch stops "
              "instead)", file=sys.stderr, flush=True)
        _pull_with_bar(spec)


def _pull_with_bar(spec: ModelSpec) -> Path:
    with tqdm(total=spec.size, desc=spec.name, unit="B", unit_scale=True,
              file=sys.stderr) as bar:

        def show(done: int, total: int, message: str) -> None:
            bar.set_postfix_str(message, refresh=False)
            bar.update(done - bar.n)

        return pull(spec.name, progress=show)


def cmd_path(args: argparse.Namespace) -> int:
    print(resolve(args.name))
    return 0
