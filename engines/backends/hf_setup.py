"""What a transformers backend settles around its load, before its first forward: the device,
the dtype (raced on a CPU that multiplies bfloat16: cpu_dtype.py), which few-row products go
the faster way on a CPU (small_rows.py), and whether its steps run compiled
(compile_choice.py, hf_compiled.py)."""

from __future__ import annotations

from pathlib import Path

from ..machine.device_choice import DeviceFacts, model_dtype, torch_device, torch_devices
from ..models import home_dir
from . import compile_choice, cpu_dtype, hf_compiled, small_rows
from .hf_load import cast_weights, first_line

RACE = "race"  # bfloat16 against float32, measured at load (cpu_dtype.py)


def available_devices() -> list[str]:
    return torch_devices(DeviceFacts.read())


def pick_device(requested: str | None) -> str:
    """`requested` if usable, else the best available (cuda, then mps, then cpu)."""
    return torch_device(requested, DeviceFacts.read())


def pick_dtype(device: str, dtype: str | None, model_path: str | Path, threads: int | None):
    """The torch dtype to load in, or RACE where the CPU's choice is to be measured."""
    import torch

    facts = DeviceFacts.read()
    racing = cpu_dtype.racing(device, dtype, facts.cpu_bf16)
    measured = cpu_dtype.remembered(cpu_dtype.store_path(), model_path, threads) \
        if racing else None  # a GPU, or a dtype asked: nothing raced to read
    if racing and measured is None:
        return RACE
    return getattr(torch, model_dtype("transformers", device, dtype, facts, measured))


def race_dtype(model, model_path: str, threads: int | None):
    """bfloat16 against float32 on this CPU, for this model's shape (cpu_dtype.py), once; the
    model, loaded in float32, converted where bfloat16 won. (The torch dtype it now computes
    in, the race's figures or None where the race could not run.)"""
    import torch

    rows = small_rows.plan(model, torch.get_num_threads(), _small_rows_store())
    trial = None
    try:
        trial = cpu_dtype.measure(model.config, rows, _one_layers_params(model))
    except Exception:  # a shape transformers cannot build from its config (remote code,
        # say) is no reason to fail the load: the flags' rule then, not remembered
        won = "bfloat16"
    else:
        won = trial["dtype"]
        if trial["steady"]:
            cpu_dtype.remember(cpu_dtype.store_path(), model_path, threads, trial)
    if won != "bfloat16":
        return torch.float32, trial
    cast_weights(model, torch.bfloat16)
    return torch.bfloat16, trial


def route_small_rows(model, device: str) -> frozenset[int]:
    """On a CPU, the row counts whose products go the faster way here (small_rows.py)."""
    if device != "cpu":
        return frozenset()
    import torch

    rows = small_rows.plan(model, torch.get_num_threads(), _small_rows_store())
    small_rows.route(model, rows)
    return rows


def choose_compile(backend, asked: str | None) -> str:
    """"on" where the backend's steps run compiled, its compiled steps and static cache then
    set; "off" where they run eagerly (compile_choice.py)."""
    choice, why = compile_choice.decide(backend, asked)
    if choice == "off":
        if why:
            hf_compiled.say(f"{why}: decoding eagerly")
        return "off"
    backend._steps = hf_compiled.CompiledSteps(backend.model,
                                               compiling=backend.cpu_threads.nominal_count)
    backend._kv = backend._static_kv()
    try:
        hf_compiled.warm(backend._steps, backend._static_kv(), hf_compiled.WARM_WIDTHS)
    except Exception as exc:  # inductor's failures have no common type across releases
        backend._steps = backend._kv = None
        hf_compiled.say(f"torch.compile failed here ({first_line(exc)}): decoding eagerly")
        return "off"
    if choice == compile_choice.RACE:
        backend.compile_trial = compile_choice.race(backend)
        if backend.compile_trial["choice"] == "off":
            backend._steps = backend._kv = None
            return "off"
    return "on"


def _one_layers_params(model) -> int | None:
    """Parameters of the model's first decoder layer (None: no `layers` list found)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    return sum(p.numel() for p in layers[0].parameters()) if layers else None


def _small_rows_store() -> Path:
    return home_dir("cache") / "profiles" / "small-rows.json"
