"""Loading a transformers model and its tokenizer: from a Hugging Face model folder, or from a
GGUF file, which transformers de-quantises to float."""

from __future__ import annotations

import time
from pathlib import Path

from ..errors import BackendError
from ..models import gguf_read, home_dir
from . import hf_gguf


def load(path: Path, device: str, dtype):
    """(model on `device` in `dtype`, tokenizer, the GGUF's path or None)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress reporting; keep the terminal clean
    hf_gguf.quiet_conversion()
    hf_gguf.name_maps_once()
    gguf_read.install()

    if not path.exists():
        raise BackendError(f"model not found: {path}")
    kwargs: dict = {}
    folder, gguf = path, None
    if path.is_file():
        if path.suffix != ".gguf":
            raise BackendError(f"{path} is neither a .gguf file nor a model folder")
        folder, gguf = path.parent, path.name
        kwargs["gguf_file"] = gguf
    elif not (path / "config.json").exists():
        raise BackendError(f"{path} is not a Hugging Face model folder (no config.json)")
    t0 = time.perf_counter()
    try:
        with gguf_read.shared():  # the tokenizer's, the config's and the weights' parse: one
            if gguf:
                tok, kwargs["config"] = hf_gguf.tokenizer_and_config(
                    folder, gguf, home_dir("cache") / hf_gguf.FOLDER)
            else:
                tok = AutoTokenizer.from_pretrained(folder)
            # A GGUF is de-quantized to float32 whatever is asked; asked for another dtype,
            # transformers warns that its packed-weight kernels compute in float32, though
            # it packs nothing here (the `kernels` package is not installed): loaded in
            # float32 and its weights converted, the same model, no warning.
            model = AutoModelForCausalLM.from_pretrained(
                folder, dtype=torch.float32 if gguf else dtype, **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise BackendError(f"transformers could not load {path}: {first_line(exc)}") from None
    if gguf:
        cast_weights(model, dtype)
    model.to(device).eval()
    model.load_seconds = time.perf_counter() - t0
    return model, tok, (path if gguf else None)


def cast_weights(model, dtype) -> None:
    """The parameters in `dtype` as `from_pretrained(dtype=...)` would load them: the buffers
    as they are (`model.to(dtype)` would also round the rotary embedding's float32
    frequencies: logits up to 0.004 apart on a one-layer Llama in bfloat16), and the modules
    the architecture keeps in float32 kept so. Tied weights stay tied (one parameter, cast
    once)."""
    keep = {*(getattr(model, "_keep_in_fp32_modules", None) or ()),
            *(getattr(model, "_keep_in_fp32_modules_strict", None) or ())}
    for name, param in model.named_parameters():  # each parameter once, tied ones included
        if keep.intersection(name.split(".")):
            continue
        if param.dtype != dtype and param.is_floating_point():
            param.data = param.data.to(dtype)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
