"""EAGLE heads on disk: the published EAGLE-3 layout, which heads trained here also use.

A folder with `config.json` (the head's shape: hidden_size, intermediate_size, attention
heads, rms_norm_eps, rope_theta, vocab_size, draft_vocab_size; the target layers it reads
under `eagle_config.eagle_aux_hidden_state_layer_ids`, default {2, L//2, L-3}) and the weights
in `model.safetensors` (or `pytorch_model.bin`, read as plain tensors). Heads trained by
specviz add a `specviz` block to the config: the target's fingerprint, how they were trained,
their held-out acceptance by depth; their `lm_head` holds the target's rows for their draft
vocabulary (`d2t` maps it back), and a head trained on the whole vocabulary has none (it uses
the target's own).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn

from ..atomic import committed, replace_together
from ..bounded_json import SMALL_FILE, read_json
from ..errors import SpecvizError
from ..medusa.head_floor import refuse_weak_default
from ..medusa.heads import TargetId, lm_head_of, mismatch_hint, target_id
from ..medusa.heads import made_for as trained_for
from .head import EagleHead, HeadShape

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
PICKLED_WEIGHTS = "pytorch_model.bin"
FORMAT = "specviz-eagle-1"
REQUIRED = ("fc.weight", "midlayer.input_layernorm.weight", "midlayer.hidden_norm.weight",
            "midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight",
            "midlayer.self_attn.v_proj.weight", "midlayer.self_attn.o_proj.weight",
            "midlayer.post_attention_layernorm.weight", "midlayer.mlp.gate_proj.weight",
            "midlayer.mlp.up_proj.weight", "midlayer.mlp.down_proj.weight", "norm.weight")


def default_layers(n_layers: int) -> list[int]:
    """EAGLE-3's low, middle and high layers, {2, L//2, L-3}, kept inside a shallow model."""
    return sorted([min(2, n_layers - 1), n_layers // 2, max(n_layers - 3, 0)])


def head_dir(model_path: str | Path) -> Path:
    """Where a model's EAGLE head lives by default: beside the .gguf file, or in its folder
    (in specviz's cache for a model in another tool's store)."""
    from ..models import side_folder

    return side_folder(model_path, "eagle")


def shape_for(model: nn.Module, hidden: int | None = None, heads: int | None = None) -> HeadShape:
    """A head shaped like one of the target's decoder layers (its width, heads and norms)."""
    c = model.config
    width = hidden or c.hidden_size
    n_heads = heads or c.num_attention_heads
    n_kv = getattr(c, "num_key_value_heads", None) or n_heads
    return HeadShape(width, getattr(c, "intermediate_size", 4 * width), n_heads,
                     n_kv if n_heads % n_kv == 0 else n_heads, width // n_heads, c.hidden_size,
                     c.vocab_size, None, float(getattr(c, "rms_norm_eps", 1e-6)),
                     float(getattr(c, "rope_theta", None) or 10000.0))


def write_config(shape: HeadShape, layers: list[int], extra: dict) -> str:
    data = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
            "num_hidden_layers": 1, **{k: v for k, v in asdict(shape).items() if v is not None},
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": layers},
            "specviz": {"format": FORMAT, **extra}}
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def save_head(head: EagleHead, layers: list[int], folder: Path, target: TargetId,
              training: dict, accuracy: dict) -> Path:
    """The weights and config as one unit (hours of training: never torn, never one save's
    weights with another's config); returns the folder."""
    from safetensors.torch import save_file

    tensors = {k: v.detach().to("cpu", torch.float32 if v.is_floating_point() else v.dtype)
               .contiguous() for k, v in head.state_dict().items()}
    config = write_config(head.shape, layers, {"target": asdict(target), "training": training,
                                               "accuracy": accuracy})
    return replace_together(folder, {
        WEIGHTS_FILE: lambda temp: save_file(tensors, str(temp), metadata={"format": FORMAT}),
        CONFIG_FILE: lambda temp: temp.write_text(config, encoding="utf-8")})


def read_config(folder: Path) -> dict:
    try:
        config = read_json(committed(folder, CONFIG_FILE), "config", SMALL_FILE)
    except SpecvizError as exc:
        raise SpecvizError(f"cannot read the EAGLE head's config in {folder}: {exc}") from None
    if not isinstance(config, dict) or not isinstance(config.get("specviz", {}), dict):
        raise SpecvizError(f"the EAGLE head's config in {folder} is not a head's config")
    return config


def load_head(model: nn.Module, model_path: str | Path, folder: Path | None = None
              ) -> tuple[EagleHead, list[int], dict]:
    """The head in `folder` (default: beside the model), checked against this target, on its
    device and dtype; with the layers it reads and its config. Nothing is loaded on error."""
    given = folder is not None
    folder = Path(folder) if folder else head_dir(model_path)
    hint = f"train one with: specviz train-heads --kind eagle --target {model_path}"
    if not committed(folder, CONFIG_FILE).exists():
        raise SpecvizError(f"no EAGLE head in {folder}; {hint}")
    config = read_config(folder)
    _check_target(config, model, model_path, folder, hint)
    if not given:
        refuse_weak_default(config.get("specviz", {}).get("accuracy", {}), folder, hint,
                            "--eagle-head")
    shape = _shape(config, model, folder)
    layers = _layers(config, model, folder)
    state = read_weights(folder)
    head = EagleHead(shape)
    _fill(head, state, folder)
    weight = lm_head_of(model).weight
    return head.to(weight.device, weight.dtype).eval(), layers, config


def _check_target(config: dict, model, model_path, folder: Path, hint: str) -> None:
    made_for = config.get("specviz", {}).get("target")
    if not made_for:
        return  # a published head: only its shape can be checked
    mine = target_id(model, model_path)
    if not trained_for(str(made_for.get("fingerprint")), model):
        raise SpecvizError(f"the EAGLE head in {folder} was trained for {made_for.get('name')} "
                           f"(fingerprint {made_for.get('fingerprint')}), not this model "
                           f"({mine.fingerprint}){mismatch_hint(model)}; {hint}")


def _shape(config: dict, model, folder: Path) -> HeadShape:
    c = model.config
    try:
        width = int(config["hidden_size"])
        n_heads = int(config["num_attention_heads"])
        shape = HeadShape(
            width, int(config["intermediate_size"]), n_heads,
            int(config.get("num_key_value_heads") or n_heads),
            int(config.get("head_dim") or width // n_heads),
            int(config.get("target_hidden_size") or width), int(config["vocab_size"]),
            int(config["draft_vocab_size"]) if config.get("draft_vocab_size") not in (
                None, config["vocab_size"]) else None,
            float(config.get("rms_norm_eps", 1e-6)), float(config.get("rope_theta") or 10000.0))
    except (KeyError, TypeError, ValueError) as exc:
        raise SpecvizError(f"the EAGLE head's config in {folder} lacks or garbles {exc}") from None
    if shape.target_hidden_size != c.hidden_size or shape.vocab_size != c.vocab_size:
        raise SpecvizError(
            f"the EAGLE head in {folder} reads a target of width {shape.target_hidden_size} "
            f"and vocabulary {shape.vocab_size}; this model has {c.hidden_size} and "
            f"{c.vocab_size}")
    return shape


def _layers(config: dict, model, folder: Path) -> list[int]:
    n = int(model.config.num_hidden_layers)
    layers = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") \
        or default_layers(n)
    if len(layers) != 3 or any(not 0 <= int(i) < n for i in layers):
        raise SpecvizError(f"the EAGLE head in {folder} reads layers {layers}; this model has "
                           f"{n} (three are needed)")
    return [int(i) for i in layers]


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    try:
        if committed(folder, WEIGHTS_FILE).exists():
            from safetensors.torch import load_file

            return load_file(str(committed(folder, WEIGHTS_FILE)))
        if (folder / PICKLED_WEIGHTS).exists():
            return torch.load(folder / PICKLED_WEIGHTS, map_location="cpu", weights_only=True)
    except Exception as exc:  # a corrupt file fails in many ways, all of them one line here
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecvizError(f"cannot read the EAGLE head's weights in {folder}: {first}") from None
    raise SpecvizError(f"no weights in {folder} ({WEIGHTS_FILE} or {PICKLED_WEIGHTS})")


def _fill(head: EagleHead, state: dict[str, torch.Tensor], folder: Path) -> None:
    needed = list(REQUIRED) + (["lm_head.weight", "d2t"] if head.lm_head is not None else [])
    missing = [k for k in needed if k not in state]
    if missing:
        raise SpecvizError(f"the EAGLE head in {folder} lacks {', '.join(missing[:3])}"
                           + (f" and {len(missing) - 3} more" if len(missing) > 3 else ""))
    mine = head.state_dict()
    for name, tensor in mine.items():
        if tuple(state[name].shape) != tuple(tensor.shape):
            raise SpecvizError(f"the EAGLE head in {folder}: {name} is "
                               f"{tuple(state[name].shape)}, its config makes it "
                               f"{tuple(tensor.shape)}")
    head.load_state_dict({k: state[k] for k in mine}, strict=True)
