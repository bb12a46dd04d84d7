"""Whether bfloat16 pays on this CPU for this model: measured once, then remembered.

A processor with AVX-512 BF16 or AMX multiplies bfloat16 natively, and a token then reads half
the bytes; but a one-token step on 2 cores is not all products. On one AVX-512 BF16 EPYC
bfloat16 made smollm2-135m 1.13x and Qwen2.5-Coder-0.5B 1.37x faster; on another with the
same flags smollm2 ran at 0.85-0.93x in bfloat16 and the 0.5B at 1.06x (its one-row
products took as long as float32's routed ones, and the layers' upcasts to float32 came on
top). The flags cannot tell these apart, so where they allow bfloat16 the two dtypes race on
a random-weight copy of the model's shape (a product's time does not depend on the weights),
run one and five layers deep to price a layer and the rest (embeddings, LM head) apart, each
a one-token step at a short context as decoding takes them. bfloat16 is kept only where a
token costs at most MARGIN of float32's: its batched and one-token passes also round further
apart (near-ties flip more), which a few percent do not pay for.

The choice is remembered per processor, torch release, thread count and model file, so the
window can name the dtype (and find its cost profile) without loading torch.
"""

from __future__ import annotations

import copy
import hashlib
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from ..machine.json_file import read_dict, update_dict

MARGIN = 0.9  # bfloat16 where a token costs at most this share of float32's
DEPTHS = (1, 5)  # layers of the two copies raced
LAYER_PARAMS = 250_000_000  # at most this many layers' weights in the copy (1 GB in float32)
CONTEXT = 64  # tokens cached before the timed steps
STEPS = 16  # timed one-token steps a copy and round (their median counts)
ROUNDS = 3  # the dtypes alternate; the median round counts (others were disturbed)
STORE_NAME = "cpu-dtype.json"
# A race whose dtypes differ by more than halving or doubling the bytes read could explain, or
# whose rounds disagree this much, ran beside other work (a compile, say): its choice is used
# for this load but not remembered, and the next load races again.
RATIO = (0.4, 2.5)  # bfloat16's cost over float32's
ROUND_SPREAD = 1.5  # slowest round's estimate over the fastest's, either dtype


def pick(f32_ms: float, bf16_ms: float, margin: float = MARGIN) -> str:
    """The dtype for a token costing `f32_ms` in float32 and `bf16_ms` in bfloat16."""
    return "bfloat16" if bf16_ms <= margin * f32_ms else "float32"


def steady(f32_rounds: list[float], bf16_rounds: list[float]) -> bool:
    """Whether a race's rounds (a token's milliseconds, each round's estimate) can be trusted
    enough to remember its choice."""
    ratio = min(bf16_rounds) / max(min(f32_rounds), 1e-9)
    spread = max(max(r) / max(min(r), 1e-9) for r in (f32_rounds, bf16_rounds))
    return RATIO[0] <= ratio <= RATIO[1] and spread <= ROUND_SPREAD


def trial_line(trial: dict) -> str:
    """One line saying what the race found."""
    kept = ("raced once on this model's shape, remembered" if trial.get("steady", True) else
            "the machine was busy during the race: not remembered, raced again next time")
    return (f"{trial['dtype']} on this CPU: a token measured at {trial['float32_ms']:.1f} ms "
            f"in float32 and {trial['bfloat16_ms']:.1f} ms in bfloat16 ({kept}; --dtype "
            "overrides)")


def full_depth_ms(ms_at: dict[int, float], layers: int) -> float:
    """A token's cost at `layers` layers from its cost at two depths (linear in the depth)."""
    (d1, t1), (d2, t2) = sorted(ms_at.items())
    per_layer = max(0.0, (t2 - t1) / (d2 - d1))
    return max(0.0, t1 - d1 * per_layer) + layers * per_layer


def key(cpu_fingerprint: str, torch_version: str, threads: int | None,
        model_path: str | Path) -> str:
    """Threads as asked (None: torch's default), as the backend and the window ask them."""
    text = (f"{cpu_fingerprint}|torch {torch_version}|t{threads or 'auto'}|"
            f"{Path(model_path).resolve()}")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def racing(device: str, asked: str | None, cpu_bf16: bool) -> bool:
    """Whether the dtype is to be raced: on a CPU that multiplies bfloat16, none asked
    (neither --dtype nor SPECVIZ_DTYPE)."""
    if asked in (None, "", "auto"):
        asked = os.environ.get("SPECVIZ_DTYPE")
    return device == "cpu" and cpu_bf16 and asked in (None, "", "auto")


def store_path() -> Path:
    from ..models import home_dir

    return home_dir("cache") / "profiles" / STORE_NAME


def remembered_for(target: str, threads: int | None) -> str | None:
    """`remembered` for a model named as the command line or the window names it (a path, a
    registry or Hub name), on `threads` threads as asked."""
    from ..errors import SpecvizError
    from ..models.store import resolve

    try:
        path = resolve(target)
    except SpecvizError:
        return None  # not here yet: nothing measured
    return remembered(store_path(), path, threads)


def remembered(store: Path, model_path: str | Path, threads: int | None) -> str | None:
    """The dtype measured earlier for this model here, or None (never measured). Reads no
    torch: the window asks it."""
    return read_dict(store).get(key(*_machine(), threads, model_path), {}).get("dtype")


def remember(store: Path, model_path: str | Path, threads: int | None, result: dict) -> None:
    cpu, torch_version = _machine()
    entry = {**result, "model": Path(model_path).name, "threads": threads, "cpu": cpu,
             "torch": torch_version, "at": round(time.time(), 1)}
    try:
        name = key(cpu, torch_version, threads, model_path)
        update_dict(store, lambda known: {**known, name: entry})
    except OSError:
        pass  # measured again next time


def raced_since(store: Path, model_path: str | Path, threads: int | None,
                since: float) -> dict | None:
    """The race remembered for this model and threads if it ran at or after `since` (a
    command's first use of a model races in the probe's child process, not where the command
    could say it)."""
    entry = read_dict(store).get(key(*_machine(), threads, model_path))
    return entry if isinstance(entry, dict) and entry.get("at", 0) >= since else None


def raced_here(store: Path) -> list[dict]:
    """The races run on this processor with this torch (`specviz doctor` lists them)."""
    cpu, torch_version = _machine()
    return [e for e in read_dict(store).values()
            if isinstance(e, dict) and e.get("cpu") == cpu and e.get("torch") == torch_version]


def races_line(races: list[dict]) -> str:
    """`specviz doctor`'s line: each model's dtype and the race's figures, and the threads
    each race ran on (one model raced on the default and on two threads is two races)."""
    return "; ".join(f"{r.get('model', '?')}{_threads(r.get('threads'))}: {r.get('dtype')} "
                     f"({r.get('float32_ms', 0):.1f} ms in float32, "
                     f"{r.get('bfloat16_ms', 0):.1f} in bfloat16)" for r in races)


def _threads(threads) -> str:
    return f" on {threads} threads" if threads else " on the default threads"


def depths(layer_params: int | None) -> tuple[int, int]:
    """The two depths raced: DEPTHS, the deeper one cut to LAYER_PARAMS of layers' weights (a
    7B's five layers would copy 1B parameters); never below two layers."""
    shallow, deep = DEPTHS
    if layer_params:
        deep = max(shallow + 1, min(deep, LAYER_PARAMS // layer_params))
    return shallow, deep


def measure(config, rows: frozenset[int] = frozenset(), layer_params: int | None = None) -> dict:
    """Race float32 (its small-row products routed as `rows` says, as the backend does) and
    bfloat16 on random-weight copies of `config`'s shape; the milliseconds a token would take
    at the model's full depth in each, and the dtype picked."""
    import torch

    from . import small_rows

    raced = depths(layer_params)
    f32 = _copy_of_shape(config, max(raced))
    models = {"float32": f32, "bfloat16": copy.deepcopy(f32).to(torch.bfloat16)}
    small_rows.route(f32, rows)  # after the copy: bfloat16 routes none
    at: dict[str, list[dict[int, float]]] = {"float32": [], "bfloat16": []}
    layers = int(config.num_hidden_layers)
    for _ in range(ROUNDS):
        for dtype, model in models.items():
            timed = {}
            for depth in raced:
                model.config.num_hidden_layers = depth  # the forward runs that many layers
                timed[depth] = step_ms(model, config.vocab_size)
            at[dtype].append(timed)
    # Each round's estimate, then their median: the two depths' times of one round go
    # together (the fastest of each, from different rounds, made a layer's cost jump).
    estimates = {dtype: [full_depth_ms(timed, layers) for timed in rounds]
                 for dtype, rounds in at.items()}
    ms = {dtype: statistics.median(e) for dtype, e in estimates.items()}
    return {"dtype": pick(ms["float32"], ms["bfloat16"]),
            "float32_ms": round(ms["float32"], 3), "bfloat16_ms": round(ms["bfloat16"], 3),
            "steady": steady(estimates["float32"], estimates["bfloat16"])}


def step_ms(model, vocab: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """Median milliseconds of a one-token step after CONTEXT cached tokens."""
    import torch
    from transformers import DynamicCache

    from .hf_cache import cache_keyword

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, CONTEXT + STEPS + 1), generator=gen)
    cache = {cache_keyword(model): DynamicCache()}
    times = []
    with torch.inference_mode():
        model(input_ids=ids[:, :CONTEXT], use_cache=True, logits_to_keep=1, **cache)
        for i in range(CONTEXT, CONTEXT + STEPS + 1):
            started = clock()
            model(input_ids=ids[:, i:i + 1], use_cache=True, **cache)
            times.append(clock() - started)
    return 1000.0 * statistics.median(times[1:])  # the first sets the kernels up


def _copy_of_shape(config, depth: int):
    """A float32 model of `config`'s shape, `depth` layers deep, with random weights."""
    import torch
    from transformers import AutoModelForCausalLM

    shallow = copy.deepcopy(config)
    shallow.num_hidden_layers = depth
    for name in ("layer_types",):  # per-layer lists (sliding or full attention) cut to match
        kinds = getattr(shallow, name, None)
        if isinstance(kinds, list):
            setattr(shallow, name, kinds[:depth])
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(shallow, dtype=torch.float32).eval()


def _machine() -> tuple[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    from ..machine.hardware import read_cpu

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = "none"
    return read_cpu().fingerprint, torch_version
