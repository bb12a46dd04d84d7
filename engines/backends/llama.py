"""The llama.cpp backend, through llama-cpp-python's low-level (C API) bindings.

Why the low-level API and not `llama_cpp.Llama`: verification needs logits for exactly the
rows of a batch it asks for, and rollback of the cache after a rejection. The high-level
class offers either one row or `logits_all`, which keeps n_ctx x vocab floats around.
Here a batch asks for logits only where needed, and rollback is one `llama_memory_seq_rm`.
"""

from __future__ import annotations

import ctypes
import logging
import re
import threading
from pathlib import Path

import numpy as np

from ..errors import BackendError
from ..machine.cpu_load import shared_gauge
from ..machine.device_choice import llama_offload
from ..machine.hardware import compute_threads, read_cpu
from . import llama_buffers, llama_widths
from .base import Backend

SEQ = 0  # the sequence id of the context; trees add more while they are verified
MAX_SEQ = 256  # llama.cpp's LLAMA_MAX_SEQ


def llama_lib():
    """Import llama_cpp once, quietly (its C logging would fill the terminal)."""
    try:
        import llama_cpp
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise BackendError(f"llama-cpp-python is not installed ({exc}); "
                           "pip install specviz") from None
    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
    if not getattr(llama_lib, "ready", False):
        _quiet_logs(llama_cpp)
        llama_cpp.llama_backend_init()
        llama_lib.ready = True
    return llama_cpp


_load_lock = threading.Lock()  # one load at a time: the buffer list and the log are global
_load_log: list[str] | None = None  # llama.cpp's lines while a model loads
ERROR_MARK = "\x00error: "  # marks llama.cpp's error lines among a load's lines
_BUFFER_LINE = re.compile(r"(\S+) model buffer size\s*=\s*([\d.]+) MiB")


@ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
def _log_errors_only(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    if not text:
        return
    line = text.decode("utf-8", "replace")
    if _load_log is not None:  # a load's lines, errors too: its failure is said in one line
        _load_log.append(f"{ERROR_MARK}{line}" if level == 4 else line)
    elif level == 4:  # GGML_LOG_LEVEL_ERROR
        logging.getLogger("specviz.llama").error(line.rstrip())


def _quiet_logs(llama_cpp) -> None:
    llama_cpp.llama_log_set(_log_errors_only, ctypes.c_void_p(0))


def system_info() -> str:
    """llama.cpp's own line of what it was built with and uses (AVX2, AMX_INT8, CUDA...)."""
    return llama_lib().llama_print_system_info().decode("utf-8", "replace").strip()


class _Weights:
    """One loaded llama_model, freed when the last backend using it lets go.

    Each backend on it has a context (KV cache, compute buffers) of its own; the weights,
    the bulk of the memory, are read-only during decoding and so shared safely.
    """

    def __init__(self, lib, path: Path, device: str, gpu_layers: int) -> None:
        self._lib = lib
        self.device = device
        self.model, self.buffers = _load_model(lib, path, gpu_layers)
        self._users = 1
        self._lock = threading.Lock()

    def acquire(self) -> _Weights:
        with self._lock:
            if self.model is None:
                raise BackendError("the model was freed already")
            self._users += 1
        return self

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            model, last = self.model, self._users == 0
            if last:
                self.model = None
        if last and model:
            self._lib.llama_model_free(model)


class LlamaBackend(Backend):
    name = "llama"

    def __init__(
        self,
        model_path: str | Path,
        n_ctx: int = 4096,
        threads: int | None = None,
        n_batch: int = 512,
        device: str | None = None,
        n_gpu_layers: int | None = None,
        *,
        weights: _Weights | None = None,  # another backend's, from share()
        n_seq: int = 1,  # sequence ids from the start (a batch of streams: one each)
    ) -> None:
        super().__init__()
        lib = self._lib = llama_lib()
        path = Path(model_path)
        self.model_path = str(path)
        if weights is None:
            if not path.is_file():
                raise BackendError(f"model file not found: {path}")
            weights = _Weights(lib, path, *_pick_device(lib, device, n_gpu_layers))
        self._weights = weights
        self._model = weights.model
        self.device = weights.device
        self.weight_buffers = weights.buffers  # buffer type -> MiB of weights in it
        self.threads = threads or compute_threads()
        self._threads_asked = threads
        # Threads left to "auto" follow the cores other work leaves free (machine/cpu_load.py);
        # a count asked for is kept. A GPU's layers do not wait on CPU threads.
        self._gauge = (shared_gauge(self.threads) if threads is None and self.threads > 1
                       and weights.device == "cpu" else None)
        self._threads_now = self.threads
        self._vocab = lib.llama_model_get_vocab(self._model)
        self._n_vocab = lib.llama_vocab_n_tokens(self._vocab)
        self._n_batch = n_batch
        self._n_seq = n_seq  # sequence ids the context has room for: 1 until a tree needs more
        self._n_ctx_asked = n_ctx
        try:
            self._ctx = self._new_context(n_ctx)
        except BaseException:
            self._release_weights()
            raise
        self._mem = lib.llama_get_memory(self._ctx)
        self._batch = lib.llama_batch_init(n_batch, 0, 1)
        self._query: list[int] = []  # last masked batch: the seq id each node attends as
        self._n_groups = 0  # sequence ids (after SEQ) that batch used
        self.rerun_tokens = 0  # kept paths that had to be run again (see _keep_path)
        self._pieces: dict[int, bytes] = {}
        self._eos = frozenset(t for t in range(self._n_vocab)
                              if lib.llama_vocab_is_eog(self._vocab, t))
        self.pad_widths = llama_widths.widths_for()
        self.profile_variant = llama_widths.variant(self.pad_widths)

    def share(self, n_seq: int = 1) -> LlamaBackend:
        """Another backend on this one's loaded weights, with a context (cache) of its own
        (with `n_seq` sequence ids in it)."""
        if self._model is None:
            raise BackendError("this backend is closed")
        return LlamaBackend(self.model_path, self._n_ctx_asked, self._threads_asked,
                            self._n_batch, weights=self._weights.acquire(), n_seq=n_seq)

    def stream_cache(self, n_streams: int):
        from .llama_streams import LlamaStreams

        return LlamaStreams(self, n_streams)

    def _new_context(self, n_ctx: int):
        lib = self._lib
        params = lib.llama_context_default_params()
        params.n_ctx = min(n_ctx, lib.llama_model_n_ctx_train(self._model)) or n_ctx
        # llama.cpp pads the context to a multiple of 256 cells but caps its batch at the
        # length asked: a prompt between the two passed every check and then failed
        # GGML_ASSERT(n_tokens_all <= n_batch), killing the process. The length asked is
        # the context, checked against the prompt before anything is decoded.
        self._n_ctx_cap = params.n_ctx
        params.n_batch = params.n_ubatch = self._n_batch
        params.n_seq_max = self._n_seq
        # One cache shared by all sequences: a tree's branches share the context's cells.
        params.kv_unified = self._n_seq > 1
        params.n_threads = params.n_threads_batch = self.threads
        params.no_perf = True
        ctx = lib.llama_init_from_model(self._model, params)
        if not ctx:
            raise BackendError(f"llama.cpp could not create a context of {n_ctx} tokens")
        return ctx

    # ------------------------------------------------------------ properties

    @property
    def n_ctx(self) -> int:
        cells = int(self._lib.llama_n_ctx(self._ctx))
        return min(cells, self._n_ctx_cap) if self._n_ctx_cap > 0 else cells

    @property
    def n_vocab(self) -> int:
        return int(self._n_vocab)

    @property
    def bos_id(self) -> int | None:
        bos = self._lib.llama_vocab_bos(self._vocab)
        return int(bos) if bos >= 0 else None

    @property
    def eos_ids(self) -> frozenset[int]:
        return self._eos

    @property
    def vocab_type(self) -> str:
        code = int(self._lib.llama_vocab_type(self._vocab))
        names = {getattr(self._lib, f"LLAMA_VOCAB_TYPE_{n}", -1): n
                 for n in ("NONE", "SPM", "BPE", "WPM", "UGM", "RWKV", "PLAMO2")}
        return names.get(code, f"type {code}")

    @property
    def chat_template(self) -> str | None:
        raw = self._lib.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8") if raw else None

    # ------------------------------------------------------------ text

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        size = len(data) + 8
        while True:
            out = (self._lib.llama_token * size)()
            n = self._lib.llama_tokenize(self._vocab, data, len(data), out, size, add_special, True)
            if n >= 0:
                return list(out[:n])
            size = -n

    def token_bytes(self, token_id: int) -> bytes:
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self._pieces[token_id] = self._piece(token_id)
        return piece

    def _piece(self, token_id: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = self._lib.llama_token_to_piece(self._vocab, token_id, buf, 64, 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self._lib.llama_token_to_piece(self._vocab, token_id, buf, -n, 0, False)
        return buf.raw[:n]

    def token_text_raw(self, token_id: int) -> str:
        raw = self._lib.llama_vocab_get_text(self._vocab, token_id)
        return raw.decode("utf-8", "replace") if raw else ""

    def is_special(self, token_id: int) -> bool:
        return bool(self._lib.llama_vocab_is_control(self._vocab, token_id))

    # ------------------------------------------------------------ cache

    def _forward(self, tokens: list[int], n_rows: int) -> np.ndarray:
        width = llama_widths.padded_width(len(tokens), self.pad_widths,
                                          min(self.n_ctx - self.n_past, self._n_batch))
        if width:
            return self._forward_padded(tokens, n_rows, width)
        out = np.empty((n_rows, self._n_vocab), dtype=np.float32)
        first_row = len(tokens) - n_rows
        for start in range(0, len(tokens), self._n_batch):
            chunk = tokens[start : start + self._n_batch]
            want = [start + i >= first_row for i in range(len(chunk))]
            self._decode(chunk, self.n_past + start, want)
            for i, wanted in enumerate(want):
                if wanted:
                    out[start + i - first_row] = self.logits_row(i)
        return out

    def _forward_padded(self, tokens: list[int], n_rows: int, width: int) -> np.ndarray:
        """`tokens` run as a batch of `width` (llama_widths.py): pad rows after them, every
        row's logits asked for, the pad's cells removed."""
        n_past = self.n_past
        self._decode(tokens + [tokens[-1]] * (width - len(tokens)), n_past, [True] * width)
        out = np.stack([self.logits_row(i) for i in range(len(tokens) - n_rows, len(tokens))])
        self._truncate(n_past + len(tokens))
        return out

    def _decode(self, chunk: list[int], pos0: int, want: list[bool]) -> None:
        n = len(chunk)
        self.decode_rows(chunk, range(pos0, pos0 + n), [SEQ] * n, want)

    def decode_rows(self, tokens, positions, seqs, want) -> None:
        """One llama_decode of token i at positions[i] in sequence seqs[i], its logits kept
        where want[i] (at most n_batch tokens)."""
        b = self._batch
        b.n_tokens = len(tokens)
        for i, (tok, pos, seq, wanted) in enumerate(zip(tokens, positions, seqs, want)):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = wanted
        self._follow_free_cores()
        ret = self._lib.llama_decode(self._ctx, b)
        if ret != 0:
            raise BackendError(f"llama_decode failed (code {ret}) at position {positions[0]}")

    def remove_cells(self, seq: int, start: int) -> None:
        """Drop sequence `seq`'s cells from position `start` on."""
        if not self._lib.llama_memory_seq_rm(self._mem, seq, start, -1):
            raise BackendError(f"llama.cpp could not roll its cache back to {start} tokens")

    def _follow_free_cores(self) -> None:
        if self._gauge is None or self.threads_held:
            return
        n = self._gauge.check()
        if n != self._threads_now:
            self._lib.llama_set_n_threads(self._ctx, n, n)
            self._threads_now = n

    def _hold_threads(self) -> None:
        n = self.held_count or self.threads
        if self._threads_now != n:
            self._lib.llama_set_n_threads(self._ctx, n, n)
            self._threads_now = n

    @property
    def nominal_threads(self) -> int | None:
        return self.threads if self.device == "cpu" else None

    @property
    def threads_now(self) -> int:
        return self._threads_now

    def busy_note(self) -> str | None:
        """One line when other work took cores during the run and fewer threads were used."""
        return None if self._gauge is None else self._gauge.note("llama.cpp")

    @property
    def batch_size(self) -> int:
        return self._n_batch

    def logits_row(self, i: int) -> np.ndarray:
        ptr = self._lib.llama_get_logits_ith(self._ctx, i)
        return np.ctypeslib.as_array(ptr, shape=(self._n_vocab,))

    # ------------------------------------------------------------ trees

    def reserve_branches(self, n: int) -> None:
        """Room for `n` sequence ids besides the context's. Linear runs never call this and
        keep the single-sequence context; the first call rebuilds the context (and re-runs
        what the cache held)."""
        want = min(MAX_SEQ, n + 1)
        if want <= self._n_seq:
            return
        n_ctx, tokens = self.n_ctx, list(self._tokens)
        self._lib.llama_batch_free(self._batch)
        self._lib.llama_free(self._ctx)
        self._n_seq = want
        self._ctx = self._new_context(n_ctx)
        self._mem = self._lib.llama_get_memory(self._ctx)
        self._batch = self._lib.llama_batch_init(self._n_batch, 0, want)
        self._tokens = []
        if tokens:
            self._forward(tokens, 1)
        self._tokens = tokens

    def _forward_masked(
        self, tokens: list[int], depths: list[int], visible: list[list[int]]
    ) -> np.ndarray:
        if len(tokens) > self._n_batch:
            raise BackendError(f"a tree of {len(tokens)} nodes exceeds the batch of "
                               f"{self._n_batch}")
        query, members = seq_groups(depths, visible)
        self.reserve_branches(len(members))
        lib, b, n_past = self._lib, self._batch, self.n_past
        self._query = [SEQ + 1 + g for g in query]
        self._n_groups = len(members)
        for g in range(len(members)):  # every branch sees the context (shared cells)
            lib.llama_memory_seq_cp(self._mem, SEQ, SEQ + 1 + g, -1, -1)
        b.n_tokens = len(tokens)
        for i, tok in enumerate(tokens):
            # The first seq id decides what a token attends to; the others let the nodes
            # of those sequences attend to it.
            seqs = [self._query[i], *(SEQ + 1 + g for g, m in enumerate(members)
                                      if i in m and g != query[i])]
            b.token[i], b.pos[i], b.logits[i] = tok, n_past + depths[i], True
            b.n_seq_id[i] = len(seqs)
            for k, seq in enumerate(seqs):
                b.seq_id[i][k] = seq
        self._follow_free_cores()
        ret = lib.llama_decode(self._ctx, b)
        if ret != 0:
            self._drop_groups()
            raise BackendError(f"llama_decode failed (code {ret}) on a tree of {len(tokens)}")
        return np.stack([self.logits_row(i) for i in range(len(tokens))])

    def _keep_path(self, path: list[int]) -> None:
        n_past = self.n_past
        tokens, _, visible = self._nodes
        # Cells in batch order: a path of the batch's first nodes (a depth-first tree's
        # first-child chain) is kept where it lies. Any other path would leave holes that
        # later tokens fill out of position order, which changes how llama.cpp's kernels
        # round (logits off by up to ~0.7 on smollm2): it is run again instead, exactly.
        in_place = (bool(path) and path == list(range(len(path)))
                    and visible[path[-1]] | {path[-1]} == set(path))
        if in_place:
            self._lib.llama_memory_seq_cp(self._mem, self._query[path[-1]], SEQ, n_past,
                                          n_past + len(path))
        self._drop_groups()
        if path and not in_place:
            self._forward([tokens[i] for i in path], 1)
            self.rerun_tokens += len(path)

    def _drop_groups(self) -> None:
        for g in range(self._n_groups):
            self._lib.llama_memory_seq_rm(self._mem, SEQ + 1 + g, -1, -1)
        self._n_groups = 0

    def _truncate(self, n: int) -> None:
        self.remove_cells(SEQ, n)

    def close(self) -> None:
        lib = self._lib
        if getattr(self, "_batch", None) is not None:
            lib.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "_ctx", None):
            lib.llama_free(self._ctx)
            self._ctx = None
        self._release_weights()

    def _release_weights(self) -> None:
        if getattr(self, "_model", None):
            self._model = None
            self._weights.release()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass


def seq_groups(depths: list[int], visible: list[list[int]]) -> tuple[list[int], list[set[int]]]:
    """Sequence groups that reproduce a node mask with llama.cpp's rule: a token sees a cell
    when the cell holds the token's (first) sequence id and a position not after its own.

    Returns each node's group and each group's member nodes. Nodes join a group when every
    query node in it still sees exactly its own nodes (a tree needs one group per leaf).
    """
    sees = [set(v) | {i} for i, v in enumerate(visible)]
    query = [0] * len(depths)
    groups: list[tuple[list[int], set[int]]] = []  # (query nodes, member nodes)

    def fits(nodes: list[int], cells: set[int]) -> bool:
        return all(sees[a] == {j for j in cells if depths[j] <= depths[a]} for a in nodes)

    for i in reversed(range(len(depths))):  # later nodes see more: they found the groups
        for g, (nodes, cells) in enumerate(groups):
            if fits([*nodes, i], cells | sees[i]):
                nodes.append(i)
                cells |= sees[i]
                query[i] = g
                break
        else:
            query[i] = len(groups)
            groups.append(([i], set(sees[i])))
    return query, [cells for _, cells in groups]


def _pick_device(lib, device: str | None, n_gpu_layers: int | None) -> tuple[str, int]:
    """llama.cpp runs on the CPU unless it was built with a GPU backend and one is asked for."""
    return llama_offload(device, n_gpu_layers, bool(lib.llama_supports_gpu_offload()))


def device_for(device: str | None) -> str:
    """The device a llama.cpp model asked to run on `device` would run on (nothing loaded)."""
    return _pick_device(llama_lib(), device, None)[0]


def _load_model(lib, path: Path, gpu_layers: int) -> tuple[object, dict[str, float]]:
    """The loaded model and the MiB of weights llama.cpp put in each buffer type."""
    global _load_log
    check_gguf_magic(path)
    params = lib.llama_model_default_params()
    params.n_gpu_layers = gpu_layers
    with _load_lock:
        _choose_extra_buffers(lib, params)
        _load_log = []
        try:
            model = lib.llama_model_load_from_file(str(path).encode(), params)
        finally:
            lines, _load_log = _load_log, None
    if not model:
        raise BackendError(f"llama.cpp could not load {path}: {load_failure(lines)}")
    buffers: dict[str, float] = {}
    for match in _BUFFER_LINE.finditer("".join(lines)):
        buffers[match[1]] = buffers.get(match[1], 0.0) + float(match[2])
    return model, buffers


def check_gguf_magic(path: Path) -> None:
    """A file that is not a GGUF at all is named before llama.cpp reads it."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise BackendError(f"cannot read model file {path}: {exc.strerror}") from None
    if not magic:
        raise BackendError(f"model file {path} is empty")
    if magic != b"GGUF":
        raise BackendError(f"{path} is not a GGUF model file (it does not start with GGUF)")


def load_failure(lines: list[str]) -> str:
    """llama.cpp's own reason from a failed load's lines (its first error, the cause, without
    the names of the functions that passed it on)."""
    errors = [line[len(ERROR_MARK):].strip() for line in lines if line.startswith(ERROR_MARK)]
    reason = errors[0].rsplit(": ", 1)[-1] if errors else ""
    return reason or "not a valid GGUF model file"


def _choose_extra_buffers(lib, params) -> None:
    """Keep the weights off llama.cpp's AMX path unless allowed (see llama_buffers)."""
    allow = llama_buffers.amx_allowed()
    extra = llama_buffers.extra_buffers(lib)
    if extra is not None:
        extra.use(llama_buffers.allowed_buffers(extra.available, allow))
    elif llama_buffers.fallback_without_list(read_cpu().has_amx, system_info(), allow):
        if not any(name == "use_extra_bufts" for name, _ in type(params)._fields_):
            raise BackendError("this llama-cpp-python cannot keep llama.cpp off its AMX path "
                               "(it crashes on many machines): upgrade llama-cpp-python, or "
                               "set SPECVIZ_LLAMA_AMX=1 to try AMX")
        params.use_extra_bufts = False
