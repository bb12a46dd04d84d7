"""specviz's own llama-server, built from the llama.cpp inside the installed llama-cpp-python.

llama-cpp-python's sdist carries the llama.cpp sources its binding was built from, and with
them llama-server: its speculation types (`--spec-type`), its draft options and `/metrics`.
Building from there means the server runs the same llama.cpp as the binding. The build lives
in specviz's cache, one folder per llama-cpp-python version and CPU kind, and is never
committed; `SPECVIZ_LLAMA_SERVER` names another binary to use instead. Spawned server lanes
run it and EAGLE's GGUF converter runs from its sources: a room of its own below both, as
servers/ leads to eagle/ (through the loop and its oracles).

    specviz llama-server build      # about six minutes on two cores, once per version
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections import deque
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import platformdirs

from .errors import SpecvizError
from .machine.hardware import CpuFacts, read_cpu

ENV = "SPECVIZ_LLAMA_SERVER"  # a llama-server binary to use instead of the cached build
BUILD_HINT = "run `specviz llama-server build`"
Say = Callable[[str], None]

# Progress lines of the two generators cmake picks: Ninja's "[12/345] Building ..." and
# Make's "[ 35%] Building ...".
_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]")
_MAKE_PERCENT = re.compile(r"^\[\s*(\d+)%\]")
# A failed build's most telling line: the compiler's own error first, then make's or ninja's.
_ERRORS = (re.compile(r":\s*(fatal )?error:"), re.compile(r"\berror\b", re.IGNORECASE),
           re.compile(r"FAILED|\*\*\*"))


class NotBuilt(SpecvizError):
    """No llama-server here; the message says how to get one."""


def package_version() -> str:
    try:
        return version("llama_cpp_python")
    except PackageNotFoundError:
        raise SpecvizError("llama-cpp-python is not installed; llama-server is built from its "
                           "sources (pip install llama-cpp-python)") from None


def cache_dir(facts: CpuFacts | None = None) -> Path:
    """The build's folder: one per llama-cpp-python version and CPU kind (AMX or not)."""
    facts = facts or read_cpu()
    kind = "no-amx" if facts.has_amx else "native"
    root = Path(platformdirs.user_cache_dir("specviz")) / "llama-server"
    return root / f"{package_version()}-{kind}"


def built_path(facts: CpuFacts | None = None) -> Path:
    return cache_dir(facts) / "build" / "bin" / "llama-server"


def binary() -> Path | None:
    """The llama-server to run: $SPECVIZ_LLAMA_SERVER where set, else the cached build; None
    where there is none."""
    if os.environ.get(ENV):
        path = Path(os.environ[ENV]).expanduser()
        return path if path.is_file() else None
    path = built_path()
    return path if path.is_file() else None


def require() -> Path:
    """The llama-server to run, or one line that says how to get one."""
    found = binary()
    if found is not None:
        return found
    if os.environ.get(ENV):
        raise NotBuilt(f"{ENV} names {os.environ[ENV]}, which is not a file; unset it and "
                       f"{BUILD_HINT}, or name a llama-server binary")
    raise NotBuilt(f"llama-server is not built here; {BUILD_HINT} (about six minutes, once)")


def cmake_flags(facts: CpuFacts) -> list[str]:
    """Native code, except on a CPU with AMX, where llama.cpp's AMX path crashed: there the
    vector extensions are named one by one and AMX left out (as engines.backends.probe advises)."""
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
             "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON"]
    if not facts.has_amx:
        return [*flags, "-DGGML_NATIVE=ON"]
    has = facts.flags
    named = [f"-DGGML_{name}={'ON' if flag in has else 'OFF'}"
             for name, flag in (("AVX2", "avx2"), ("FMA", "fma"), ("F16C", "f16c"),
                                ("AVX512", "avx512f"))]
    return [*flags, "-DGGML_NATIVE=OFF", *named, "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_TILE=OFF"]


def build(say: Say = print, force: bool = False) -> Path:
    """Build llama-server into the cache (or return the one there unless `force`); progress
    goes to `say`, one line at a time, and a failure is one line naming the build's log."""
    path = built_path()
    if path.is_file() and not force:
        say(f"llama-server is already built: {path}")
        return path
    if shutil.which("cmake") is None:
        raise SpecvizError("cmake is not installed; llama-server is built with it "
                           "(pip install cmake ninja)")
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    source = source_tree() or fetch_sources(root, say)
    facts = read_cpu()
    configure = ["cmake", "-S", str(source), "-B", str(root / "build"), *cmake_flags(facts)]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    log = root / "build.log"
    say(f"configuring llama.cpp {package_version()} ({'native' if not facts.has_amx else 'no AMX'}"
        f" CPU code); log: {log}")
    with open(log, "w", encoding="utf-8") as out:
        run_logged(configure, out, say=None)
        jobs = str(os.cpu_count() or 2)
        say(f"compiling llama-server with {jobs} jobs")
        run_logged(["cmake", "--build", str(root / "build"), "--target", "llama-server",
                    "-j", jobs], out, say=say)
    if not path.is_file():
        raise SpecvizError(f"the build finished without {path}; see {log}")
    return path


def progress_of(line: str) -> float | None:
    """How far a build is, from one line of its output (0..1); None for other lines."""
    ninja = _NINJA_STEP.match(line)
    if ninja:
        done, total = int(ninja[1]), int(ninja[2])
        return done / total if total else None
    make = _MAKE_PERCENT.match(line)
    return int(make[1]) / 100 if make else None


def run_logged(argv: list[str], log, say: Say | None) -> None:
    """Run one build command, its output into `log`; progress to `say` every tenth of the
    way; a failure is one line with the compiler's first error."""
    tail: deque[str] = deque(maxlen=200)
    shown = -1
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as proc:
        for line in proc.stdout:
            log.write(line)
            tail.append(line.rstrip())
            fraction = progress_of(line)
            if say and fraction is not None and int(fraction * 10) > shown:
                shown = int(fraction * 10)
                say(f"{fraction:4.0%} built")
    if proc.returncode:
        raise SpecvizError(f"{Path(argv[0]).name} failed ({_first_error(tail)}); the whole "
                           f"output is in {log.name}")


def _first_error(lines) -> str:
    found = next((line for pattern in _ERRORS for line in lines if pattern.search(line)), None)
    text = " ".join((found or (lines[-1] if lines else "no output")).split())
    return text if len(text) <= 200 else text[:199] + "…"


def source_tree() -> Path | None:
    """llama.cpp's sources in the cache (those llama-server is built from, with its GGUF
    converter), where they have been fetched."""
    tree = cache_dir() / f"llama_cpp_python-{package_version()}" / "vendor" / "llama.cpp"
    return tree if tree.is_dir() else None


def fetch_sources(root: Path, say: Say) -> Path:
    """llama.cpp's sources from the sdist of the installed llama-cpp-python version."""
    name = f"llama_cpp_python-{package_version()}"
    tree = root / name / "vendor" / "llama.cpp"
    say(f"fetching the llama-cpp-python {package_version()} sources (pip download)")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
         f"llama-cpp-python=={package_version()}", "-d", str(root)],
        capture_output=True, text=True)
    archive = root / f"{name}.tar.gz"
    if result.returncode or not archive.is_file():
        why = (result.stderr.strip().splitlines() or ["no sdist downloaded"])[-1]
        raise SpecvizError(f"cannot fetch the llama-cpp-python {package_version()} sources: "
                           f"{why}")
    with tarfile.open(archive) as opened:
        opened.extractall(root, filter="data")
    return tree
