"""The transformers/torch backend: GPUs, Apple silicon, and oracles that need hidden states.

Loads `AutoModelForCausalLM` from a Hugging Face model folder or a GGUF file (transformers
dequantises GGUF to float). The KV cache is a `DynamicCache`, rolled back by cropping; with
compiled steps (`compile="on"`, hf_compiled.py) a static cache whose length is rolled back.
What is settled before the first forward (device, dtype, small-row routing, compiled steps) is
hf_setup.py's; the load hf_load.py's; the tokenizer's tables hf_tokens.py's.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..errors import BackendError
from . import hf_compiled, hf_setup, hf_tokens
from .base import HIDDEN_STATES, Backend
from .hf_cache import cache_keyword
from .hf_features import LayerFeatures
from .hf_hidden import HiddenRows
from .hf_load import load
from .torch_threads import TorchThreads


class TransformersBackend(Backend):
    name = "transformers"
    provides = frozenset({HIDDEN_STATES})
    pads_streams = True  # a batch of streams is one padded tensor (hf_streams.py)

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
        self.device = hf_setup.pick_device(device)
        # As asked, or following the cores other work leaves free (torch_threads.py).
        self.cpu_threads = TorchThreads(torch, threads, self.device)
        self.model_path = str(model_path)
        self.dtype_trial: dict | None = None  # bfloat16 against float32, where raced here
        self._threads = threads  # as asked: the dtype's race is remembered by them
        wanted = hf_setup.pick_dtype(self.device, dtype, model_path, threads)
        self._dtype = torch.float32 if wanted == hf_setup.RACE else wanted
        self._model, self._tok, self._gguf = load(Path(model_path), self.device, self._dtype)
        if wanted == hf_setup.RACE:
            self._dtype, self.dtype_trial = hf_setup.race_dtype(self._model, self.model_path,
                                                                threads)
        self.small_rows = hf_setup.route_small_rows(self._model, self.device)
        self._cache = None
        self._cache_kw = cache_keyword(self._model)
        self._pieces = hf_tokens.piece_table(self._tok)
        self._special = hf_tokens.special_ids(self._tok)
        self._eos = hf_tokens.eos_ids(self._tok, self._model)
        self._template = hf_tokens.chat_template(self._tok, self._gguf)
        self._hidden = HiddenRows()  # final hidden states, kept only when an oracle asks
        self._features = LayerFeatures()  # chosen layers' outputs, likewise
        # Compiled steps over a static cache (hf_compiled.py), where chosen and possible.
        self._steps: hf_compiled.CompiledSteps | None = None
        self._kv: hf_compiled.StaticKV | None = None
        self.compile_trial: dict | None = None  # compiled against eager, where raced here
        self.compiled = hf_setup.choose_compile(self, compile)
        # Compiled steps cost otherwise than eager ones (a graph per width): their own profile.
        self.profile_variant = "compiled" if self.compiled == "on" else ""

    def prepare_widths(self) -> None:
        if self._steps is not None:
            hf_compiled.warm(self._steps, self._static_kv(), hf_compiled.WIDTHS)

    def _follow_free_cores(self) -> None:
        self.cpu_threads.set_now(held=self.threads_held, count=self.held_count)

    def _hold_threads(self) -> None:
        self.cpu_threads.set_now(held=True, count=self.held_count)

    @property
    def nominal_threads(self) -> int | None:
        return self.cpu_threads.nominal if self.device == "cpu" else None

    @property
    def threads_now(self) -> int:
        return self.cpu_threads.now

    def busy_note(self) -> str | None:
        return self.cpu_threads.note()

    def _static_kv(self) -> hf_compiled.StaticKV:
        return hf_compiled.StaticKV(self._model, self.device, self._dtype, self.n_ctx)

    @property
    def dtype(self) -> str:
        """What its products compute in ("float32", "bfloat16", "float16")."""
        return str(self._dtype).removeprefix("torch.")

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
        return hf_tokens.vocab_type(self._tok)

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

        self._follow_free_cores()
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

        self._follow_free_cores()
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

        decoder = self.early_exit_decoder()
        if self._kv is not None:
            with self._static_first_layers(n_layers) as step:
                yield step
            return
        if self._cache is None:
            self._cache = DynamicCache()
        cache, config, fed = self._cache, decoder.config, 0

        def step(tokens: list[int]) -> np.ndarray:
            nonlocal fed
            self._follow_free_cores()
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

    def early_exit_decoder(self):
        """The decoder, whose forward stops after `config.num_hidden_layers` layers (the
        way early exit cuts it short), or BackendError."""
        decoder = self._model.get_decoder()
        if "self.layers[: self.config.num_hidden_layers]" not in inspect.getsource(
            type(decoder).forward
        ):
            raise BackendError(
                f"early exit does not know how to stop {type(decoder).__name__} after a layer"
            )
        return decoder

    @contextmanager
    def _static_first_layers(self, n_layers: int):
        """`first_layers` on the static cache: the first layers' slots after the context are
        written while drafting, and their length set back on exit."""
        torch, kv, n_past, fed = self._torch, self._kv, self.n_past, 0
        head = self._model.get_output_embeddings()

        def step(tokens: list[int]) -> np.ndarray:
            nonlocal fed
            self._follow_free_cores()
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

    def stream_cache(self, n_streams: int):
        """A batch of streams on these weights: a cache row per stream, one forward a step
        (hf_streams.py; eager, also where single steps run compiled)."""
        from .hf_streams import HFStreams

        if self._model is None:
            raise BackendError("this backend is closed")
        return HFStreams(self, n_streams)

    def stream_targets(self, n_streams: int):
        """A batch's view of this target and each stream's (hf_streams.BatchTarget,
        StreamTarget): a stream's early exit drafts on its own cells of the batch."""
        from .hf_streams import BatchTarget, StreamTarget

        batch = BatchTarget(self)
        return batch, [StreamTarget(batch, i) for i in range(n_streams)]

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
        other._hidden = HiddenRows()  # hidden states are kept per backend, on request
        other._features = LayerFeatures()
        return other

    def close(self) -> None:
        self._hidden.enable(None, False)
        self._features.enable(None, None)
        self._cache = None
        self._kv = self._steps = None
        self._model = None
