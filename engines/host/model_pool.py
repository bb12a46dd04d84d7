"""Loaded models kept between runs and shared between lanes (no Qt).

Every lane needs a backend of its own, because a backend's cache holds one lane's context.
The weights need not be copied, though: lanes that run the same model on the same device get
backends made with `Backend.share()`, one copy of the weights between them. After a run the
backends go back to the pool, caches and all, and the next run with the same settings takes
them again instead of loading the models anew. Models the next run does not use are freed.

Called from the loading thread (acquire) and the engine threads (release), hence the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .. import heap
from ..backends import load_backend
from ..backends.base import Backend


@dataclass(frozen=True)
class ModelKey:
    """What a loaded backend depends on: two lanes with equal keys can share weights."""

    backend: str
    path: str
    device: str | None
    threads: int | None
    n_ctx: int = 4096
    dtype: str | None = None  # transformers: as asked, None: the device's rule
    compile: str | None = None  # transformers: on, off, auto as asked; None: SPECVIZ_COMPILE


class ModelPool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[ModelKey, list[Backend]] = {}  # ready for the next lane
        self._busy: dict[int, tuple[ModelKey, Backend]] = {}  # id(backend) -> lent out
        self.loads = 0  # models loaded from disk (not shared, not reused): for tests
        self._closed = False

    def acquire(self, backend: str, path: Path, device: str | None, threads: int | None,
                n_ctx: int = 4096, dtype: str | None = None,
                compile: str | None = None, loaded_only: bool = False) -> Backend | None:
        """A backend of its own for one lane: an idle one, one sharing loaded weights, or a
        freshly loaded model (slow: call it off the GUI thread); None where `loaded_only`
        and the model is not loaded."""
        hf = backend == "transformers"
        key = ModelKey(backend, str(path), device, threads, n_ctx, dtype if hf else None,
                       compile if hf else None)
        with self._lock:
            idle = self._idle.get(key)
            ready = idle.pop() if idle else None
            source = None if ready else self._any_loaded(key)
        if ready is None and source is not None:
            ready = source.share()
        if ready is None and loaded_only:
            return None
        if ready is None:
            ready = load_backend(backend, path, device=device, threads=threads, n_ctx=n_ctx,
                                 dtype=dtype, compile=compile)
            with self._lock:
                self.loads += 1
        with self._lock:
            self._busy[id(ready)] = (key, ready)
        return ready

    def release(self, backend: Backend, reusable: bool = True) -> None:
        """A lane is done with `backend`. One whose lane failed is closed: its cache may not
        hold what it says (a decode that failed half-way)."""
        with self._lock:
            key, _ = self._busy.pop(id(backend), (None, None))
            if key is not None and reusable and not self._closed:
                self._idle.setdefault(key, []).append(backend)
                return
        backend.close()
        heap.thaw()

    def keep_only(self, keys: Iterable[ModelKey]) -> None:
        """Free the idle backends of every model not in `keys` (the settings changed)."""
        wanted = set(keys)
        with self._lock:
            dropped = [b for k, group in self._idle.items() if k not in wanted for b in group]
            self._idle = {k: group for k, group in self._idle.items() if k in wanted}
        for backend in dropped:
            backend.close()
        if dropped:
            heap.thaw()

    def close(self) -> None:
        """Free every idle backend; lent ones are closed when they come back."""
        with self._lock:
            self._closed = True
        self.keep_only(())

    @property
    def idle_count(self) -> int:
        with self._lock:
            return sum(len(group) for group in self._idle.values())

    def _any_loaded(self, key: ModelKey) -> Backend | None:
        for k, backend in self._busy.values():
            if k == key:
                return backend
        return None
