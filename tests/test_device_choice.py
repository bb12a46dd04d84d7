"""Device, dtype and layer offload on a machine's facts: a CUDA card with and without
bfloat16, a Mac, a machine with neither, tested here on whatever this machine is."""

from __future__ import annotations

import pytest

from specviz.engines.errors import BackendError
from specviz.engines.machine.device_choice import (
    ALL_LAYERS,
    DeviceFacts,
    llama_offload,
    model_dtype,
    torch_device,
    torch_devices,
    torch_dtype,
)

AMPERE = DeviceFacts(cuda=True, cuda_bf16=True)  # A100, H100, RTX 30xx and later
TURING = DeviceFacts(cuda=True, cuda_bf16=False)  # T4, RTX 20xx: no native bfloat16
MAC = DeviceFacts(mps=True)
BARE = DeviceFacts()
BF16_CPU = DeviceFacts(cpu_bf16=True)  # AVX-512 BF16 or AMX: bfloat16 products in hardware


@pytest.mark.parametrize(("facts", "auto", "dtype", "cpu_dtype"), [
    (AMPERE, "cuda", "bfloat16", "float32"),
    (TURING, "cuda", "float16", "float32"),
    (MAC, "mps", "float16", "float32"),
    (BARE, "cpu", "float32", "float32"),
    (BF16_CPU, "cpu", "bfloat16", "bfloat16"),
    (DeviceFacts(cuda=True, cuda_bf16=True, cpu_bf16=True), "cuda", "bfloat16", "bfloat16"),
])
def test_auto_picks_the_best_device_and_its_dtype(facts, auto, dtype, cpu_dtype):
    assert torch_device(None, facts) == torch_device("auto", facts) == auto
    assert torch_dtype(auto, None, facts) == torch_dtype(auto, "auto", facts) == dtype
    assert torch_dtype("cpu", None, facts) == cpu_dtype  # native bfloat16, else float32
    assert torch_dtype(auto, "float32", facts) == "float32"  # --dtype wins
    with pytest.raises(BackendError, match="unknown dtype 'int3'; one of auto, float32"):
        torch_dtype(auto, "int3", facts)


def test_a_device_that_is_not_here_is_one_line_naming_those_that_are():
    assert torch_device("cuda:1", AMPERE) == "cuda:1"
    assert torch_device("cpu", AMPERE) == "cpu"
    with pytest.raises(BackendError, match="'cuda' is not available here; available: mps, cpu"):
        torch_device("cuda", MAC)
    with pytest.raises(BackendError, match=r"available: cpu$"):
        torch_device("mps", BARE)
    assert torch_devices(DeviceFacts(cuda=True, mps=True)) == ["cuda", "mps", "cpu"]


@pytest.mark.parametrize(("requested", "layers", "gpu_build", "expected"), [
    (None, None, True, ("gpu", ALL_LAYERS)),  # a CUDA/Metal build: every layer offloaded
    ("auto", 12, True, ("gpu", 12)),  # a partial offload as asked
    (None, 0, True, ("cpu", 0)),  # offload refused: the CPU
    ("cpu", None, True, ("cpu", 0)),
    (None, None, False, ("cpu", 0)),  # a CPU build
])
def test_llama_offloads_every_layer_where_its_build_can(requested, layers, gpu_build, expected):
    assert llama_offload(requested, layers, gpu_build) == expected


@pytest.mark.parametrize(("kind", "device", "facts", "expected"), [
    ("transformers", "cuda", AMPERE, "bfloat16"),
    ("transformers", "cuda:0", TURING, "float16"),
    ("transformers", "mps", MAC, "float16"),
    ("transformers", "cpu", BARE, "float32"),
    ("llama", "cuda", AMPERE, None),  # llama.cpp computes in the GGUF's own types
])
def test_a_backends_dtype_on_each_device(kind, device, facts, expected, monkeypatch):
    monkeypatch.delenv("SPECVIZ_DTYPE", raising=False)
    assert model_dtype(kind, device, None, facts) == model_dtype(kind, device, "auto",
                                                                 facts) == expected
    monkeypatch.setenv("SPECVIZ_DTYPE", "float32")  # the environment's choice beats auto
    assert model_dtype(kind, device, None, facts) == (expected and "float32")
    assert model_dtype(kind, device, "float16", facts) == (expected and "float16")  # asked


def test_llama_takes_the_device_by_its_torch_name():
    """`--device cuda` reaches llama.cpp as is: every layer on a GPU build."""
    assert llama_offload("cuda", None, gpu_build=True) == ("cuda", ALL_LAYERS)
    with pytest.raises(BackendError, match=r"'cuda' is not available to llama\.cpp here"):
        llama_offload("cuda", None, gpu_build=False)


def test_llama_asked_for_a_gpu_its_build_lacks_says_so():
    with pytest.raises(BackendError, match="this build has no GPU support"):
        llama_offload("gpu", None, gpu_build=False)


def test_this_machines_facts_are_read_and_used():
    facts = DeviceFacts.read()
    assert torch_device(None, facts) in torch_devices(facts)
    assert not facts.cuda_bf16 or facts.cuda
    from specviz.engines.machine.hardware import read_cpu

    assert facts.cpu_bf16 == bool({"avx512_bf16", "amx_bf16"} & read_cpu().flags)


def test_a_cpus_facts_are_read_without_importing_torch():
    """As DeviceFacts.cpu says: a process that only asks (the window, `specviz shot`,
    `specviz export`) does not pay for torch's import (1.2-1.4 s each, when its flags came
    from precision.py)."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from specviz.engines.machine.device_choice import DeviceFacts\n"
            "DeviceFacts.cpu()\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
