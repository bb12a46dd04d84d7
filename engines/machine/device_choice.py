"""Which device, which dtype and how many layers offloaded: rules on a machine's facts.

The rules take the facts as arguments (`DeviceFacts`), so a CPU-only machine tests what a
CUDA card with or without bfloat16, or a Mac, would get; `DeviceFacts.read()` reads this
machine's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import BackendError

ALL_LAYERS = 999  # llama.cpp's "every layer" (it clamps to the model's count)


DTYPES = ("float32", "bfloat16", "float16")  # what --dtype takes (besides auto)


@dataclass(frozen=True)
class DeviceFacts:
    cuda: bool = False
    cuda_bf16: bool = False  # the card multiplies bfloat16 natively (compute capability 8+)
    mps: bool = False
    cpu_bf16: bool = False  # the processor multiplies bfloat16 natively (AVX-512 BF16, AMX)

    @classmethod
    def read(cls) -> DeviceFacts:
        import torch

        cuda = torch.cuda.is_available()
        mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
        return cls(cuda, cuda and torch.cuda.is_bf16_supported(), mps, cls.cpu().cpu_bf16)

    @classmethod
    def about(cls, device: str) -> DeviceFacts:
        """Enough facts to pick `device`'s dtype: the processor's alone for the CPU (no torch
        import in a process that only asks, like the window's)."""
        return cls.cpu() if device == "cpu" else cls.read()

    @classmethod
    def cpu(cls) -> DeviceFacts:
        """The processor's facts alone (no torch import: enough for a CPU's dtype)."""
        from .hardware import BF16_FLAGS, read_cpu

        return cls(cpu_bf16=any(flag in read_cpu().flags for flag in BF16_FLAGS))


def torch_devices(facts: DeviceFacts) -> list[str]:
    """The devices torch can run on here, the preferred first."""
    return [d for d, there in (("cuda", facts.cuda), ("mps", facts.mps), ("cpu", True))
            if there]


def torch_device(requested: str | None, facts: DeviceFacts) -> str:
    """`requested` if usable here (`cuda:1` included), else the best there is."""
    devices = torch_devices(facts)
    if requested in (None, "", "auto"):
        return devices[0]
    if requested.split(":")[0] not in devices:
        raise BackendError(
            f"device {requested!r} is not available here; available: {', '.join(devices)}")
    return requested


def torch_dtype(device: str, requested: str | None, facts: DeviceFacts,
                measured: str | None = None) -> str:
    """The dtype a model runs in: as asked; bfloat16 where the device multiplies it natively
    (a CUDA card of compute capability 8+: half the weights to read a token; float16's range
    overflows in some models' activations), float16 on older cards and MPS. On a CPU with
    AVX-512 BF16 or AMX, what racing the two measured here (`measured`: the backend's
    cpu_dtype.py; bfloat16 until then); float32 on other CPUs (their half-precision products
    are emulated, slower than float32)."""
    if requested not in (None, "", "auto"):
        if requested not in DTYPES:
            raise BackendError(f"unknown dtype {requested!r}; one of auto, {', '.join(DTYPES)}")
        return requested
    if device.startswith("cuda"):
        return "bfloat16" if facts.cuda_bf16 else "float16"
    if device == "mps":
        return "float16"
    return (measured or "bfloat16") if facts.cpu_bf16 else "float32"


def model_dtype(kind: str, device: str, asked: str | None, facts: DeviceFacts,
                measured: str | None = None) -> str | None:
    """What a `kind` backend's products compute in on `device`: None for llama.cpp (the
    file's own types); for transformers as asked (None or auto: SPECVIZ_DTYPE, else
    `torch_dtype`'s rule, with the CPU's `measured` choice)."""
    if kind != "transformers":
        return None
    if asked in (None, "", "auto"):
        asked = os.environ.get("SPECVIZ_DTYPE")
    return torch_dtype(device, asked, facts, measured)


def llama_offload(requested: str | None, n_gpu_layers: int | None,
                  gpu_build: bool) -> tuple[str, int]:
    """llama.cpp's device and layers offloaded: the GPU with every layer where this build has
    a GPU backend and none was refused (`n_gpu_layers` 0), else the CPU."""
    if requested in (None, "", "auto"):
        requested = "gpu" if gpu_build and n_gpu_layers != 0 else "cpu"
    if requested == "cpu":
        return "cpu", 0
    if not gpu_build:
        raise BackendError(f"device {requested!r} is not available to llama.cpp here (this "
                           "build has no GPU support); available: cpu")
    return requested, ALL_LAYERS if n_gpu_layers is None else n_gpu_layers
