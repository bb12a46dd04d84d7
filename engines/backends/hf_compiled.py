"""Compiled transformers steps: a static KV cache and the decoder compiled for a few widths.

Eager decoding of a small model spends much of a step in Python and in one small kernel after
another; `torch.compile` fuses them (#64). A compiled graph wants fixed shapes, so:

- the KV cache is transformers' `StaticCache`, fixed tensors written in place; it is grown by
  copying into one twice as long when the context outgrows it, and its length is left dynamic
  in the graphs, so growing compiles nothing;
- a forward of m tokens runs in the graph of the smallest width in WIDTHS that holds it (a
  draft of 5 plus the pending token verifies in the 8-wide graph), padded with rows after the
  real ones. Every row attends through an explicit mask over the cache (a chain's causal rows,
  a tree's ancestors), so trees run in the same graphs; padded rows are seen by no real row,
  and the cache slots they write lie past the kept length, where the next forward writes;
- the graph ends at the decoder's final norm: the LM head runs outside it on the rows asked
  for, so a hook on the head (Medusa's hidden rows) sees what it sees eagerly;
- grouped-query attention runs on the key/value heads as they are cached: the query heads
  that share a key/value head are packed into its rows (transformers' `pack_gqa`, which it
  uses only for one eager row) instead of copying the cache's keys and values once per query
  head (`repeat_kv`, what it does when compiling). The static cache is read whole every step,
  so those copies grew with its size; and on a CPU, bfloat16 attention of one row per head
  ran several times slower than of the packed rows.

Forwards wider than the widest graph (a prompt), feeds whose width has no graph yet (a short
prompt, the warm-up: plain decoding compiles width 1 alone), and those that need hooks inside
the decoder (EAGLE's layer features, early exit's first layers), run the same modules eagerly
on the same cache. The graphs are compiled once per model, dtype, device and width, on first
use in a process; inductor's caches live under the specviz cache (`compile/`), so a later
process reads the compiled code from disk instead of compiling it again. What a read still
costs is dynamo tracing the graph's code again and loading it, once per width, which is why
only the widths a lane uses are made. (torch's precompile, `aot_compile` and
`save_compiled_function`, would skip the trace; it cannot serve transformers' decoder: ID_MATCH
and CLOSURE_MATCH guards cannot be serialized in torch 2.13.) So on a CPU a graph runs a few
decoder layers, not the decoder (regional compilation): the layers share their code, and each
sees the cache through OneLayerCache, which writes its own layer whatever index it is given, so
one graph serves every run of the decoder and dynamo traces RUN_LAYERS layers at every start
(smollm2's width 1: a read of 3 s instead of 8 on a 2-core CPU, a step 6-7.5% slower than in
one graph: the embedding, rotary embedding and final norm run eagerly around the runs). On
CUDA the decoder stays one graph, one CUDA graph a step. Inductor's counters tell a read from
a compile only afterwards; a ledger beside its cache (StepLedger) says beforehand which it will
be, and what changed where the cache cannot serve.

On CUDA the graphs are also captured as CUDA graphs, one launch a step instead of one per
kernel, by PyTorch's CUDA graph trees (`mode="reduce-overhead"`, as transformers' own
`generate()` compiles a static cache) rather than by capturing `torch.cuda.CUDAGraph`s here:
the trees already keep what a capture needs. The cache's tensors keep their address (the
StaticCache marks them with `mark_static_address`, so the graph writes them in place instead
of copying them in); the ids, positions and mask are copied into the graph's own inputs; a
graph is recorded per width and cache size, and again for another backend's cache on the same
weights (a different static address), then found again by its addresses. (A graph recorded
too often, past the trees' re-record limit, runs compiled without a CUDA graph: slower, still
right; PyTorch 2.13 no longer counts new static addresses against that limit.) A replay
overwrites the previous replay's output, so each step starts a new generation
(`cudagraph_mark_step_begin`) and clones its rows: the LM head's hook keeps them (Medusa's
hidden rows).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from pathlib import Path

from ..machine.json_file import read_dict, update_dict

WIDTHS = (1, 2, 4, 8, 16, 32)
WARM_WIDTHS = (1,)  # compiled at load: a plain step's; the others on first use
MIN_CAPACITY = 512  # cache slots at first; doubled when outgrown (attention reads them all)
RUN_LAYERS = 5  # on a CPU, decoder layers a graph runs at most (0: the whole decoder)
# Architectures whose causal LM is "decoder, then LM head" with nothing after the head (no
# logit scaling or soft-capping, which the head's call outside the graph would miss).
ARCHITECTURES = ("llama", "qwen2", "qwen3", "mistral")
CACHE_FOLDER = "compile"
PACKED = "specviz_packed_gqa"  # the attention implementation the compiled models use
PACKED_ATTENTION = True  # False: transformers' own SDPA (a comparison's other side)
ENV = "SPECVIZ_COMPILE"  # on, off or auto, where neither the command line nor a spec says
CHOICES = ("on", "off", "auto")


def width_for(m: int) -> int | None:
    """The graph width a forward of `m` rows runs in (None: wider than every graph)."""
    return next((w for w in WIDTHS if w >= m), None)


def unsupported(model, cpu: bool = True) -> str | None:
    """Why `model` cannot take the compiled path here (None: it can); on a CPU inductor
    writes C++, which needs a compiler."""
    try:
        import torch._dynamo  # noqa: F401
        from transformers import StaticCache
    except ImportError as exc:
        return f"this torch or transformers cannot compile ({exc})"
    use_disk_cache()  # before anything of inductor's reads where its cache is
    kind = getattr(model.config, "model_type", "?")
    if kind not in ARCHITECTURES:
        return f"compiled steps are written for {', '.join(ARCHITECTURES)}, not {kind}"
    cache = StaticCache(config=model.config, max_cache_len=8)
    if any(type(layer).__name__ != "StaticLayer" or not hasattr(layer, "cumulative_length")
           for layer in cache.layers):
        return "its cache is not one plain static layer per decoder layer (sliding windows?)"
    return no_compiler() if cpu else None


def no_compiler() -> str | None:
    """Why inductor cannot build CPU code here (no C++ compiler), or None."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        compiler = get_cpp_compiler()
    except Exception as exc:  # what it raises differs between releases
        return f"no C++ compiler for torch.compile ({str(exc).strip().splitlines()[0]})"
    return None if shutil.which(compiler) else f"no C++ compiler ({compiler}) for torch.compile"


def use_disk_cache() -> str:
    """Point inductor's caches (the FX graph and AOT caches live under it) at the specviz
    cache, unless the user pointed them elsewhere; the folder. Inductor writes its default
    (a temporary folder) into the variable on first use, which is not the user's choice."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from ..models import home_dir

    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not folder or os.path.abspath(folder) == os.path.abspath(default_cache_dir()):
        folder = str(home_dir("cache") / CACHE_FOLDER)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
    return folder


def packed_gqa_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                         is_causal=None, **kwargs):
    """transformers' SDPA attention, with the query heads that share a key/value head packed
    into its rows: query (b, heads, rows, d) as (b, kv_heads, groups * rows, d), the mask's
    rows repeated for each group. Where that does not apply (no grouping, no explicit mask
    shared by the heads, more rows than the widest graph: a prompt, whose repeated mask would
    outweigh the copies it saves) it is transformers' own."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, rows, dim = query.shape
    if (groups == 1 or attention_mask is None or attention_mask.dim() != 4
            or attention_mask.shape[1] != 1 or rows > max(WIDTHS)
            or kwargs.get("position_bias") is not None):
        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      dropout=dropout, scaling=scaling, is_causal=is_causal,
                                      **kwargs)
    packed = query.reshape(batch, key.shape[1], groups * rows, dim)
    mask = attention_mask
    if rows > 1:  # row g * rows + i is query row i of the group's head g
        mask = mask[:, :, None].expand(mask.shape[0], 1, groups, rows, mask.shape[-1])
        mask = mask.reshape(mask.shape[0], 1, groups * rows, mask.shape[-1])
    out = torch.nn.functional.scaled_dot_product_attention(packed, key, value, attn_mask=mask,
                                                           dropout_p=dropout, scale=scaling)
    return out.reshape(batch, heads, rows, dim).transpose(1, 2).contiguous(), None


def use_packed_attention(model) -> bool:
    """Make `model` attend with packed_gqa_attention where it uses transformers' SDPA; the
    mask function registered with it is SDPA's, so the model's eager paths build the masks
    they built before. True where it was switched."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if not PACKED_ATTENTION or model.config._attn_implementation not in ("sdpa", PACKED):
        return False
    AttentionInterface.register(PACKED, packed_gqa_attention)
    AttentionMaskInterface.register(PACKED, sdpa_mask)
    model.set_attn_implementation(PACKED)
    return True


def _decoder_rows(decoder, ids, positions, mask, cache, keyword: str):
    out = decoder(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=True,
                  **{keyword: cache})
    return out.last_hidden_state


class OneLayerCache:
    """The static cache as one decoder layer sees it: `update` writes that layer's slots
    whatever layer index it is given, so the layers of a run are traced alike and one graph
    serves every run (the index, a constant, would otherwise make a graph per run)."""

    def __init__(self, layer) -> None:
        self.layer = layer

    def update(self, key_states, value_states, *args, **kwargs):
        return self.layer.update(key_states, value_states)


def _run_rows(layers, hidden, mask, cos, sin, positions, cache_layers, keyword: str):
    """A run of decoder layers over `hidden`, as the decoder's own loop calls them."""
    for layer, cached in zip(layers, cache_layers):
        hidden = layer(hidden, attention_mask=mask, position_ids=positions,
                       position_embeddings=(cos, sin), use_cache=True,
                       **{keyword: OneLayerCache(cached)})
    return hidden


def run_length(n_layers: int, device_kind: str) -> int | None:
    """Decoder layers a compiled call runs, on a device of this kind (None: the whole decoder
    in one graph): the largest divisor of `n_layers` up to RUN_LAYERS, so one graph serves
    every run of the decoder; on CUDA the whole decoder, one CUDA graph a step."""
    if device_kind == "cuda" or not RUN_LAYERS:
        return None
    return max(k for k in range(1, RUN_LAYERS + 1) if n_layers % k == 0)


def compile_options(device_kind: str) -> dict:
    """torch.compile's arguments for the decoder on a device of this kind ("cpu", "cuda",
    ...): on CUDA the graphs are captured as CUDA graphs (the module's docstring says how)."""
    options = {"dynamic": None, "fullgraph": True}
    if device_kind == "cuda":
        options["mode"] = "reduce-overhead"
    return options


class CompiledSteps:
    """The compiled decoder of one loaded model, shared by the backends on its weights."""

    def __init__(self, model, tell=None, device_kind: str | None = None,
                 compiling=contextlib.nullcontext) -> None:
        import torch

        from .hf_cache import cache_keyword

        use_disk_cache()
        # One code object serves every width and model in the process: room for them all.
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        self.model = model
        self.packed_attention = use_packed_attention(model)
        self.decoder = model.get_decoder()
        self.keyword = cache_keyword(self.decoder)
        kind = device_kind or model.device.type
        self.options = compile_options(kind)
        self.cuda_graphs = self.options.get("mode") == "reduce-overhead"
        self.run = run_length(len(self.decoder.layers), kind)
        self._compiled = torch.compile(_decoder_rows if self.run is None else _run_rows,
                                       **self.options)
        self._ready: set[int] = set()  # widths compiled (or read from disk) in this process
        self._tell = tell or say
        # Around a graph's first call: inductor writes the thread count into CPU kernels
        # (torch_threads.py), so they are compiled at the backend's nominal count.
        self._compiling = compiling
        self.compile_seconds: dict[int, float] = {}
        self.read_from_cache: dict[int, bool] = {}  # width -> whether its first call read it
        self._ledger = StepLedger(model, kind, self.run)

    def ready(self, width: int) -> bool:
        """Whether the graph of `width` was compiled (or read) in this process."""
        return width in self._ready

    def rows(self, ids, positions, mask, cache, width: int):
        """The decoder's output rows, through the graph of `width` (compiled on first use)."""
        if width in self._ready:
            return self._call(ids, positions, mask, cache)
        self._tell(self._ledger.before(width))
        before, started = cache_counts(), time.perf_counter()
        with self._compiling():
            out = self._call(ids, positions, mask, cache)
        seconds = round(time.perf_counter() - started, 2)
        read = cache_read(before, cache_counts())
        self._ready.add(width)
        self.compile_seconds[width], self.read_from_cache[width] = seconds, read
        after = self._ledger.after(width, read, seconds)
        if after:
            self._tell(after)
        return out

    def _call(self, ids, positions, mask, cache):
        if self.run is not None:
            return self._call_runs(ids, positions, mask, cache)
        if self.cuda_graphs:
            import torch

            torch.compiler.cudagraph_mark_step_begin()  # the last step's output is dead
        out = self._compiled(self.decoder, ids, positions, mask, cache, self.keyword)
        if self.cuda_graphs:
            out = out.clone()  # the graph's own buffer: the next replay writes over it
        return out

    def _call_runs(self, ids, positions, mask, cache):
        """The decoder's forward with its layers run `self.run` at a time through the graph:
        the embedding, rotary embedding and final norm, a few operations, run eagerly (for
        the four ARCHITECTURES, what their decoder's forward does around its layers, given
        the explicit 4-d mask, which it passes through as it is)."""
        import torch

        decoder = self.decoder
        hidden = decoder.embed_tokens(ids)
        cos, sin = decoder.rotary_emb(hidden, position_ids=positions)
        for t in (hidden, cos, sin):
            torch._dynamo.mark_static(t, 1)  # the width: a graph for each
        layers = decoder.layers[:decoder.config.num_hidden_layers]
        for start in range(0, len(layers), self.run):
            end = start + self.run
            hidden = self._compiled(layers[start:end], hidden, mask, cos, sin, positions,
                                    cache.layers[start:end], self.keyword)
        return decoder.norm(hidden)

    def eager_rows(self, ids, positions, mask, cache):
        return _decoder_rows(self.decoder, ids, positions, mask, cache, self.keyword)


CACHE_COUNTERS = (("inductor", "fxgraph_cache"), ("aot_autograd", "autograd_cache"))
LEDGER_NAME = "specviz-steps.json"  # which steps the compile folder holds, for what


def cache_counts() -> tuple[int, int]:
    """(hits, misses) of inductor's FX graph cache and AOTAutograd's cache so far."""
    from torch._dynamo.utils import counters

    hits = sum(counters[group][f"{name}_hit"] for group, name in CACHE_COUNTERS)
    misses = sum(counters[group][f"{name}_miss"] for group, name in CACHE_COUNTERS)
    return hits, misses


def cache_read(before: tuple[int, int], after: tuple[int, int]) -> bool:
    """Whether the calls between two cache_counts() compiled nothing: they read the caches,
    or dynamo found the graph already made in this process (which counts neither)."""
    return after[1] == before[1]


class StepLedger:
    """What the compile folder holds: a line per model shape, dtype, device and width, with
    the torch, CPU and vector instructions it was compiled for. Inductor's caches say only
    hit or miss, after the fact; this says beforehand whether a step will be read or
    compiled, and names what changed where the cache cannot serve."""

    def __init__(self, model, device_kind: str, run: int | None = None) -> None:
        import hashlib

        shape = model.config.to_json_string(use_diff=False)
        self._model = hashlib.sha256(shape.encode()).hexdigest()[:16]
        self._device = device_kind
        self._run = run  # layers a graph runs (None: the whole decoder)
        self._dtype = str(model.dtype).removeprefix("torch.")
        self._path = Path(use_disk_cache()) / LEDGER_NAME
        self._expected: dict[int, bool] = {}  # width -> whether `before` said it is read

    def before(self, width: int) -> str:
        """The line said before the first call of `width`."""
        held, here = read_dict(self._path).get(self._key(width)), self.machine()
        self._expected[width] = held == here
        if held == here:
            return f"reading the transformers step of width {width} from the compile cache"
        if isinstance(held, dict):
            changed = ", ".join(f"{k} {held.get(k)} -> {v}" for k, v in here.items()
                                if held.get(k) != v)
            return (f"the compile cache cannot serve the transformers step of width {width} "
                    f"({changed}): compiling it again, once")
        return (f"compiling the transformers step of width {width} for this machine, once "
                "(later starts read it from the cache)")

    def after(self, width: int, read: bool, seconds: float) -> str | None:
        """The line said after it, where the one before was wrong (None: it was right)."""
        expected = self._expected.get(width, False)
        try:
            update_dict(self._path, lambda known: {**known, self._key(width): self.machine()})
        except OSError:
            pass  # said "compiling" again next time; the graphs are in inductor's cache
        if expected and not read:
            return (f"the compile cache could not serve the transformers step of width {width}"
                    f" (inductor's key changed: its settings or sources): compiled it again in "
                    f"{seconds:.1f} s")
        if read and not expected:
            return f"read the transformers step of width {width} from the cache ({seconds:.1f} s)"
        return None

    def _key(self, width: int) -> str:
        run = "" if self._run is None else f"|run{self._run}"
        return f"{self._model}|{self._dtype}|{self._device}|w{width}{run}"

    def machine(self) -> dict:
        from .cpu_dtype import _machine

        cpu, torch_version = _machine()
        facts = {"torch": torch_version, "cpu": cpu}
        if self._device == "cpu":
            from torch._inductor.cpu_vec_isa import pick_vec_isa

            facts["instructions"] = str(pick_vec_isa()) or "none"
        return facts


class StaticKV:
    """One backend's static cache: its length follows the backend's context; slots past it
    hold whatever the last forward wrote there (padding, discarded nodes), masked out.

    Attention reads every slot, so the cache in use is the smallest that holds the context:
    grown by doubling, and given back for a smaller one when a rollback leaves it far too big
    (a new prompt after a long one). Each size's cache is kept once made, so its tensors keep
    their addresses and the CUDA graphs recorded on them replay."""

    def __init__(self, model, device: str, dtype, n_ctx: int) -> None:
        self.model, self.device, self.dtype, self.n_ctx = model, device, dtype, n_ctx
        self.cache = None
        self.capacity = 0
        self._made: dict[int, object] = {}  # capacity -> its StaticCache

    def room(self, needed: int) -> bool:
        """Make the cache hold `needed` slots (grown by doubling); False past the context."""
        if needed <= self.capacity:
            return True
        if needed > self.n_ctx:
            return False
        self._use(self._fitting(needed), kept=self.capacity)
        return True

    def fit(self, n: int) -> None:
        """After a rollback to `n` positions: the smallest cache that holds them and a widest
        step after them, where that is smaller than the one in use (its first `n` slots
        copied over)."""
        capacity = self._fitting(n + max(WIDTHS))
        if self.cache is not None and capacity < self.capacity:
            self._use(capacity, kept=n)

    def _fitting(self, needed: int) -> int:
        capacity = MIN_CAPACITY
        while capacity < needed:
            capacity *= 2
        return min(capacity, self.n_ctx)

    def _use(self, capacity: int, kept: int) -> None:
        """Switch to the cache of `capacity` slots, the first `kept` positions copied in."""
        import torch

        cache = self._made.get(capacity) or self._make(capacity)
        if self.cache is not None and kept:
            with torch.inference_mode():  # the cache's tensors were made in it
                for old, new in zip(self.cache.layers, cache.layers):
                    new.keys[:, :, :kept].copy_(old.keys[:, :, :kept])
                    new.values[:, :, :kept].copy_(old.values[:, :, :kept])
                    new.cumulative_length.copy_(old.cumulative_length)
        self.cache, self.capacity = cache, capacity

    def _make(self, capacity: int):
        import torch
        from transformers import StaticCache

        config = self.model.config
        heads = int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None)
                       or config.hidden_size // config.num_attention_heads)
        cache = StaticCache(config=config, max_cache_len=capacity)
        cache.early_initialization(1, heads, head_dim, self.dtype, torch.device(self.device))
        for new in cache.layers:
            torch._dynamo.mark_dynamic(new.keys, 2)  # its length: one graph for every size
            torch._dynamo.mark_dynamic(new.values, 2)
        self._made[capacity] = cache
        return cache

    def set_length(self, n: int, layers=None) -> None:
        """Where the next forward writes: right after the first `n` positions."""
        import torch

        if self.cache is not None:
            with torch.inference_mode():  # the cache's tensors were made in it
                for layer in self.cache.layers[:layers]:
                    layer.cumulative_length.fill_(n)

    def gather(self, n_past: int, path: list[int]) -> None:
        """Move the kept nodes' slots (after n_past, in node order) right after n_past."""
        import torch

        if path:
            src = torch.tensor([n_past + i for i in path], device=self.device)
            with torch.inference_mode():
                for layer in self.cache.layers:
                    for t in (layer.keys, layer.values):
                        t[:, :, n_past:n_past + len(path)] = t.index_select(2, src)
        self.set_length(n_past + len(path))

    def mask(self, n_past: int, rows: int, visible=None):
        """The additive attention mask (1, 1, rows, capacity): row i sees the cache before
        n_past, and then the slots of the nodes `visible[i]` and its own (None: a chain, every
        earlier row); rows past `visible` follow the chain rule."""
        import torch

        slots = torch.arange(self.capacity, device=self.device)
        allowed = slots[None, :] <= (n_past + torch.arange(rows, device=self.device))[:, None]
        if visible is not None:
            allowed[:len(visible), n_past:] = False
            for i, vis in enumerate(visible):
                allowed[i, [n_past + j for j in (*vis, i)]] = True
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device)
        mask.masked_fill_(~allowed, torch.finfo(self.dtype).min)
        return mask[None, None]


def say(text: str) -> None:
    print(f"specviz: {text}", file=sys.stderr, flush=True)


def run_rows(steps: CompiledSteps, kv: StaticKV, tokens: list[int], n_past: int,
             depths: list[int] | None = None, visible=None, eager: bool = False,
             layers: int | None = None, compile_new: bool = True):
    """The decoder's output rows (1, m, hidden) for `tokens` written after `n_past` cached
    positions: through the graph of the smallest width that holds them, padded, or eagerly
    (`eager`, wider than every graph, too near the end of the context, `layers` < all, or a
    graph not compiled yet where `compile_new` is False).
    Nodes at `depths` seeing `visible` make a tree; None, a chain. The cache's length is
    n_past + m afterwards (in the first `layers` layers only, where given)."""
    import torch

    m = len(tokens)
    width = None if eager or layers is not None else width_for(m)
    if width is not None and not compile_new and not steps.ready(width):
        width = None
    if width is not None and not kv.room(n_past + width):
        width = None  # the padding would not fit before the end of the context
    if width is None and not kv.room(n_past + m):
        raise ValueError(f"{n_past} + {m} tokens exceed the context of {kv.n_ctx}")
    rows = width or m
    ids = torch.zeros((1, rows), dtype=torch.long)
    ids[0, :m] = torch.tensor(tokens, dtype=torch.long)
    positions = n_past + torch.arange(rows)
    if depths is not None:
        positions[:m] = n_past + torch.tensor(depths)
    ids, positions = ids.to(kv.device), positions[None].to(kv.device)
    mask = kv.mask(n_past, rows, visible)
    kv.set_length(n_past, layers)
    if width is None:
        hidden = _eager_rows(steps, ids, positions, mask, kv, layers)
    else:
        for t in (ids, positions):
            torch._dynamo.mark_static(t, 1)
        torch._dynamo.mark_static(mask, 2)
        torch._dynamo.mark_dynamic(mask, 3)  # as the cache's length
        hidden = steps.rows(ids, positions, mask, kv.cache, width)
    kv.set_length(n_past + m, layers)
    return hidden[:, :m]


def _eager_rows(steps: CompiledSteps, ids, positions, mask, kv: StaticKV, layers: int | None):
    config = steps.decoder.config
    full = config.num_hidden_layers
    if layers is not None:
        config.num_hidden_layers = layers  # the decoder runs that many layers (early exit)
    try:
        return steps.eager_rows(ids, positions, mask, kv.cache)
    finally:
        config.num_hidden_layers = full


def warm(steps: CompiledSteps, kv: StaticKV, widths=(1,)) -> None:
    """Compile (or read from the disk cache) the graphs of `widths` now, on a scratch cache,
    so that a run's first steps are not the ones that pay for it."""
    import torch

    with torch.inference_mode():
        for width in widths:
            run_rows(steps, kv, [0] * width, 0)
