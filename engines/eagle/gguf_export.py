"""An EAGLE head as a GGUF that llama-server drafts with (`--spec-type draft-eagle3`).

The head (trained by specviz or published) is checked against the target it is for, written
in the published EAGLE-3 layout the way llama.cpp's converter reads it, and converted by that
converter (engines.eagle.llama_convert) with the target's config and tokenizer beside it; the
GGUF appears whole or not at all.

What the converter needs beyond specviz's own head folder: `draft_vocab_size` (it is how it
tells an EAGLE-3 head from a one-layer Llama; a head drafting over the whole vocabulary gets
the target's size, and llama.cpp then drafts through the target's own output layer, as specviz
does), the target layers it reads at the top level (`eagle_aux_hidden_state_layer_ids`; under
`eagle_config` it is not read and would fall back to {2, L//2, L-3}), and a context length.
Both engines read the same features: what enters those target layers.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..atomic import cannot_write, committed, written_atomically
from ..bounded_json import loads
from ..errors import SpecvizError
from .checkpoint import (
    CONFIG_FILE,
    REQUIRED,
    WEIGHTS_FILE,
    default_layers,
    read_config,
    read_weights,
)
from .llama_convert import convert, target_folder

OUTTYPES = ("f16", "bf16", "f32", "q8_0")
ARCHITECTURE = "LlamaForCausalLMEagle3"
SKIPPED = ("t2d",)  # the converter drops it: llama.cpp maps draft ids with d2t only


@dataclass(frozen=True)
class TargetFacts:
    """What the head must agree with, read from the target's GGUF or config.json."""

    name: str
    hidden_size: int
    n_layers: int
    vocab_size: int
    context_length: int | None


def target_facts(model: Path) -> TargetFacts:
    try:
        return _gguf_facts(model) if model.is_file() else _folder_facts(model)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SpecvizError(f"cannot read the target's shape from {model}: {exc}") from None


def _gguf_facts(model: Path) -> TargetFacts:
    from ..models.gguf_read import reader_class

    reader = reader_class()(model)

    def field(key: str):
        f = reader.get_field(key)
        return None if f is None else f.contents()

    arch = field("general.architecture")
    tokens = reader.get_field("tokenizer.ggml.tokens")
    vocab = field(f"{arch}.vocab_size") or (len(tokens.data) if tokens else None)
    return TargetFacts(model.name, int(field(f"{arch}.embedding_length")),
                       int(field(f"{arch}.block_count")), int(vocab),
                       field(f"{arch}.context_length"))


def _folder_facts(model: Path) -> TargetFacts:
    config = loads((model / CONFIG_FILE).read_text(encoding="utf-8"))
    config = {**config, **config.get("text_config", {})}
    return TargetFacts(model.name, int(config["hidden_size"]), int(config["num_hidden_layers"]),
                       int(config["vocab_size"]), config.get("max_position_embeddings"))


@dataclass
class Layout:
    """The head as the converter reads it: its config and tensors."""

    config: dict
    tensors: dict


def layout_for(head: Path, target: TargetFacts) -> Layout:
    """The head in `head` checked against `target`, in the converter's layout; one line where
    it does not fit."""
    if not committed(head, CONFIG_FILE).is_file():
        raise SpecvizError(f"no EAGLE head in {head} (no {CONFIG_FILE}); train one with: "
                           "specviz train-heads --kind eagle")
    config = read_config(head)
    tensors = read_weights(head)
    _check_tensors(tensors, head, target.vocab_size)
    width = int(tensors["fc.weight"].shape[1]) // 3
    if width != target.hidden_size or int(config.get("target_hidden_size") or width) != width:
        raise SpecvizError(f"the EAGLE head in {head} reads a target of width {width}; "
                           f"{target.name} has {target.hidden_size}")
    vocab = config.get("vocab_size")
    if vocab is not None and int(vocab) != target.vocab_size:
        raise SpecvizError(f"the EAGLE head in {head} drafts for a vocabulary of {vocab} "
                           f"tokens; {target.name} has {target.vocab_size}")
    layers = _layers(config, head, target)
    return Layout(_config(config, layers, tensors, target), tensors)


def _check_tensors(tensors: dict, head: Path, vocab: int) -> None:
    """The tensors llama.cpp loads: a reduced draft vocabulary needs its own LM head and
    the map back to the target's ids."""
    needed = list(REQUIRED)
    lm_head = tensors.get("lm_head.weight")
    if "d2t" in tensors or (lm_head is not None and int(lm_head.shape[0]) != vocab):
        needed += ["lm_head.weight", "d2t"]
    missing = [k for k in needed if k not in tensors]
    if missing:
        raise SpecvizError(f"the EAGLE head in {head} lacks {', '.join(missing[:3])}"
                           + (f" and {len(missing) - 3} more" if len(missing) > 3 else ""))


def _layers(config: dict, head: Path, target: TargetFacts) -> list[int]:
    """The target layers the head reads, checked against the target's depth. A head trained
    by specviz reads {2, L//2, L-3} of its own target: other ones mean another target."""
    given = config.get("eagle_aux_hidden_state_layer_ids") or \
        (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    n = target.n_layers
    mine = default_layers(n)
    layers = [int(i) for i in given] if given else mine
    # llama.cpp reads layer n as the last layer's output; 0..n-1 are what enters a layer.
    if len(layers) != 3 or any(not 0 <= i <= n for i in layers):
        raise SpecvizError(f"the EAGLE head in {head} reads target layers {layers}; "
                           f"{target.name} has {n} (three are needed)")
    if "specviz" in config and layers != mine:
        depth = next((m for m in range(1, 4 * max(layers) + 8) if default_layers(m) == layers),
                     None)
        trained = f"a {depth}-layer target" if depth else f"layers {layers}"
        raise SpecvizError(f"the EAGLE head in {head} was trained on {trained}; "
                           f"{target.name} has {n} layers")
    return layers


def _config(config: dict, layers: list[int], tensors: dict, target: TargetFacts) -> dict:
    out = {k: v for k, v in config.items() if k != "specviz"}
    draft_vocab = (int(tensors["lm_head.weight"].shape[0]) if "lm_head.weight" in tensors
                   else target.vocab_size)
    out.update({"architectures": [ARCHITECTURE], "model_type": "llama",
                "num_hidden_layers": 1, "draft_vocab_size": draft_vocab,
                "vocab_size": target.vocab_size, "target_hidden_size": target.hidden_size,
                "eagle_aux_hidden_state_layer_ids": layers, "tie_word_embeddings": False})
    if not out.get("max_position_embeddings") and target.context_length:
        out["max_position_embeddings"] = int(target.context_length)
    return out


def write_layout(layout: Layout, folder: Path) -> Path:
    """config.json and model.safetensors in `folder`, as published EAGLE-3 heads are."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(json.dumps(layout.config, indent=2) + "\n",
                                      encoding="utf-8")
    tensors = {k: v.contiguous() for k, v in layout.tensors.items()}
    save_file(tensors, str(folder / WEIGHTS_FILE))
    return folder


def tensor_count(layout: Layout) -> int:
    """How many tensors the converter writes (for a progress bar)."""
    return sum(1 for k in layout.tensors if k not in SKIPPED)


def export_gguf(head: Path, target: Path, out: Path, outtype: str = "f16",
                on_line: Callable[[str], None] | None = None,
                on_layout: Callable[[Layout], None] | None = None) -> Path:
    """The head in `head` as a GGUF at `out` for the target model `target` (a .gguf file or
    a transformers folder). Nothing is written where the head does not fit the target or
    the converter refuses it. `on_layout` sees the checked layout before the converter runs,
    `on_line` each line the converter logs."""
    if outtype not in OUTTYPES:
        raise SpecvizError(f"--outtype {outtype}: choose one of {', '.join(OUTTYPES)}")
    layout = layout_for(head, target_facts(target))
    if on_layout:
        on_layout(layout)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(out, exc) from None
    with tempfile.TemporaryDirectory(prefix="specviz-eagle-gguf-") as scratch:
        folder = write_layout(layout, Path(scratch) / "head")
        target_dir = target_folder(target, Path(scratch))
        with written_atomically(out) as temp:
            convert(folder, target_dir, temp, outtype, on_line)
    return out
