"""gguf's reader, parsing over a plain array.

`gguf.GGUFReader` reads every field through `numpy.memmap` slices, and a memmap's slicing
and its `__array_finalize__` run in Python: a vocabulary of 49k strings and 48k merges
(smollm2-135m) took 8.5 s on a 2-core EPYC, and transformers parses a GGUF once for its
tokenizer, once for its config and once for its weights. `PlainReader` slices a plain
`ndarray` view of the same map instead (2.6 s there); its fields and tensors hold the same
bytes (tests/test_gguf_read.py), the tensors as ndarray views of the map rather than memmaps.
Inside `shared()` a file is parsed once, however often it is opened for reading: a model's
first load then parses it once instead of three times.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

# The signatures of the reader's slicing method, which PlainReader replaces, and of its
# constructor, which it wraps: another gguf release that changes them keeps its own reader.
_GET = ["self", "offset", "dtype", "count", "override_order"]
_INIT = ["self", "path", "mode"]

_lock = threading.Lock()
_sharing = 0  # `shared()` blocks under way, on any thread
_read: dict[tuple, object] = {}  # (path, size, mtime) -> its reader, while sharing


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


@contextmanager
def shared() -> Iterator[None]:
    """Around a load: each GGUF read (mode "r") is parsed once, its reader handed to every
    later opener of the same file (the same path, size and modification time); the readers
    are let go when the last such block ends."""
    global _sharing
    with _lock:
        _sharing += 1
    try:
        yield
    finally:
        with _lock:
            _sharing -= 1
            if not _sharing:
                _read.clear()


def _file_key(path, mode) -> tuple | None:
    if mode != "r" or not _sharing:
        return None
    try:
        stat = os.stat(path)
        return (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
    except (OSError, TypeError, ValueError):
        return None


def _slices_as_expected(base: type) -> bool:
    try:
        return all(list(inspect.signature(getattr(base, name)).parameters) == names
                   for name, names in (("_get", _GET), ("__init__", _INIT)))
    except (AttributeError, TypeError, ValueError):
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

    def __new__(cls, path, mode="r"):
        key = _file_key(path, mode)
        with _lock:
            kept = _read.get(key) if key else None
        return kept if kept is not None else base.__new__(cls)

    def __init__(self, path, mode="r"):
        if "data" in self.__dict__:
            return  # a shared reader, parsed already
        try:
            base.__init__(self, path, mode)
        except IndexError as exc:  # a length past the file's end: said as gguf says the rest
            raise ValueError(f"a field runs past the end of the file ({exc})") from None
        key = _file_key(path, mode)
        if key:
            with _lock:
                _read.setdefault(key, self)

    return type("PlainReader", (base,), {"_get": _get, "__new__": __new__,
                                         "__init__": __init__, "_plain_base": base,
                                         "__doc__": __doc__})
