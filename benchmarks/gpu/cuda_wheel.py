"""Build llama-cpp-python's CUDA wheel here, with no GPU, for the lent H100/H200 (sm_90).

    python benchmarks/gpu/cuda_wheel.py                   # .gpu/prebuilt/llama_cpp_python-*.whl
    python benchmarks/gpu/pack.py --no-shot --prebuilt .gpu/prebuilt/llama_cpp_python-*.whl

Compiling llama.cpp's CUDA kernels takes minutes even on the device's 16 cores, minutes the
session's 15 of device time cannot spare; nothing in the compile needs the GPU itself. So the
wheel is built here and travels instead of the sdist (gpu_run.py installs it and builds nothing).

The toolkit is NVIDIA's own PyPI wheels of CUDA 13.0's compiler, runtime headers and cuBLAS:
the device's driver (580) runs CUDA 13.0, and a wheel linked against a newer runtime would ask
for a newer driver there. The driver's library (libcuda) exists only where a GPU does; ggml
links it for its virtual-memory pool, so the link here uses a stub made from cuda.h's function
names (it only records the NEEDED entry libcuda.so.1, which the device's driver provides).
The CPU code is built for x86-64-v3 (AVX2, FMA, F16C, BMI2), not for this machine: the wheel
runs on another CPU, and with every layer offloaded the CPU's share is small.

The CMake folder is kept (.gpu/cuda-build): a build cut short goes on from where it stopped.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import carry  # beside this script
import pack  # beside this script: the trimmed sdist that would otherwise travel

REPO = Path(__file__).resolve().parents[2]
CUDA_ARCH = "90"  # the H100 and H200
# CUDA 13.0 (the device driver's version): compiler, its front end and NVVM, runtime, cuBLAS
# and the CCCL headers ggml's kernels include.
TOOLKIT_WHEELS = ("nvidia-cuda-nvcc==13.0.88", "nvidia-cuda-crt==13.0.88",
                  "nvidia-nvvm==13.0.88", "nvidia-cuda-runtime==13.0.96",
                  "nvidia-cublas==13.0.2.14", "nvidia-cuda-cccl==13.0.85")
X86_64_V3 = "-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"


def cmake_args(toolkit: Path) -> str:
    # -real: machine code for sm_90 only, no PTX to compile for later GPUs (half the size).
    return (f"-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES={CUDA_ARCH}-real "
            f"-DCMAKE_CUDA_COMPILER={toolkit / 'bin' / 'nvcc'} -DCUDAToolkit_ROOT={toolkit} "
            f"-DGGML_NATIVE=OFF {X86_64_V3} -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_TESTS=OFF")


def driver_functions(preprocessed: str) -> list[str]:
    """The driver API's function names in cuda.h after the preprocessor (which maps names such
    as cuMemAlloc to the versioned symbols, cuMemAlloc_v2, the library exports)."""
    return sorted(set(re.findall(r"\b(cu[A-Z][A-Za-z0-9_]*)\s*\(", preprocessed)))


def stub_source(names: list[str]) -> str:
    return "".join(f"int {name}(void) {{ return 999; }}\n" for name in names)


def toolkit(cache: Path) -> Path:
    """NVIDIA's wheels unpacked into a toolkit's layout (bin, include, lib, lib64, nvvm), with
    the unversioned library links CMake looks for and lib/stubs/libcuda.so."""
    root = (cache / "toolkit" / "nvidia" / "cu13").resolve()
    if (root / ".ready").is_file():
        return root
    wheels = cache / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "--disable-pip-version-check", "-q", "-d", str(wheels), *TOOLKIT_WHEELS],
                   check=True)
    for wheel in sorted(wheels.glob("nvidia_*.whl")):
        with zipfile.ZipFile(wheel) as z:
            z.extractall(cache / "toolkit")
    for tool in [*(root / "bin").rglob("*"), *(root / "nvvm" / "bin").glob("*")]:
        if tool.is_file():  # zip archives do not keep the executable bit
            tool.chmod(tool.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    for name in ("cudart", "cublas", "cublasLt"):
        link = root / "lib" / f"lib{name}.so"
        if not link.is_symlink():
            link.symlink_to(f"lib{name}.so.13")
    if not (root / "lib64").exists():
        (root / "lib64").symlink_to("lib")
    make_driver_stub(root / "include", root / "lib" / "stubs")
    (root / ".ready").write_text("")
    return root


def make_driver_stub(include: Path, stubs: Path) -> Path:
    """stubs/libcuda.so (soname libcuda.so.1), defining every function cuda.h in `include`
    declares."""
    header = subprocess.run(["gcc", "-E", "-x", "c", "-I", str(include), "-"],
                            input="#include <cuda.h>\n", capture_output=True, text=True,
                            check=True).stdout
    stubs.mkdir(parents=True, exist_ok=True)
    (stubs / "libcuda.c").write_text(stub_source(driver_functions(header)))
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(stubs / "libcuda.so"),
                    "-Wl,-soname,libcuda.so.1", str(stubs / "libcuda.c")], check=True)
    return stubs / "libcuda.so"


def build(root: Path, sdist: Path, build_dir: Path, out: Path, jobs: int) -> Path:
    src = carry.unpack_sdist(sdist, build_dir)
    env = dict(os.environ, CMAKE_ARGS=cmake_args(root), CUDACXX=str(root / "bin" / "nvcc"),
               CMAKE_BUILD_PARALLEL_LEVEL=str(jobs))
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{env['PATH']}"
    out.mkdir(parents=True, exist_ok=True)
    log = build_dir / "build.log"
    print(f"building {src.name} for sm_{CUDA_ARCH} with {jobs} jobs; log {log}", flush=True)
    start = time.monotonic()
    with open(log, "ab") as f:
        cmd = carry.pip_wheel_command([sys.executable], src, out, build_dir / "cmake",
                                      offline=False)
        done = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
    minutes = (time.monotonic() - start) / 60
    if done.returncode:
        raise SystemExit(f"the build failed after {minutes:.0f} min: see {log}")
    wheel = max(out.glob("llama_cpp_python-*.whl"), key=lambda p: p.stat().st_mtime)
    print(f"built {wheel.name} ({wheel.stat().st_size / pack.MiB:.1f} MiB) in {minutes:.0f} min")
    return wheel


# The libraries llama_cpp's Python opens by their plain names (lib<name>.so, with ctypes);
# every other library is found through a soname another one needs.
OPENED_BY_NAME = ("llama", "ggml", "mtmd", "llava")


def slim(wheel: Path, out: Path) -> Path:
    """The wheel without its copies: a wheel cannot hold links, so each library is in it six
    times (lib.so, .so.0, .so.0.x.y, in llama_cpp/lib and again in a top-level lib/ the
    package never reads): 142 MiB where one copy of each is 24. Kept: llama_cpp/ and the
    dist-info, and in llama_cpp/lib the names that are opened or needed."""
    with zipfile.ZipFile(wheel) as z:
        libs = {n: z.read(n) for n in z.namelist() if n.startswith("llama_cpp/lib/")}
        wanted = {f"llama_cpp/lib/lib{name}.so" for name in OPENED_BY_NAME}
        for data in libs.values():
            wanted |= {f"llama_cpp/lib/{soname}" for soname in needed_sonames(data)}
        keep = [n for n in z.namelist() if n.startswith("llama_cpp/") or ".dist-info/" in n]
        keep = [n for n in keep if n not in libs or n in wanted]
        record = next(n for n in keep if n.endswith(".dist-info/RECORD"))
        out.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as new:
            rows = []
            for name in keep:
                if name == record:
                    continue
                data = libs[name] if name in libs else z.read(name)
                info = z.getinfo(name)
                new.writestr(info, data, zipfile.ZIP_DEFLATED, 9)
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                rows.append(f"{name},sha256={digest.decode()},{len(data)}")
            new.writestr(z.getinfo(record), "\n".join([*rows, f"{record},,"]) + "\n")
    return out


def readelf(elf: bytes, *flags: str) -> str:
    with tempfile.NamedTemporaryFile(suffix=".so") as f:
        f.write(elf)
        f.flush()
        return subprocess.run(["readelf", *flags, f.name], capture_output=True, text=True,
                              check=True).stdout


def needed_sonames(elf: bytes) -> list[str]:
    return re.findall(r"\(NEEDED\).*\[(.+?)\]", readelf(elf, "-d"))


def check(wheel: Path) -> list[str]:
    """What the CUDA library in the wheel links, and that it holds CUDA machine code."""
    with zipfile.ZipFile(wheel) as z:
        name = next((n for n in z.namelist() if re.search(r"libggml-cuda\.so", n)), None)
        if name is None:
            raise SystemExit(f"{wheel.name}: no libggml-cuda in it (a CPU build?)")
        lib = z.read(name)
    if ".nv_fatbin" not in readelf(lib, "-S", "-W"):
        raise SystemExit(f"{name}: no CUDA machine code (.nv_fatbin) in it")
    return needed_sonames(lib)


SMOKE = """
import sys, llama_cpp
print("a GPU found:", bool(llama_cpp.llama_supports_gpu_offload()), "(none here)")
llm = llama_cpp.Llama(sys.argv[1], n_gpu_layers=0, n_ctx=256, verbose=False)
out = llm("def add(a, b):", max_tokens=8, temperature=0)
print("decoded:", repr(out["choices"][0]["text"]))
"""


def smoke(wheel: Path, root: Path, model: Path, work: Path) -> str:
    """Install the wheel apart and decode a few tokens on this CPU: every library it links
    loads (the driver is the stub here, so CUDA finds no device and llama.cpp runs on the
    CPU). What would otherwise fail on the GPU's minutes fails here."""
    site, drivers = work / "smoke-site", work / "smoke-driver"
    shutil.rmtree(site, ignore_errors=True)
    drivers.mkdir(parents=True, exist_ok=True)
    link = drivers / "libcuda.so.1"
    if not link.is_symlink():
        link.symlink_to(root / "lib" / "stubs" / "libcuda.so")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(site), "--disable-pip-version-check", str(wheel)], check=True)
    env = dict(os.environ, PYTHONPATH=str(site),
               LD_LIBRARY_PATH=f"{root / 'lib'}{os.pathsep}{drivers}")
    done = subprocess.run([sys.executable, "-c", SMOKE, str(model)], env=env,
                          capture_output=True, text=True, cwd=work)
    if done.returncode:
        raise SystemExit(f"the wheel does not run here: {done.stderr.strip()[-800:]}")
    return done.stdout.strip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache", type=Path, default=REPO / ".gpu" / "cache" / "cuda")
    p.add_argument("--build-dir", type=Path, default=REPO / ".gpu" / "cuda-build")
    p.add_argument("--out", type=Path, default=REPO / ".gpu" / "prebuilt")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = p.parse_args()
    args.build_dir, args.out = args.build_dir.resolve(), args.out.resolve()
    pack.ensure_ignored(args.out)
    root = toolkit(args.cache)
    sdist, _ = pack.llama_sdist(REPO / ".gpu" / "cache", REPO / ".gpu" / "files")
    args.build_dir.mkdir(parents=True, exist_ok=True)
    built = build(root, sdist, args.build_dir, args.build_dir / "wheel", args.jobs)
    wheel = slim(built, args.out / built.name)
    print(f"{wheel} ({wheel.stat().st_size / pack.MiB:.1f} MiB without the copies)")
    print("libggml-cuda links:", ", ".join(check(wheel)))
    model = pack.model_file("smollm2-135m")
    print(smoke(wheel, root, model, args.build_dir))
    print(f"next: python benchmarks/gpu/pack.py --no-shot --prebuilt {wheel}")


if __name__ == "__main__":
    main()
