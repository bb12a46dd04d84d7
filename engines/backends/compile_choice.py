"""Whether the transformers backend's steps run compiled: asked, or raced once and remembered.

`--compile on` compiles (hf_compiled.py), `off` decodes eagerly as before, `auto` times a
plain step both ways on the loaded model itself (the compiled one from a static cache, the
eager one from a dynamic cache, as each path decodes) and keeps the compiled steps only where a
token costs at most MARGIN of the eager one's. On a CPU a later start also pays for reading its
compiled step from the cache (dynamo traces the model again in every process: seconds), so
there the tokens of a run's expected length must save more than that read; the first start,
which compiled, does not know what a read costs and races again at the next. The race is
remembered per processor, torch release, thread count, device, dtype and model file, so it
runs once; a race whose rounds disagree (the machine was busy) is used for that load but not
remembered.

Where the compiled path cannot run (no C++ compiler on a CPU, an architecture it is not
written for), `on` and `auto` decode eagerly, saying why in one line.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import time
from pathlib import Path

from ..machine.json_file import read_dict, update_dict
from . import hf_compiled

RACE = "race"
MARGIN = 0.9  # compiled where its token costs at most this share of the eager one's
CONTEXT = 64  # tokens cached before the timed steps
STEPS = 12  # timed one-token steps a path and round (their median counts)
ROUNDS = 3  # the paths alternate; the median round counts
ROUND_SPREAD = 1.5  # slowest round over the fastest, either path: busy, not remembered
STORE_NAME = "compile-choice.json"
EXPECTED_TOKENS = 128  # a run's length where the start must pay (`specviz run`'s default)


def asked_choice(asked: str | None, device: str = "cpu") -> str:
    """on, off or auto: as asked, else SPECVIZ_COMPILE, else the device's default: auto on
    CUDA (an H200 decoded smollm2 6.4x faster compiled: docs/results/gpu.md), off on a CPU
    and elsewhere until auto is proven there."""
    if asked in (None, ""):
        asked = os.environ.get(hf_compiled.ENV) or ("auto" if device.startswith("cuda")
                                                     else "off")
    asked = asked.lower()
    if asked not in hf_compiled.CHOICES:
        from ..errors import SpecvizError

        raise SpecvizError(f"compile takes {', '.join(hf_compiled.CHOICES)}, not {asked!r}")
    return asked


def decide(backend, asked: str | None) -> tuple[str, str | None]:
    """("on" | "off" | RACE, why the compiled path cannot run, where asked and it cannot)."""
    choice = asked_choice(asked, backend.device)
    if choice == "off":
        return "off", None
    why = hf_compiled.unsupported(backend.model, cpu=backend.device == "cpu")
    if why:
        return "off", why
    if choice == "on":
        return "on", None
    known = remembered(store_path(), backend.model_path, backend._threads, backend.device,
                       backend.dtype)
    return (known, None) if known in ("on", "off") else (RACE, None)


def race(backend) -> dict:
    """Time a plain step eagerly and compiled on `backend`'s model, alternating; the choice,
    remembered where the rounds agree."""
    import torch

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, backend.n_vocab, (CONTEXT + STEPS + 1,), generator=gen).tolist()
    eager, compiled = [], []
    for _ in range(ROUNDS):
        eager.append(_eager_ms(backend, ids))
        compiled.append(_compiled_ms(backend, ids))
    eager_ms, compiled_ms = statistics.median(eager), statistics.median(compiled)
    steady = max(max(r) / max(min(r), 1e-9) for r in (eager, compiled)) <= ROUND_SPREAD
    start_s = _start_seconds(backend)
    result = {"choice": "on" if pays(eager_ms, compiled_ms, start_s) else "off",
              "eager_ms": round(eager_ms, 3), "compiled_ms": round(compiled_ms, 3),
              "start_s": start_s, "steady": steady,
              "remembered": steady and (start_s is not None or backend.device != "cpu")}
    if result["remembered"]:
        remember(store_path(), backend.model_path, backend._threads, backend.device,
                 backend.dtype, result)
    return result


def pays(eager_ms: float, compiled_ms: float, start_s: float | None) -> bool:
    """Whether compiled steps pay: per token, and where a later start's read of the cache
    is known (`start_s`), over EXPECTED_TOKENS tokens with that read counted."""
    if compiled_ms > MARGIN * eager_ms:
        return False
    return start_s is None or (eager_ms - compiled_ms) * EXPECTED_TOKENS / 1000.0 >= start_s


def _start_seconds(backend) -> float | None:
    """What a start pays for its compiled plain step on a CPU: this start's read of the cache
    (None: elsewhere, where CUDA graphs gain far more, or where this start compiled)."""
    steps = backend._steps
    if backend.device != "cpu" or not steps or not steps.read_from_cache.get(1):
        return None
    return steps.compile_seconds.get(1)


def _kept(trial: dict) -> str:
    if trial.get("remembered", trial.get("steady", True)):
        return "raced once, remembered"
    if not trial.get("steady", True):
        return "the machine was busy during the race: not remembered, raced again next time"
    return "raced again at the next start, which reads the compiled step from the cache"


def trial_line(trial: dict) -> str:
    kept = _kept(trial)
    way = "compiled" if trial["choice"] == "on" else "eager"
    start = trial.get("start_s")
    read = (f", a start reading the compiled step {start:.1f} s against "
            f"{EXPECTED_TOKENS} tokens" if start is not None else "")
    return (f"{way} transformers steps on this machine: a token measured at "
            f"{trial['eager_ms']:.1f} ms eagerly and {trial['compiled_ms']:.1f} ms compiled"
            f"{read} ({kept}; --compile overrides)")


def _eager_ms(backend, ids: list[int]) -> float:
    import torch
    from transformers import DynamicCache

    from .hf_cache import cache_keyword

    model, cache = backend.model, DynamicCache()
    kw = {cache_keyword(model): cache}
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids[:CONTEXT]], device=backend.device), use_cache=True,
              logits_to_keep=1, **kw)
        times = []
        for i in range(CONTEXT, CONTEXT + STEPS + 1):
            started = time.perf_counter()
            model(input_ids=torch.tensor([ids[i:i + 1]], device=backend.device), use_cache=True,
                  logits_to_keep=1, **kw)
            backend.synchronize()  # a GPU's queued work counts, not just its launches
            times.append(time.perf_counter() - started)
    return 1000.0 * statistics.median(times[1:])


def _compiled_ms(backend, ids: list[int]) -> float:
    import torch

    kv, head = backend._static_kv(), backend.model.get_output_embeddings()
    times = []
    with torch.inference_mode():
        hf_compiled.run_rows(backend._steps, kv, ids[:CONTEXT], 0, eager=True)
        for i in range(CONTEXT, CONTEXT + STEPS + 1):
            started = time.perf_counter()
            head(hf_compiled.run_rows(backend._steps, kv, ids[i:i + 1], i))
            backend.synchronize()
            times.append(time.perf_counter() - started)
    return 1000.0 * statistics.median(times[1:])


def store_path() -> Path:
    from ..models import home_dir

    return home_dir("cache") / "profiles" / STORE_NAME


def key(cpu: str, torch_version: str, threads: int | None, device: str, dtype: str,
        model_path: str | Path) -> str:
    text = (f"{cpu}|torch {torch_version}|t{threads or 'auto'}|{device}|{dtype}|"
            f"{Path(model_path).resolve()}")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def remembered(store: Path, model_path, threads, device: str, dtype: str) -> str | None:
    """The choice raced earlier for this model here ("on" or "off"), or None."""
    entry = read_dict(store).get(key(*_machine(), threads, device, dtype, model_path), {})
    return entry.get("choice") if isinstance(entry, dict) else None


def remember(store: Path, model_path, threads, device: str, dtype: str, result: dict) -> None:
    cpu, torch_version = _machine()
    entry = {**result, "model": Path(model_path).name, "threads": threads, "device": device,
             "dtype": dtype, "cpu": cpu, "torch": torch_version, "at": round(time.time(), 1)}
    try:
        name = key(cpu, torch_version, threads, device, dtype, model_path)
        update_dict(store, lambda known: {**known, name: entry})
    except OSError:
        pass  # raced again next time


def _machine() -> tuple[str, str]:
    from .cpu_dtype import _machine as machine

    return machine()
