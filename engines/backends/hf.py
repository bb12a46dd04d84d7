"""The transformers/torch backend: GPUs, Apple silicon, and oracles that need hidden states.

Loads `AutoModelForCausalLM` from a Hugging Face model folder or a GGUF file (transformers
dequantises GGUF to float). The KV cache is a `DynamicCache`, rolled back by cropping.
"""

from __future__ import annotations

import copy
import json
import re
import time
from pathlib import Path

import numpy as np

from ..errors import BackendError
from .base import Backend

# Names of end-of-turn tokens used by common chat models; they end generation like EOS.
_END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")


def available_devices() -> list[str]:
    import torch

    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.insert(0, "cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        devices.insert(0, "mps")
    return devices


def pick_device(requested: str | None) -> str:
    """`requested` if usable, else the best available (cuda, then mps, then cpu)."""
    devices = available_devices()
    if requested in (None, "", "auto"):
        return "cuda" if "cuda" in devices else devices[0]
    if requested.split(":")[0] not in devices:
        raise BackendError(
            f"device {requested!r} is not available here; available: {', '.join(devices)}"
        )
    return requested


class TransformersBackend(Backend):
    name = "transformers"

    def __init__(
        self,
        model_path: str | Path,
        device: str | None = None,
        threads: int | None = None,
        dtype: str | None = None,
    ) -> None:
        super().__init__()
        import torch

        self._torch = torch
        if threads:
            torch.set_num_threads(threads)
        self.device = pick_device(device)
        self.model_path = str(model_path)
        self._dtype = _pick_dtype(torch, self.device, dtype)
        self._model, self._tok, self._gguf = _load(Path(model_path), self.device, self._dtype)
        self._cache = None
        self._pieces = _piece_table(self._tok)
        self._special = frozenset(self._tok.all_special_ids) | _added_special_ids(self._tok)
        self._eos = _eos_ids(self._tok, self._model)
        self._template = _chat_template(self._tok, self._gguf)
        self.last_hidden: object | None = None  # hidden states of the last forward, for oracles

    # ------------------------------------------------------------ properties

    @property
    def n_ctx(self) -> int:
        cfg = self._model.config
        return int(getattr(cfg, "max_position_embeddings", None) or 2048)

    @property
    def n_vocab(self) -> int:
        return int(self._model.config.vocab_size)

    @property
    def bos_id(self) -> int | None:
        return self._tok.bos_token_id

    @property
    def eos_ids(self) -> frozenset[int]:
        return self._eos

    @property
    def chat_template(self) -> str | None:
        return self._template

    @property
    def model(self):
        """The torch module (for oracles that reuse the target's layers or head)."""
        return self._model

    # ------------------------------------------------------------ text

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=add_special))

    def token_bytes(self, token_id: int) -> bytes:
        return self._pieces[token_id] if 0 <= token_id < len(self._pieces) else b""

    def token_text_raw(self, token_id: int) -> str:
        return self._tok.convert_ids_to_tokens(int(token_id)) or ""

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special

    # ------------------------------------------------------------ cache

    def _forward(self, tokens: list[int], n_rows: int) -> np.ndarray:
        torch = self._torch
        from transformers import DynamicCache

        if self._cache is None:
            self._cache = DynamicCache()
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        with torch.inference_mode():
            out = self._model(
                input_ids=ids,
                past_key_values=self._cache,
                use_cache=True,
                logits_to_keep=n_rows,
            )
        self._cache = out.past_key_values
        return out.logits[0, -n_rows:].float().cpu().numpy()

    def _truncate(self, n: int) -> None:
        if self._cache is None:
            return
        if n == 0:
            self._cache = None
        else:
            # A negative crop removes that many tokens (the one form every version accepts).
            self._cache.crop(n - self.n_past)

    def synchronize(self) -> None:
        """Wait for queued GPU work, so timings measure compute and not just launches."""
        if self.device.startswith("cuda"):
            self._torch.cuda.synchronize()

    def share(self) -> TransformersBackend:
        """The same module and tokenizer (torch frees them with their last user), a new cache."""
        if self._model is None:
            raise BackendError("this backend is closed")
        other = copy.copy(self)
        Backend.__init__(other)  # an empty token list of its own
        other._cache = None
        other.last_hidden = None
        return other

    def close(self) -> None:
        self._cache = None
        self._model = None


# ---------------------------------------------------------------- loading


def _pick_dtype(torch, device: str, dtype: str | None):
    if dtype:
        return getattr(torch, dtype)
    # float32 on CPU: exact greedy comparisons and no slow half-precision CPU kernels.
    return torch.float32 if device == "cpu" else torch.float16


def _load(path: Path, device: str, dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress reporting; keep the terminal clean

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
        tok = AutoTokenizer.from_pretrained(folder, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise BackendError(f"transformers could not load {path}: {_first_line(exc)}") from None
    model.to(device).eval()
    model.load_seconds = time.perf_counter() - t0
    return model, tok, (path if gguf else None)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _piece_table(tok) -> list[bytes]:
    """Raw bytes of every token id, decoded the way the tokenizer's decoder would."""
    vocab = tok.convert_ids_to_tokens(list(range(len(tok))))
    decoder = json.loads(tok.backend_tokenizer.to_str()).get("decoder") or {}
    added = {t.content for t in tok.added_tokens_decoder.values()}
    if "ByteLevel" in json.dumps(decoder):
        byte_of = {c: b for b, c in _bytes_to_unicode().items()}
        return [_bytelevel(p, byte_of, added) for p in vocab]
    return [_sentencepiece(p, added) for p in vocab]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by byte-level BPE."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


def _bytelevel(piece: str | None, byte_of: dict[str, int], added: set[str]) -> bytes:
    if piece is None:
        return b""
    if piece in added or any(c not in byte_of for c in piece):
        return piece.encode("utf-8")
    return bytes(byte_of[c] for c in piece)


_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _sentencepiece(piece: str | None, added: set[str]) -> bytes:
    if piece is None:
        return b""
    if piece in added:
        return piece.encode("utf-8")
    m = _BYTE_FALLBACK.match(piece)
    if m:
        return bytes([int(m.group(1), 16)])
    return piece.replace("\u2581", " ").encode("utf-8")


def _added_special_ids(tok) -> frozenset[int]:
    return frozenset(i for i, t in tok.added_tokens_decoder.items() if t.special)


def _eos_ids(tok, model) -> frozenset[int]:
    ids: set[int] = set()
    for source in (tok.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(source)
    vocab = tok.get_vocab()
    ids.update(vocab[name] for name in _END_OF_TURN if name in vocab)
    return frozenset(ids)


def _chat_template(tok, gguf_path: Path | None) -> str | None:
    template = getattr(tok, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default") or next(iter(template.values()), None)
    if template or gguf_path is None:
        return template
    from ..gguf_meta import read_metadata

    return read_metadata(gguf_path).get("tokenizer.chat_template")
