"""The head's weights when drafting on a CPU: int8 where PyTorch's quantized kernels run.

Drafting a tree reads all of the head's weights once per depth, and on a CPU that is bound by
memory bandwidth: smollm2-135m's head holds 35 MB in float32, 24-28 ms a step at K = 4 on 2
cores, a third of a plain step. Int8 weights (per output channel) with dynamic int8 activations,
PyTorch's fbgemm/x86 or qnnpack kernels, take it to 7-8 ms. The fusion
layer `fc` stays in float32: it reads the target's raw residual streams, whose outlier channels
an int8 activation scale cannot hold (quantizing it too cost up to 0.16 accepted tokens a step
on the sample prompts; without it, at most 0.09). Lossless either way: the target verifies.

PyTorch's eager dynamic quantization (`torch.ao`) is deprecated in favour of torchao, which
specviz does not depend on; where a PyTorch release lacks it, the head stays in float32.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from torch import nn

ENGINES = ("x86", "fbgemm", "onednn", "qnnpack")  # PyTorch's quantized CPU kernels


def int8_engine(device: str, engines: Sequence[str]) -> str | None:
    """The quantized engine an int8 head drafts with on `device`, or None (float32): the
    kernels are CPU only."""
    if device != "cpu":
        return None
    return next((e for e in ENGINES if e in engines), None)


def available_engines() -> list[str]:
    import torch

    return list(torch.backends.quantized.supported_engines)


def quantized(head: nn.Module, engine: str) -> nn.Module | None:
    """A copy of `head` with every linear layer but `fc` in int8 (None: not available)."""
    import torch

    try:
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError:
        return None
    names = {n for n, m in head.named_modules() if isinstance(m, nn.Linear) and n != "fc"}
    torch.backends.quantized.engine = engine  # the kernels the quantized layers call
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecation notices of torch.ao, said above
        return quantize_dynamic(head, {n: per_channel_dynamic_qconfig for n in names})
