"""What this machine's processor and memory are, as plain data.

Rules that depend on the hardware (llama.cpp's AMX path, which build to suggest) take these
facts as arguments, so a test can hand them the facts of a machine it does not run on.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache

# The features that decide which kernels llama.cpp and torch run, in the names Linux uses.
KEY_FEATURES = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16",
                "amx_tile", "amx_int8", "amx_bf16", "asimd", "sve")


# x86 instructions that multiply bfloat16 matrices natively; without them PyTorch converts
# bfloat16 back to float32 around each product, which is slower than float32 throughout.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@dataclass(frozen=True)
class CpuFacts:
    model: str
    arch: str
    flags: frozenset[str] = field(default_factory=frozenset)
    cores: int = 1
    memory_gib: float | None = None

    @property
    def has_amx(self) -> bool:
        return "amx_int8" in self.flags or "amx_tile" in self.flags

    @property
    def features(self) -> list[str]:
        return [name for name in KEY_FEATURES if name in self.flags]

    @property
    def fingerprint(self) -> str:
        """Stable across runs and reboots; changes when the processor or its features do."""
        text = "|".join((self.model, self.arch, *sorted(self.flags)))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def one_line(self) -> str:
        features = ", ".join(self.features) or "no AVX2/AVX-512/AMX"
        return f"{self.model} ({self.arch}; {features})"


def parse_cpuinfo(text: str) -> tuple[str, frozenset[str]]:
    """The model name and feature flags from Linux's /proc/cpuinfo (x86 or Arm)."""
    model, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    return model, frozenset(flags)


# Set by the window in its engine process's environment: that process's automatic threads
# are the ones beside a window.
BESIDE_A_WINDOW = "SPECVIZ_BESIDE_A_WINDOW"


def compute_threads(beside_a_window: bool | None = None, cores: int | None = None) -> int:
    """Threads for a model's compute: every core, or beside a window all but one, whose GUI
    thread then has a core of its own (llama.cpp's worker threads spin while they wait for
    each other, so a worker that shares a core slows them all).

    Two cores are the exception: there one thread makes a batch cost nearly what its tokens
    cost one by one (smollm2-135m: 8 tokens 6.7 steps at 1 thread, 3.9 at 2), so no oracle
    could pay, while two threads beside the window still decoded plainly as fast as one
    (129.9 against 125.7 tokens/s) with no GUI stall over 50 ms (docs/results/window.md).
    `beside_a_window` None: as this process's environment says."""
    if beside_a_window is None:
        beside_a_window = os.environ.get(BESIDE_A_WINDOW) == "1"
    cores = cores or os.cpu_count() or 1
    if not beside_a_window or cores <= 2:
        return cores
    return cores - 1


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the system has one (a
    container or `taskset` given 2 of 64 cores), else every core."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # macOS and Windows have no affinity to ask
        return os.cpu_count() or 1


def capped_threads(asked: int | None) -> tuple[int | None, str]:
    """`asked` threads, at most one per usable core, and the line that says so where it was
    more: a thread past the cores only waits for a turn (1,000 on 2 cores: 0.1 tokens/s)."""
    cores = usable_cores()
    if asked is None or asked <= cores:
        return asked, ""
    return cores, (f"--threads {asked} is more than the {cores} cores this process may use: "
                   f"{cores} threads are used")


@lru_cache(maxsize=1)
def read_cpu() -> CpuFacts:
    """This machine's facts (read once per process)."""
    model, flags = "", frozenset()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            model, flags = parse_cpuinfo(f.read())
    except OSError:
        model, flags = _sysctl_cpu()
    return CpuFacts(model=model or platform.processor() or platform.machine(),
                    arch=platform.machine(), flags=flags, cores=os.cpu_count() or 1,
                    memory_gib=_memory_gib())


def _sysctl_cpu() -> tuple[str, frozenset[str]]:
    """macOS: the brand string and the `hw.optional` features that are set."""
    try:
        brand = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        listing = subprocess.run(["sysctl", "hw.optional"], capture_output=True, text=True,
                                 timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return "", frozenset()
    flags = set()
    for line in listing.splitlines():
        key, _, value = line.partition(":")
        if value.strip() == "1":
            name = key.rsplit(".", 1)[-1].lower()
            flags.add("asimd" if name in ("neon", "armv8_1_atomics") else name)
    return brand, frozenset(flags)


def _memory_gib() -> float | None:
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return round(pages * size / 2**30, 1)
