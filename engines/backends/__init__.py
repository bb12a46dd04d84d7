"""Model backends the speculative engine drives: llama.cpp and transformers/torch."""

from __future__ import annotations

from pathlib import Path

from .base import Backend

BACKENDS = ("llama", "transformers")


def load_backend(
    kind: str,
    model_path: str | Path,
    *,
    device: str | None = None,
    threads: int | None = None,
    n_ctx: int = 4096,
    probe: bool = True,
    dtype: str | None = None,
    compile: str | None = None,
) -> Backend:
    """Load `model_path` (a .gguf file, or a model folder for transformers) on `kind`.

    The first use of a backend on a machine is tried in a child process first (see
    backends.probe): a native crash there becomes a BackendCrashed error, not a dead process.
    """
    if kind in BACKENDS and probe and Path(model_path).exists():
        from .probe import ensure_works

        ensure_works(kind, model_path, device)
    if kind == "llama":
        from .llama import LlamaBackend

        if Path(model_path).is_dir():
            from ..errors import BackendError

            raise BackendError(
                f"{model_path} is a model folder; the llama backend needs a .gguf file "
                "(use --backend transformers)"
            )
        return LlamaBackend(model_path, n_ctx=n_ctx, threads=threads, device=device)
    if kind == "transformers":
        from .. import heap
        from .hf import TransformersBackend

        with heap.loading():  # about a million objects made: the collector waits (heap.py)
            return TransformersBackend(model_path, device=device, threads=threads, dtype=dtype,
                                       compile=compile)
    raise ValueError(f"unknown backend {kind!r}; choose one of {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "Backend", "load_backend"]
