"""`specviz heads export-gguf`: an EAGLE head as a GGUF for llama-server's draft-eagle3.

A command of its own rather than a `train-heads` option: it exports heads trained earlier and
published EAGLE-3 heads as well, and takes seconds where training takes minutes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ...engines.models import home_dir, hub, is_hub_name, resolve
from ..state.run_setup import DEFAULT_TARGET


def register(sub) -> None:
    heads = sub.add_parser("heads", help="the drafting heads trained for a model: export them")
    commands = heads.add_subparsers(dest="heads_command", metavar="COMMAND", required=True)
    p = commands.add_parser(
        "export-gguf", help="write an EAGLE head as a GGUF for llama-server "
        "(--spec-type draft-eagle3)",
        description="Convert an EAGLE head (trained by `specviz train-heads --kind eagle`, or "
                    "a published EAGLE-3 head) to a GGUF with llama.cpp's own converter, from "
                    "the sources specviz builds llama-server from; the target model supplies "
                    "its tokenizer and shape. llama-server then drafts with it: "
                    "llama-server -m TARGET.gguf -md HEAD.gguf --spec-type draft-eagle3.")
    # Named as `run`'s --eagle-head, so a Hub name is fetched as it is there.
    p.add_argument("eagle_head", nargs="?", default=None, metavar="HEAD",
                   help="the head's folder or Hub name (default: the target's own head, "
                        "where train-heads saves it)")
    p.add_argument("--target", default=DEFAULT_TARGET,
                   help="the model the head drafts for: registry name, Hub name, .gguf file "
                        "or model folder (default: %(default)s)")
    p.add_argument("--out", type=Path, default=None,
                   help="the GGUF to write (default: beside the head, HEAD-OUTTYPE.gguf)")
    p.add_argument("--outtype", choices=("f16", "bf16", "f32", "q8_0"), default="f16",
                   help="the weights' type in the GGUF (default: %(default)s)")
    p.add_argument("--no-fetch", action="store_true",
                   help="stop at a model or head that is not downloaded instead of fetching it")
    p.set_defaults(func=export_gguf)


def export_gguf(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ...engines.eagle import gguf_export, llama_convert
    from ...engines.eagle.checkpoint import head_dir

    target = resolve(args.target)
    named, hub_head = args.eagle_head, args.eagle_head and is_hub_name(args.eagle_head)
    # A Hub name is read from the Hub cache (main fetched it), as `run --eagle-head` reads it.
    head = (resolve(named) if hub_head else Path(named)) if named else head_dir(target)
    label = named.replace("/", "--") if hub_head else head.name
    out = args.out or default_out(head, label, args.outtype)
    bars = []  # drawn once the head is found to fit: a refusal stays one line

    def counted(layout) -> None:
        bars.append(tqdm(total=gguf_export.tensor_count(layout), desc="converting",
                         unit="tensor", file=sys.stderr, leave=False))

    def advanced(line: str) -> None:
        if " --> " in line:  # the converter's line for each tensor it writes
            bars[0].update(1)

    try:
        gguf_export.export_gguf(head, target, out, args.outtype, advanced, counted)
    finally:
        for bar in bars:
            bar.close()
    print(out)
    _say_how_to_serve(target, out, llama_convert.server_binary())
    return 0


def default_out(head: Path, label: str, outtype: str) -> Path:
    """Beside the head's folder; for a head in the Hugging Face cache (another tool's store,
    left as it keeps it), in specviz's cache."""
    name = f"{label}-{outtype}.gguf"
    if head.absolute().is_relative_to(hub.cache_root().absolute()):
        return home_dir("cache") / "heads" / name
    return head.parent / name


def _say_how_to_serve(target: Path, out: Path, server: Path | None) -> None:
    if server is None:
        from ...engines.llama_build import BUILD_HINT

        print(f"specviz: llama-server is not built here; {BUILD_HINT}", file=sys.stderr)
        return
    model = target if target.is_file() else "TARGET.gguf"
    print(f"draft with it: specviz run --target {model} --oracle llama-server --spec-type "
          f"draft-eagle3 --draft {out}, or {server} -m {model} -md {out} --spec-type "
          "draft-eagle3", file=sys.stderr)
