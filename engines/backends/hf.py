"""The transformers/torch backend: GPUs, Apple silicon, and oracles that need hidden states.

Loads `AutoModelForCausalLM` from a Hugging Face model folder or a GGUF file (transformers
dequantises GGUF to float). The KV cache is a `DynamicCache`, rolled back by cropping; with
compiled steps (`compile="on"`, hf_compiled.py) a static cache whose length is rolled back.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..errors import BackendError
from ..machine.device_choice import DeviceFacts, model_dtype, torch_device, torch_devices
from ..models import home_dir
from . import compile_choice, cpu_dtype, hf_compiled, hf_gguf, small_rows
from .base import HIDDEN_STATES, Backend
from .hf_cache import cache_keyword
from .hf_features import LayerFeatures

# Names of end-of-turn tokens used by common chat models; they end generation like EOS.
_END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")


def available_devices() -> list[str]:
    return torch_devices(DeviceFacts.read())


def pick_device(requested: str | None) -> str:
    """`requested` if usable, else the best available (cuda, then mps, then cpu)."""
    return torch_device(requested, DeviceFacts.read())


class TransformersBackend(Backend):
    name = "transformers"
    provides = frozenset({HIDDEN_STATES})

    def __init__(
        self,
        model_path: str | Path,
        device: str | None = None,
        threads: int | None = None,
        dtype: str | None = None,
        compile: str | None = None,
    ) -> None:
        super().__init__()
        import torch

        self._torch = torch
        if threads:
            torch.set_num_threads(threads)
        self.device = pick_device(device)
        self.model_path = str(model_path)
        self.dtype_trial: dict | None = None  # bfloat16 against float32, where raced here
        self._threads = threads  # as asked: the dtype's race is remembered by them
        wanted = _pick_dtype(self.device, dtype, model_path, threads)
        self._dtype = torch.float32 if wanted == RACE else wanted
        self._model, self._tok, self._gguf = _load(Path(model_path), self.device, self._dtype)
        if wanted == RACE:
            self._race_dtypes(torch)
        self.small_rows = self._route_small_rows(torch)
        self._cache = None
        self._cache_kw = cache_keyword(self._model)
        self._pieces = _piece_table(self._tok)
        self._special = frozenset(self._tok.all_special_ids) | _added_special_ids(self._tok)
        self._eos = _eos_ids(self._tok, self._model)
        self._template = _chat_template(self._tok, self._gguf)
        self._hidden = _HiddenRows()  # final hidden states, kept only when an oracle asks
        self._features = LayerFeatures()  # chosen layers' outputs, likewise
        # Compiled steps over a static cache (hf_compiled.py), where chosen and possible.
        self._steps: hf_compiled.CompiledSteps | None = None
        self._kv: hf_compiled.StaticKV | None = None
        self.compile_trial: dict | None = None  # compiled against eager, where raced here
        self.compiled = self._choose_compile(compile)
        # Compiled steps cost otherwise than eager ones (a graph per width): their own profile.
        self.profile_variant = "compiled" if self.compiled == "on" else ""

    def _choose_compile(self, asked: str | None) -> str:
        """"on" where the steps run compiled, "off" where eagerly (compile_choice.py)."""
        choice, why = compile_choice.decide(self, asked)
        if choice == "off":
            if why:
                hf_compiled.say(f"{why}: decoding eagerly")
            return "off"
        self._steps = hf_compiled.CompiledSteps(self._model)
        self._kv = self._static_kv()
        try:
            hf_compiled.warm(self._steps, self._static_kv(), hf_compiled.WARM_WIDTHS)
        except Exception as exc:  # inductor's failures have no common type across releases
            self._steps = self._kv = None
            hf_compiled.say(f"torch.compile failed here ({_first_line(exc)}): decoding "
                            "eagerly")
            return "off"
        if choice == compile_choice.RACE:
            self.compile_trial = compile_choice.race(self)
            if self.compile_trial["choice"] == "off":
                self._steps = self._kv = None
                return "off"
        return "on"

    def prepare_widths(self) -> None:
        if self._steps is not None:
            hf_compiled.warm(self._steps, self._static_kv(), hf_compiled.WIDTHS)

    def _static_kv(self) -> hf_compiled.StaticKV:
        return hf_compiled.StaticKV(self._model, self.device, self._dtype, self.n_ctx)

    @property
    def dtype(self) -> str:
        """What its products compute in ("float32", "bfloat16", "float16")."""
        return str(self._dtype).removeprefix("torch.")

    def _race_dtypes(self, torch) -> None:
        """bfloat16 against float32 on this CPU, for this model's shape (cpu_dtype.py), once;
        the model, loaded in float32, converted where bfloat16 won."""
        rows = small_rows.plan(self._model, torch.get_num_threads(), _small_rows_store())
        try:
            self.dtype_trial = cpu_dtype.measure(self._model.config, rows,
                                                 _one_layers_params(self._model))
        except Exception:  # a shape transformers cannot build from its config (remote code,
            # say) is no reason to fail the load: the flags' rule then, not remembered
            won = "bfloat16"
        else:
            won = self.dtype_trial["dtype"]
            if self.dtype_trial["steady"]:
                cpu_dtype.remember(cpu_dtype.store_path(), self.model_path, self._threads,
                                   self.dtype_trial)
        if won == "bfloat16":
            self._dtype = torch.bfloat16
            cast_weights(self._model, torch.bfloat16)

    def _route_small_rows(self, torch) -> frozenset[int]:
        """On a CPU, the row counts whose products go the faster way here (small_rows.py)."""
        if self.device != "cpu":
            return frozenset()
        rows = small_rows.plan(self._model, torch.get_num_threads(), _small_rows_store())
        small_rows.route(self._model, rows)
        return rows

    # ------------------------------------------------------------ properties

    @property
    def n_ctx(self) -> int:
        cfg = self._model.config
        return int(getattr(cfg, "max_position_embeddings", None) or 2048)

    @property
    def n_vocab(self) -> int:
        return int(self._model.config.vocab_size)

    @property
    def vocab_type(self) -> str:
        try:
            return str(json.loads(self._tok.backend_tokenizer.to_str())["model"]["type"])
        except (AttributeError, KeyError, TypeError, ValueError):
            return type(self._tok).__name__  # a slow tokenizer: no backend to ask

    @property
    def tokenizer_size(self) -> int:
        return len(self._tok)

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

    # ------------------------------------------------------------ hidden states

    def keep_hidden(self, on: bool = True) -> None:
        """Keep the final hidden states (the LM head's input) of the rows each forward returns
        logits for, so oracles with heads on the target (Medusa) can read them. Off by
        default: plain runs pay nothing."""
        self._hidden.enable(self._model.get_output_embeddings(), on)

    def hidden_at(self, position: int):
        """The final hidden state (a 1-D tensor) at a context position still held in the
        cache, if a forward since `keep_hidden()` returned logits for it; else None."""
        return self._hidden.at(position)

    def keep_features(self, layer_ids: Sequence[int] | None) -> None:
        """Keep the outputs of these decoder layers, concatenated, at every cached position
        (EAGLE heads read them); None stops. Off by default: plain runs pay nothing."""
        self._features.enable(self._model if layer_ids else None, layer_ids)

    def features(self, start: int, end: int):
        """(end - start, features) rows for positions [start, end), or None when not held."""
        return self._features.rows(start, end)

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

        if self._steps is not None:
            return self._compiled_forward(tokens, n_rows)
        if self._cache is None:
            self._cache = DynamicCache()
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        self._hidden.arm()
        self._features.arm()
        with torch.inference_mode():
            out = self._model(
                input_ids=ids,
                use_cache=True,
                logits_to_keep=n_rows,
                **{self._cache_kw: self._cache},  # a DynamicCache grows in place
            )
        self._hidden.took(self.n_past + len(tokens) - n_rows)
        self._features.took(self.n_past)
        return out.logits[0, -n_rows:].float().cpu().numpy()

    def _compiled_forward(self, tokens: list[int], n_rows: int, depths=None,
                          visible=None) -> np.ndarray:
        """A forward on the static cache: compiled, or eagerly where the decoder's layers are
        hooked (EAGLE's features); the LM head on the rows asked for, outside the graph."""
        torch = self._torch
        n_past, m = self.n_past, len(tokens)
        self._hidden.arm()
        self._features.arm()
        with torch.inference_mode():
            # A feed (a prompt, the warm-up) compiles no width of its own: plain decoding
            # would pay a graph's compile, or its read at every start, for one forward.
            rows = hf_compiled.run_rows(self._steps, self._kv, tokens, n_past, depths, visible,
                                        eager=self._features.layers != (),
                                        compile_new=n_rows == m)
            logits = self._model.get_output_embeddings()(rows[:, m - n_rows:])
        self._hidden.took(n_past + m - n_rows)
        self._features.took(n_past)
        return logits[0].float().cpu().numpy()

    def _forward_masked(
        self, tokens: list[int], depths: list[int], visible: list[list[int]]
    ) -> np.ndarray:
        torch = self._torch
        from transformers import DynamicCache

        if self._steps is not None:
            return self._compiled_forward(tokens, len(tokens), depths, visible)
        if self._cache is None:
            self._cache = DynamicCache()
        n_past, m = self.n_past, len(tokens)
        # Additive mask over [cache | nodes]: every node sees the cache, itself and `visible`.
        allowed = torch.zeros((m, n_past + m), dtype=torch.bool)
        allowed[:, :n_past] = True
        for i, vis in enumerate(visible):
            allowed[i, [n_past + j for j in (*vis, i)]] = True
        mask = torch.zeros(allowed.shape, dtype=self._dtype)
        mask.masked_fill_(~allowed, torch.finfo(self._dtype).min)
        self._hidden.arm()
        self._features.arm()
        with torch.inference_mode():
            out = self._model(
                input_ids=torch.tensor([tokens], dtype=torch.long, device=self.device),
                position_ids=torch.tensor([[n_past + d for d in depths]], device=self.device),
                attention_mask=mask[None, None].to(self.device),
                use_cache=True,
                **{self._cache_kw: self._cache},
            )
        self._hidden.took(n_past)  # row i is node i, until keep_path picks the chain
        self._features.took(n_past)
        return out.logits[0].float().cpu().numpy()

    def _keep_path(self, path: list[int]) -> None:
        """Gather the cache rows of the kept nodes right after the context, drop the rest."""
        torch = self._torch
        n_past = self.n_past
        self._hidden.select(path)
        self._features.select(n_past, path)
        if self._kv is not None:
            self._kv.gather(n_past, path)
            return
        keep = torch.tensor([*range(n_past), *(n_past + i for i in path)], device=self.device)
        for layer in self._cache.layers:
            layer.keys = layer.keys.index_select(-2, keep)
            layer.values = layer.values.index_select(-2, keep)

    def _truncate(self, n: int) -> None:
        self._hidden.cut(n)
        self._features.cut(n)
        if self._kv is not None:
            self._kv.fit(n)
            self._kv.set_length(n)
            return
        if self._cache is None:
            return
        if n == 0:
            self._cache = None
        else:
            # A negative crop removes that many tokens (the one form every version accepts).
            self._cache.crop(n - self.n_past)

    # ------------------------------------------------------------ early exit

    @property
    def n_layers(self) -> int:
        return int(self._model.config.num_hidden_layers)

    @contextmanager
    def first_layers(self, n_layers: int) -> Iterator[Callable[[list[int]], np.ndarray]]:
        """A function that feeds tokens through the first `n_layers` decoder layers, then the
        final norm and LM head, on top of the cache, and returns the last token's logits.

        Early-exit drafting with the target's own cache: the prefix is not recomputed and no
        second cache is kept. Only the first layers' cache grows while drafting; on exit it is
        cut back, so the cache is exactly as before and `n_past` never changes.
        """
        torch = self._torch
        from transformers import DynamicCache

        decoder = self._model.get_decoder()
        if "self.layers[: self.config.num_hidden_layers]" not in inspect.getsource(
            type(decoder).forward
        ):
            raise BackendError(
                f"early exit does not know how to stop {type(decoder).__name__} after a layer"
            )
        if self._kv is not None:
            with self._static_first_layers(n_layers) as step:
                yield step
            return
        if self._cache is None:
            self._cache = DynamicCache()
        cache, config, fed = self._cache, decoder.config, 0

        def step(tokens: list[int]) -> np.ndarray:
            nonlocal fed
            ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
            full, config.num_hidden_layers = config.num_hidden_layers, n_layers
            try:
                with torch.inference_mode():
                    out = self._model(input_ids=ids, use_cache=True, logits_to_keep=1,
                                      **{self._cache_kw: cache})
            finally:
                config.num_hidden_layers = full
            fed += len(tokens)
            return out.logits[0, -1].float().cpu().numpy()

        try:
            yield step
        finally:
            for layer in cache.layers[:n_layers]:
                layer.crop(-fed)

    @contextmanager
    def _static_first_layers(self, n_layers: int):
        """`first_layers` on the static cache: the first layers' slots after the context are
        written while drafting, and their length set back on exit."""
        torch, kv, n_past, fed = self._torch, self._kv, self.n_past, 0
        head = self._model.get_output_embeddings()

        def step(tokens: list[int]) -> np.ndarray:
            nonlocal fed
            with torch.inference_mode():
                rows = hf_compiled.run_rows(self._steps, kv, tokens, n_past + fed,
                                            layers=n_layers)
                logits = head(rows[:, -1:])
            fed += len(tokens)
            return logits[0, -1].float().cpu().numpy()

        try:
            yield step
        finally:
            kv.set_length(n_past, n_layers)

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
        other._kv = self._static_kv() if self._kv is not None else None
        other._hidden = _HiddenRows()  # hidden states are kept per backend, on request
        other._features = LayerFeatures()
        return other

    def close(self) -> None:
        self._hidden.enable(None, False)
        self._features.enable(None, None)
        self._cache = None
        self._kv = self._steps = None
        self._model = None


class _HiddenRows:
    """The LM head's input rows of the latest forward, caught by a hook on the head.

    The head sees exactly the rows the logits are computed for, so row i belongs to the
    position `start + i`. Rows past a cache rollback are dropped.
    """

    def __init__(self) -> None:
        self._hook = None
        self._armed = False  # only the backend's own forwards count, not oracles' head calls
        self._caught = None
        self._rows = None  # (n, hidden) tensor
        self._start = 0

    def enable(self, head, on: bool) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._rows = self._caught = None
        if on and head is not None:
            self._hook = head.register_forward_pre_hook(self._catch)

    def _catch(self, _module, args) -> None:
        if self._armed:
            self._caught = args[0]

    def arm(self) -> None:
        """A forward of the backend begins."""
        self._armed, self._caught = self._hook is not None, None

    def took(self, start: int) -> None:
        """That forward ended; its logit rows begin at context position `start`."""
        if self._caught is not None:
            self._rows, self._start = self._caught[0].detach(), start
        self._armed, self._caught = False, None

    def cut(self, n: int) -> None:
        """The cache now holds only positions < n."""
        if self._rows is not None:
            keep = n - self._start
            self._rows = self._rows[:keep] if keep > 0 else None

    def select(self, rows: list[int]) -> None:
        """A masked forward's rows are nodes: keep the kept chain's, in chain order."""
        if self._rows is not None:
            self._rows = self._rows[rows] if rows else None

    def at(self, position: int):
        i = position - self._start
        if self._rows is None or not 0 <= i < len(self._rows):
            return None
        return self._rows[i]


# ---------------------------------------------------------------- loading


RACE = "race"  # bfloat16 against float32, measured at load (cpu_dtype.py)


def _pick_dtype(device: str, dtype: str | None, model_path: str | Path, threads: int | None):
    """The torch dtype to load in, or RACE where the CPU's choice is to be measured."""
    import torch

    facts = DeviceFacts.read()
    racing = cpu_dtype.racing(device, dtype, facts.cpu_bf16)
    measured = cpu_dtype.remembered(cpu_dtype.store_path(), model_path, threads) \
        if racing else None  # a GPU, or a dtype asked: nothing raced to read
    if racing and measured is None:
        return RACE
    return getattr(torch, model_dtype("transformers", device, dtype, facts, measured))


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


def _one_layers_params(model) -> int | None:
    """Parameters of the model's first decoder layer (None: no `layers` list found)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    return sum(p.numel() for p in layers[0].parameters()) if layers else None


def _small_rows_store() -> Path:
    return home_dir("cache") / "profiles" / "small-rows.json"


def _load(path: Path, device: str, dtype):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress reporting; keep the terminal clean
    hf_gguf.quiet_conversion()
    hf_gguf.name_maps_once()

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
        if gguf:
            tok, kwargs["config"] = hf_gguf.tokenizer_and_config(
                folder, gguf, home_dir("cache") / hf_gguf.FOLDER)
        else:
            tok = AutoTokenizer.from_pretrained(folder)
        # A GGUF is de-quantized to float32 whatever is asked; asked for another dtype,
        # transformers warns that its packed-weight kernels compute in float32, though it
        # packs nothing here (the `kernels` package is not installed): loaded in float32 and
        # its weights converted, the same model, no warning.
        model = AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32 if gguf else dtype, **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise BackendError(f"transformers could not load {path}: {_first_line(exc)}") from None
    if gguf:
        cast_weights(model, dtype)
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
    from ..models.gguf_meta import read_metadata

    return read_metadata(gguf_path).get("tokenizer.chat_template")
