"""Which of llama.cpp's CPU "extra buffer types" the weights may be put in.

At load llama.cpp moves each weight into the first buffer type on its list whose kernels
support it: the extra types first (AMX on Intel CPUs that have it, when the build was compiled
for them; CPU_REPACK, weights interleaved for AVX2/AVX-512/NEON kernels), plain CPU last.
The AMX path crashes in the first decode on common cloud machines (llama.cpp#20824,
ollama#17205 and #17249), so specviz leaves AMX off the list unless SPECVIZ_LLAMA_AMX=1.
Turning extra types off altogether (`use_extra_bufts = False`) would avoid it too, but drops
the repacking that AMX would have replaced: on a Sapphire Rapids VM that cost 16% of plain
decoding and 29% of an 8-token verification.

How: llama.cpp reads the CPU device's extra types, at every model load, from the
NULL-terminated array that `ggml_backend_dev_get_extra_bufts` returns (a static copy of the
list its kernels use). We rewrite that array in place with the allowed entries, in their
order, before each load. It only ever shrinks, so it stays inside the array; the list the
kernels dispatch on is a separate vector and untouched, and a weight that is not in an AMX
buffer never takes the AMX path.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

AMX = "AMX"
ENV_AMX = "SPECVIZ_LLAMA_AMX"
GGML_BACKEND_DEVICE_TYPE_CPU = 0

log = logging.getLogger("specviz.llama")


def amx_allowed(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(ENV_AMX, "").strip().lower() in ("1", "on", "yes", "true")


def allowed_buffers(available: Sequence[str], allow_amx: bool) -> list[str]:
    """The extra buffer types weights may go into, in llama.cpp's order of preference."""
    return [name for name in available if allow_amx or name != AMX]


def fallback_without_list(cpu_has_amx: bool, system_info: str, allow_amx: bool) -> bool:
    """Where the array cannot be reached (a build without ggml's registry symbols): whether
    to turn extra buffer types off altogether, which is safe but slower, rather than risk
    the AMX path."""
    return not allow_amx and cpu_has_amx and "AMX_INT8 = 1" in system_info


class ExtraBuffers:
    """The CPU device's array of extra buffer types, as llama.cpp's loader reads it."""

    def __init__(self, lib_dir: Path) -> None:
        ggml = _open_ggml(lib_dir)
        dev = ggml.ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU)
        if not dev:
            raise OSError("ggml has no CPU device")
        reg = ggml.ggml_backend_dev_backend_reg(dev)
        proc = ggml.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts")
        if not proc:
            raise OSError("this ggml has no ggml_backend_dev_get_extra_bufts")
        getter = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(proc)
        self._array = getter(dev)
        self._entries: list[tuple[str, int]] = []  # (name, buffer type), as first found
        i = 0
        while self._array and self._array[i]:
            name = ggml.ggml_backend_buft_name(self._array[i]).decode("utf-8", "replace")
            self._entries.append((name, self._array[i]))
            i += 1

    @property
    def available(self) -> list[str]:
        return [name for name, _ in self._entries]

    def use(self, names: Sequence[str]) -> None:
        """Offer the loader only `names` (a subset of `available`) from the next load on."""
        kept = [buft for name, buft in self._entries if name in names]
        for i, buft in enumerate(kept):
            self._array[i] = buft
        for i in range(len(kept), len(self._entries)):
            self._array[i] = None


def _open_ggml(lib_dir: Path) -> ctypes.CDLL:
    """libggml beside the libllama that llama-cpp-python loaded (the same, already mapped)."""
    names = ("libggml.so", "libggml.dylib", "ggml.dll")
    path = next((lib_dir / n for n in names if (lib_dir / n).exists()), None)
    if path is None:
        raise OSError(f"no libggml in {lib_dir}")
    ggml = ctypes.CDLL(str(path))
    for fn, args in (("ggml_backend_dev_by_type", [ctypes.c_int]),
                     ("ggml_backend_dev_backend_reg", [ctypes.c_void_p]),
                     ("ggml_backend_reg_get_proc_address", [ctypes.c_void_p, ctypes.c_char_p])):
        getattr(ggml, fn).argtypes = args
        getattr(ggml, fn).restype = ctypes.c_void_p
    ggml.ggml_backend_buft_name.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_buft_name.restype = ctypes.c_char_p
    return ggml


_lock = threading.Lock()
_extra: ExtraBuffers | bool | None = False  # False: not looked for yet; None: unreachable


def extra_buffers(llama_cpp) -> ExtraBuffers | None:
    """The array for the llama.cpp that `llama_cpp` loaded, or None where it is unreachable."""
    global _extra
    with _lock:
        if _extra is False:
            try:
                _extra = ExtraBuffers(_lib_dir(llama_cpp))
            except (OSError, AttributeError) as exc:
                log.warning("llama.cpp's extra buffer types cannot be chosen here (%s)", exc)
                _extra = None
        return _extra


def _lib_dir(llama_cpp) -> Path:
    lib = getattr(getattr(llama_cpp, "llama_cpp", llama_cpp), "_lib", None)
    name = getattr(lib, "_name", None)
    if not name:
        raise OSError("cannot tell where libllama was loaded from")
    return Path(name).parent
