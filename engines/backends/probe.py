"""A backend's first use on a machine, tried in a child process first.

Native code can crash on hardware nobody here has tested (llama.cpp's AMX path did, in the
first decode, on common cloud CPUs). In-process that ends specviz with a bare signal and no
word of why. So the first time a backend runs with a given build on a given CPU, a child
process loads the model and runs a 1-token and an 8-token forward. The outcome is cached per
(backend, build, CPU, device, the AMX setting), so later runs pay a stat and a small read.
A crash is kept too, and named in one line with what to do; `specviz doctor` probes again.

Run as `python -m specviz.engines.backends.probe BACKEND MODEL [DEVICE]`: it prints one JSON
line per stage reached and a last line with the figures.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import platformdirs

from ..bounded_json import loads
from ..errors import BackendCrashed, BackendError, SpecvizError
from ..machine.hardware import CpuFacts, read_cpu
from ..machine.json_file import read_dict, update_dict

PROBE_VERSION = 1
TIMEOUT_S = 600
PREFIX = "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n"
N_BATCH = 8

# What rebuilds llama-cpp-python for a plain AVX2/AVX-512 CPU, without AMX (llama.cpp's
# README names these options; GGML_NATIVE=OFF keeps the compiler from adding AMX by itself).
REBUILD_NO_AMX = ('CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON '
                  '-DGGML_AVX512=ON -DGGML_AMX_INT8=OFF" pip install --force-reinstall '
                  '--no-cache-dir --no-deps llama-cpp-python')


@dataclass
class ProbeResult:
    backend: str
    device: str
    outcome: str  # "ok", "crash" (died of a fault), "killed" (from outside or out of
    # memory: not the machine's fault), "error" (a Python error), "timeout"
    model: str = ""
    stage: str = ""  # the last stage reached: load, one, batch, agree
    detail: str = ""  # the signal's name or the error's line
    load_s: float | None = None
    one_ms: float | None = None  # a 1-token forward after an 8-token prefix
    batch_ms: float | None = None  # an 8-token forward after the same prefix
    batch_agrees: bool | None = None  # the batch's greedy tokens equal one-by-one decoding's
    max_logit_diff: float | None = None  # between the batch's rows and one-by-one decoding's
    build: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


# ------------------------------------------------------------------ what a probe is keyed on


def build_id(backend: str) -> str:
    """The backend's library version and its compiled file (a rebuild changes it), read
    without importing the library."""
    if backend == "llama":
        return _package_build("llama-cpp-python", "llama_cpp", ("lib/libllama", "lib/llama"))
    return (_package_build("torch", "torch", ("lib/libtorch_cpu", "lib/torch_cpu"))
            + "; transformers " + package_version("transformers"))


def _package_build(dist: str, module: str, lib_stems: tuple[str, ...]) -> str:
    version = package_version(dist)
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return f"{dist} {version}"
    folder = Path(spec.origin).parent
    libs = sorted(p for stem in lib_stems for p in folder.glob(stem + ".*"))
    stamp = ",".join(f"{p.stat().st_size}:{int(p.stat().st_mtime)}" for p in libs[:1])
    return f"{dist} {version} ({stamp or 'no library file'})"


def package_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def probe_key(backend: str, device: str, cpu: CpuFacts, build: str, allow_amx: bool) -> str:
    text = "|".join((str(PROBE_VERSION), backend, device or "auto", build, cpu.fingerprint,
                     f"amx={allow_amx}"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def current_key(backend: str, device: str | None) -> str:
    from .llama_buffers import amx_allowed

    return probe_key(backend, device or "auto", read_cpu(), build_id(backend),
                     backend == "llama" and amx_allowed())


# ------------------------------------------------------------------ the cache


def cache_path() -> Path:
    """Beside the user's cache of models, but not moved by SPECVIZ_HOME: what the machine
    does is the machine's, whichever home a run uses."""
    return Path(platformdirs.user_cache_dir("specviz")) / "probes.json"


def load_cache() -> dict[str, dict]:
    return read_dict(cache_path())


def store(key: str, result: ProbeResult, forget_backend: bool = False) -> None:
    """Remember `result`; `forget_backend` first drops every earlier result of its backend
    (any device or setting): what `specviz doctor` finds replaces what was known."""
    def change(data: dict) -> dict:
        if forget_backend:
            data = {k: v for k, v in data.items() if v.get("backend") != result.backend}
        return {**data, key: asdict(result)}

    try:
        update_dict(cache_path(), change)
    except OSError:
        pass  # an unwritable cache only means probing again next time


# ------------------------------------------------------------------ the parent's side

Runner = Callable[[str, str, str], ProbeResult]


def ensure_works(backend: str, model: str | os.PathLike, device: str | None = None,
                 runner: Runner | None = None) -> ProbeResult | None:
    """Probe `backend` once per build and CPU; raise BackendCrashed if it crashes there.

    Returns the fresh result, or None when a stored success made probing unnecessary.
    """
    key = current_key(backend, device)
    stored = load_cache().get(key)
    if stored and stored.get("outcome") == "ok":
        return None
    if stored and stored.get("outcome") == "crash":
        raise BackendCrashed(crash_message(from_dict(stored), read_cpu()))
    result = (runner or run_child)(backend, str(model), device or "auto")
    if result.outcome in ("ok", "crash"):
        store(key, result)  # an error (a bad file, say) is the model's, not the machine's
    if result.outcome == "crash":
        raise BackendCrashed(crash_message(result, read_cpu()))
    if result.outcome == "timeout":
        raise BackendError(f"the {backend} backend did not load the model and run a first "
                           f"forward in {TIMEOUT_S} s on this machine; `specviz doctor` shows why")
    if result.outcome == "killed":
        raise BackendError(f"the first try of the {backend} backend here was killed "
                           f"({result.detail}: out of memory, or from outside); nothing is "
                           "remembered, the next run tries again")
    return result


def run_child(backend: str, model: str, device: str, timeout: float = TIMEOUT_S,
              command: Sequence[str] | None = None) -> ProbeResult:
    """Run the probe in a child process and read what it reached."""
    argv = list(command or [sys.executable, "-m", "specviz.engines.backends.probe"])
    argv += [backend, model, device]
    result = ProbeResult(backend, device, "error", model=model, build=build_id(backend))
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        result.outcome = "timeout"
    else:
        out = done.stdout
        if done.returncode != 0 and not _last_json(out).get("outcome"):
            result.detail = _died_of(done.returncode, done.stderr)
            result.outcome = ("killed" if -done.returncode in KILLED else
                              "crash" if _is_signal(done.returncode) else "error")
    for line in out.splitlines():
        record = _json(line)
        if "stage" in record:
            result.stage = record["stage"]
        if "outcome" in record:
            result = from_dict({**asdict(result), **record})
    return result


# Signals that end a process from outside (or the kernel's out-of-memory killer): they say
# nothing about whether the backend's code runs on this CPU, so they are never remembered.
KILLED = {getattr(signal, name) for name in ("SIGKILL", "SIGTERM", "SIGINT", "SIGHUP")
          if hasattr(signal, name)}


def from_dict(data: dict) -> ProbeResult:
    return ProbeResult(**{k: v for k, v in data.items() if k in ProbeResult.__dataclass_fields__})


def _is_signal(code: int) -> bool:
    return code < 0 or code >= 0xC0000000  # POSIX signals; Windows exception codes


def _died_of(code: int, stderr: str) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    if _is_signal(code):
        return f"exception 0x{code:08X}"
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else f"exit status {code}"


def _json(line: str) -> dict:
    try:
        value = loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _last_json(out: str) -> dict:
    lines = out.strip().splitlines()
    return _json(lines[-1]) if lines else {}


def crash_message(result: ProbeResult, cpu: CpuFacts) -> str:
    """One line: what crashed where, on what, and the one thing to try."""
    stage = {"": "starting", "load": "loading the model", "one": "its first forward",
             "batch": "a batched forward", "agree": "decoding token by token"}
    where = stage.get(result.stage, result.stage)
    return (f"the {result.backend} backend crashed on this machine ({result.detail or 'killed'}"
            f" in {where}; {result.build}; CPU {cpu.one_line()}): {advice(result, cpu)}")


def advice(result: ProbeResult, cpu: CpuFacts) -> str:
    from .llama_buffers import ENV_AMX, amx_allowed

    if result.backend != "llama":
        return "use --backend llama, or reinstall torch; `specviz doctor` probes again"
    if cpu.has_amx and amx_allowed():
        return f"unset {ENV_AMX} (AMX crashes on this machine); `specviz doctor` probes again"
    return (f"rebuild llama-cpp-python for this CPU ({REBUILD_NO_AMX}) or use --backend "
            "transformers; `specviz doctor` probes again")


# ------------------------------------------------------------------ the child's side


def probe(backend_kind: str, model: str, device: str) -> ProbeResult:
    """Load, time a 1-token and an 8-token forward, and compare the batch with one-by-one
    decoding of the same tokens (greedy agreement and the largest logit difference)."""
    import numpy as np

    result = ProbeResult(backend_kind, device, "ok", model=model, build=build_id(backend_kind))
    _stage("load")
    start = time.perf_counter()
    backend = _open(backend_kind, model, device)
    result.load_s = round(time.perf_counter() - start, 3)
    tokens = (backend.tokenize(PREFIX * 2) * 2)[: 8 + N_BATCH]
    prefix, batch = tokens[:8], tokens[8:]
    _stage("one")
    backend.forward(prefix)
    result.one_ms = _timed_ms(lambda: backend.forward(batch[:1]))
    _stage("batch")
    backend.truncate(len(prefix))
    rows: list = []
    result.batch_ms = _timed_ms(lambda: rows.append(backend.forward(batch, logits="all")))
    _stage("agree")
    backend.truncate(len(prefix))
    single = np.stack([backend.forward([t])[0] for t in batch])
    batched = rows[0]
    result.batch_agrees = bool((batched.argmax(-1) == single.argmax(-1)).all())
    result.max_logit_diff = round(float(np.abs(batched - single).max()), 5)
    result.stage = "done"
    backend.close()
    return result


def _open(kind: str, model: str, device: str):
    """The backend itself, not load_backend(): that would probe again."""
    if kind == "llama":
        from .llama import LlamaBackend

        return LlamaBackend(model, n_ctx=256, device=device)
    from .. import heap
    from .hf import TransformersBackend

    with heap.loading():  # as load_backend loads it (heap.py)
        return TransformersBackend(model, device=device, compile="off")  # the probe compiles
        # nothing: it checks the runtime, and SPECVIZ_COMPILE=on would compile in the child


def _timed_ms(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return round((time.perf_counter() - start) * 1000, 2)


def _stage(name: str) -> None:
    print(json.dumps({"stage": name}), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) not in (2, 3):
        print("usage: python -m specviz.engines.backends.probe BACKEND MODEL [DEVICE]",
              file=sys.stderr)
        return 2
    backend, model, device = args[0], args[1], args[2] if len(args) == 3 else "auto"
    try:
        result = probe(backend, model, device)
    except SpecvizError as exc:
        result = ProbeResult(backend, device, "error", model=model, detail=str(exc),
                             build=build_id(backend))
    print(json.dumps(asdict(result)), flush=True)
    return 0


def backend_build(backend: str) -> str:
    """What the backend was built with, for naming a crash: version and system info."""
    if backend != "llama":
        return build_id(backend)
    from .llama import system_info

    return f"{build_id(backend)}; {system_info().strip(' |')}"


if __name__ == "__main__":
    sys.exit(main())
