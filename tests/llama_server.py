"""llama-server for the server-lane tests, built here and kept in a cache folder.

Built from the llama.cpp sources inside the llama-cpp-python sdist, so the server runs the
same llama.cpp as the binding; never committed. CI builds it before the tests (about six
minutes on two cores, once per machine and version); where it is not built, the live tests
are skipped with the reason.

    python tests/llama_server.py --build
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import platformdirs

from specviz.engines.machine.hardware import CpuFacts, read_cpu

ENV = "SPECVIZ_LLAMA_SERVER"  # a llama-server binary to use instead of the cached build


def package_version() -> str:
    return version("llama_cpp_python")


def cache_dir(facts: CpuFacts | None = None) -> Path:
    facts = facts or read_cpu()
    kind = "no-amx" if facts.has_amx else "native"
    root = Path(platformdirs.user_cache_dir("specviz")) / "llama-server"
    return root / f"{package_version()}-{kind}"


def binary() -> Path | None:
    if os.environ.get(ENV):
        path = Path(os.environ[ENV])
        return path if path.is_file() else None
    path = cache_dir() / "build" / "bin" / "llama-server"
    return path if path.is_file() else None


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


def build() -> Path:
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    source = _sources(root)
    cmake = ["cmake", "-S", str(source), "-B", str(root / "build"), *cmake_flags(read_cpu())]
    if _has("ninja"):
        cmake += ["-G", "Ninja"]
    subprocess.run(cmake, check=True, stdout=subprocess.DEVNULL)
    jobs = str(os.cpu_count() or 2)
    subprocess.run(["cmake", "--build", str(root / "build"), "--target", "llama-server",
                    "-j", jobs], check=True, stdout=subprocess.DEVNULL)
    path = binary()
    if path is None:
        raise SystemExit("the build finished without bin/llama-server")
    return path


def _sources(root: Path) -> Path:
    """llama.cpp's sources from the sdist of the installed llama-cpp-python version."""
    name = f"llama_cpp_python-{package_version()}"
    tree = root / name / "vendor" / "llama.cpp"
    if tree.is_dir():
        return tree
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    "--no-binary", ":all:", f"llama-cpp-python=={package_version()}",
                    "-d", str(root)], check=True)
    with tarfile.open(root / f"{name}.tar.gz") as archive:
        archive.extractall(root, filter="data")
    return tree


def _has(program: str) -> bool:
    return any((Path(d) / program).is_file() for d in os.environ.get("PATH", "").split(":"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RunningServer:
    """A llama-server on 127.0.0.1 and a free port, until closed."""

    def __init__(self, path: Path, model: Path, *extra: str, threads: int = 2) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # Its log goes to a file: a pipe nobody reads fills up and stalls the server.
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [str(path), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
             "-t", str(threads), "-c", "2048", "--no-webui", *extra],
            stdout=subprocess.DEVNULL, stderr=self.log, text=True)
        self._wait_ready()

    def last_words(self) -> str:
        self.log.seek(0)
        return self.log.read()[-400:]

    def _wait_ready(self, timeout: float = 60.0) -> None:
        import httpx

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited: {self.last_words()}")
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.close()
        raise RuntimeError("llama-server did not become ready in time")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="store_true", help="build it if it is not built")
    args = parser.parse_args()
    found = binary()
    if found is None and args.build:
        started = time.monotonic()
        found = build()
        print(f"built {found} in {time.monotonic() - started:.0f} s")
    print(found or "not built (python tests/llama_server.py --build)")
