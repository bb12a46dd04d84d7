"""gguf's reader, parsing over a plain array.

`gguf.GGUFReader` reads every field through `numpy.memmap` slices, and a memmap's slicing
and its `__array_finalize__` run in Python: a vocabulary of 49k strings and 48k merges
(smollm2-135m) took 8.5 s on a 2-core EPYC, and transformers parses a GGUF once for its
tokenizer, once for its config and once for its weights. `PlainReader` slices a plain
`ndarray` view of the same map instead (2.6 s there); its fields and tensors hold the same
bytes (tests/test_gguf_read.py), the tensors as ndarray views of the map rather than memmaps.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np

# The signature of the reader's one slicing method that PlainReader replaces: another gguf
# release that changes it keeps its own reader.
_GET = ["self", "offset", "dtype", "count", "override_order"]


def reader_class():
    """PlainReader where this gguf's reader slices as expected, else gguf's own."""
    from gguf import GGUFReader

    return _plain_for(getattr(GGUFReader, "_plain_base", GGUFReader))


@functools.cache
def _plain_for(base: type) -> type:
    return _plain_subclass(base) if _slices_as_expected(base) else base


def install() -> None:
    """gguf's reader replaced by PlainReader for every caller (transformers imports it from
    gguf at each load)."""
    import gguf

    gguf.GGUFReader = reader_class()


def _slices_as_expected(base: type) -> bool:
    get = getattr(base, "_get", None)
    try:
        return callable(get) and list(inspect.signature(get).parameters) == _GET
    except (TypeError, ValueError):
        return False


def _plain_subclass(base: type) -> type:
    def _get(self, offset, dtype, count=1, override_order=None):
        plain = self.__dict__.get("_plain")
        if plain is None:  # the map as a plain array, made once the base has set `data`
            plain = self._plain = self.data.view(np.ndarray)
        count = int(count)
        size = np.dtype(dtype).itemsize
        arr = plain[offset:offset + size * count].view(dtype=dtype)[:count]
        order = self.byte_order if override_order is None else override_order
        return arr.view(arr.dtype.newbyteorder(order))

    return type("PlainReader", (base,), {"_get": _get, "_plain_base": base,
                                         "__doc__": __doc__})
