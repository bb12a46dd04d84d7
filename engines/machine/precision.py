"""Lower precision on a CPU: int8 weights for drafting, bfloat16 products for training.

Drafting from a head reads all of its weights once per depth, and on a CPU that is bound by
memory bandwidth: smollm2-135m's EAGLE head holds 35 MB in float32, 24-28 ms a step at K = 4 on
2 cores, a third of a plain step; Medusa heads draft through the target's LM head, 113 MB in
float32 for smollm2's 49k-token vocabulary. Int8 weights (per output channel) with dynamic int8
activations, PyTorch's fbgemm/x86 or qnnpack kernels, take the EAGLE head to 7-8 ms. An EAGLE
head's fusion layer `fc` stays in float32: it reads the target's raw residual streams, whose
outlier channels an int8 activation scale cannot hold (quantizing it too cost up to 0.16
accepted tokens a step on the sample prompts; without it, at most 0.09). Lossless either way:
the target verifies what was drafted.

PyTorch's eager dynamic quantization (`torch.ao`) is deprecated in favour of torchao, which
specviz does not depend on; where a PyTorch release lacks it, the weights stay in float32.

Training heads is bound by matrix products instead (three quarters of an EAGLE step), and
where the processor multiplies bfloat16 natively PyTorch's autocast runs them in it, with the
weights, gradients' accumulation and optimiser in float32 (mixed precision, as on GPUs).
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from .hardware import BF16_FLAGS

ENGINES = ("x86", "fbgemm", "onednn", "qnnpack")  # PyTorch's quantized CPU kernels
PRECISIONS = ("auto", "bf16", "fp32")


def int8_engine(device: str, engines: Sequence[str]) -> str | None:
    """The quantized engine int8 weights draft with on `device`, or None (float32): the
    kernels are CPU only."""
    if device != "cpu":
        return None
    return next((e for e in ENGINES if e in engines), None)


def available_engines() -> list[str]:
    import torch

    return list(torch.backends.quantized.supported_engines)


def quantized(module: nn.Module, engine: str, keep: Collection[str] = ()) -> nn.Module | None:
    """A copy of `module` with its linear layers in int8, but those named in `keep` (None:
    not available). A bare linear layer becomes an int8 linear layer."""
    import torch

    try:
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError:
        return None
    if isinstance(module, nn.Linear):
        wrapped = quantized(nn.Sequential(module), engine)
        return None if wrapped is None else wrapped[0]
    names = {n for n, m in module.named_modules() if isinstance(m, nn.Linear) and n not in keep}
    torch.backends.quantized.engine = engine  # the kernels the quantized layers call
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecation notices of torch.ao, said above
        return quantize_dynamic(module, {n: per_channel_dynamic_qconfig for n in names})


class Int8Copy:
    """A module and its int8 copy, made the first time it is asked for: `pick` gives the one
    to draft with (the float32 module off a CPU, or where int8 is off or unavailable)."""

    def __init__(self, module: nn.Module, keep: Collection[str] = ()) -> None:
        self.float = module
        self._keep = keep
        self._int8: nn.Module | None = None
        self._tried = False

    def pick(self, on: bool, device: str) -> nn.Module:
        # PyTorch's dynamic int8 products take float32 activations: a bfloat16 or float16
        # module drafts as it is.
        floating = next(self.float.parameters()).dtype == torch.float32
        engine = int8_engine(device, available_engines()) if on and floating else None
        if engine and not self._tried:
            self._int8, self._tried = quantized(self.float, engine, self._keep), True
        return self._int8 if engine and self._int8 is not None else self.float


def training_precision(choice: str, cpu_flags: Collection[str]) -> str:
    """"bf16" or "fp32": what training heads on a CPU computes its products in. "auto" takes
    bfloat16 where the processor multiplies it natively (EAGLE training 1.64x faster on an
    AVX-512 BF16 core) and float32 elsewhere; the weights and optimiser stay float32."""
    if choice not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {choice!r}")
    if choice != "auto":
        return choice
    return "bf16" if any(flag in cpu_flags for flag in BF16_FLAGS) else "fp32"


def precision_here(choice: str) -> str:
    """`training_precision` on this machine's processor."""
    from .hardware import read_cpu

    return training_precision(choice, read_cpu().flags)


@contextmanager
def autocast(precision: str) -> Iterator[None]:
    """Mixed precision for a training step's forward pass on the CPU ("fp32": none)."""
    import torch

    with warnings.catch_warnings(), torch.autocast("cpu", dtype=torch.bfloat16,
                                                    enabled=precision == "bf16"):
        # bfloat16 rows into a float32 norm take the unfused kernel, which is as exact.
        warnings.filterwarnings("ignore", message="Mismatch dtype between input and weight")
        yield
