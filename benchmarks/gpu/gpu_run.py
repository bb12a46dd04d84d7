"""Run specviz on the GPU machine from what pack.py carried: stage by stage, each idempotent.

On the device (python3 is its Python 3.12 with torch; no network):

    python3 benchmarks/gpu/gpu_run.py stage assemble install        # after every call's carry
    python3 benchmarks/gpu/gpu_run.py build-llama --background      # CUDA build, detached
    python3 benchmarks/gpu/gpu_run.py test --no-model               # tiny models on CUDA
    python3 benchmarks/gpu/gpu_run.py build-llama --wait 500 --return-wheel
    python3 benchmarks/gpu/gpu_run.py test figures

Here, as a rehearsal: the same with `--device cpu --out DIR` (benchmarks/gpu/README.md).

Stages:
- stage: copy the parts in the carry folders present (.gpu/call*) to the work folder, each
  checked against the manifest's SHA-256;
- assemble: join each file's parts and check the whole; one line per missing or damaged part;
- install: the carried wheels into <work>/site (pip --no-index --no-deps --target), specviz
  itself linked there; the system libraries Qt misses unpacked from the carried .debs;
- build-llama: llama-cpp-python from the sdist (-DGGML_CUDA=on for sm_90 on the GPU), timed;
  the wheel is kept, installed, and with --return-wheel cut into $OUT parts to carry next time;
- test: the backend, session, verification, tree, Medusa, EAGLE and early-exit tests with
  SPECVIZ_TEST_DEVICE set, once per dtype (fp32, then bf16 on CUDA), junit XML kept;
- figures: benchmarks/gpu/figures.py's commands, each with a time cap, results archived into
  $OUT after every step.

Everything lands in the work folder (default /tmp/specviz-gpu); what comes back is in $OUT:
run.json (every stage's outcome), results.tar.gz (logs, JSON, junit, traces), shot.png,
and the wheel's parts. A short table is printed last.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import carry  # beside this script
import figures
from carry import Manifest, MiB

REPO = Path(__file__).resolve().parents[2]
STAGES = ("facts", "stage", "assemble", "install", "build-llama", "test", "figures", "env")
# The tests issue #45 names: backends, session, verification, trees, Medusa, EAGLE, early
# exit; the device rules; and the tests that only make sense on a GPU.
TEST_FILES = ("test_backends.py", "test_session.py", "test_verify.py", "test_tree_verify.py",
              "test_tree_backends.py", "test_tree_session.py", "test_medusa.py",
              "test_eagle.py", "test_early_exit.py", "test_device_choice.py", "test_gpu.py")
TEST_TIMEOUT_S = 90  # one test's limit there: the slowest takes 11 s on this repo's 2-core CI
CUDA_ARCH = "90"  # the H100 and H200 (sm_90): one architecture builds several times faster


@dataclass
class Outcome:
    stage: str
    status: str  # ok | partial | failed | skipped | started
    seconds: float
    note: str = ""


class Run:
    """Where things are, and the environment every command gets."""

    def __init__(self, args) -> None:
        self.args = args
        self.device = args.device
        self.work = args.work
        self.out = args.out
        self.parts = self.work / "parts"
        self.files = self.work / "files"
        self.home = self.work / "home"  # SPECVIZ_HOME: models/ and profiles/
        self.site = self.work / "site"  # pip --target: the carried packages, specviz linked
        self.sysroot = self.work / "sysroot"  # unpacked .debs
        self.build = self.work / "build"
        self.wheelhouse = self.work / "wheelhouse"
        self.results = self.work / "results" / self.device
        self.outcomes: list[Outcome] = []
        # Earlier commands of this call (one device call runs gpu_run.py several times; $OUT
        # is emptied between calls, so run.json holds this call's outcomes).
        previous = self.out / "run.json" if self.out else None
        self.earlier = json.loads(previous.read_text())["outcomes"] \
            if previous and previous.is_file() else []

    def remaining(self, reserve: float = 20) -> float:
        """Seconds left in this device call (GPU_CALL_START, set by the call's first line, and
        --call-limit), less a reserve for archiving; unlimited when it is not set."""
        start = os.environ.get("GPU_CALL_START")
        if not start:
            return float("inf")
        return self.args.call_limit - (time.time() - float(start)) - reserve

    def manifest(self) -> Manifest | None:
        path = self.parts / carry.MANIFEST
        return Manifest.read(path) if path.is_file() else None

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.site),
                                                          env.get("PYTHONPATH", "")]))
        env |= {"SPECVIZ_HOME": str(self.home), "SPECVIZ_NO_FETCH": "1",
                # No network there: without these, every Hub lookup waits for its timeout.
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "PYTHONUNBUFFERED": "1", "QT_QPA_PLATFORM": "offscreen"}
        # The carried system libraries (only those missing there were unpacked), and the CUDA
        # toolkit's where llama.cpp's build links them and the loader does not find them
        # (never otherwise: they could shadow the ones torch brings).
        libs = [p for p in (self.sysroot / "usr/lib/x86_64-linux-gnu",) if p.is_dir()]
        if (self.work / "cuda-libs").is_file():
            libs.append(Path((self.work / "cuda-libs").read_text().strip()))
        if libs:
            env["LD_LIBRARY_PATH"] = os.pathsep.join([*map(str, libs),
                                                      *filter(None, [env.get("LD_LIBRARY_PATH")])])
        if (self.work / "fonts.conf").is_file():
            env["FONTCONFIG_FILE"] = str(self.work / "fonts.conf")
        return env | (extra or {})

    def python(self) -> list[str]:
        return [sys.executable]


# --- running commands with a cap ------------------------------------------------------------


def run_capped(cmd: list[str], env: dict, cap_s: float, log: Path | None = None,
               stdout_to: Path | None = None, cwd: Path = REPO) -> tuple[int | None, float]:
    """Run `cmd` for at most `cap_s` seconds (its whole process group is killed then);
    (exit status, or None when cut short; seconds). What it prints is echoed and appended to
    `log`; with `stdout_to`, its standard output goes to that file instead (its errors are
    still echoed)."""
    started = time.monotonic()
    with contextlib.ExitStack() as files:
        sink = files.enter_context(open(stdout_to, "wb")) if stdout_to else subprocess.PIPE
        log_file = files.enter_context(open(log, "ab")) if log else None
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, start_new_session=True, stdout=sink,
                                stderr=subprocess.PIPE if stdout_to else subprocess.STDOUT)
        stream = proc.stderr if stdout_to else proc.stdout
        os.set_blocking(stream.fileno(), False)

        def echo() -> None:
            chunk = stream.read()
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                if log_file:
                    log_file.write(chunk)

        while proc.poll() is None:
            echo()
            if time.monotonic() - started > cap_s:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                print(f"\n[cut short after {cap_s:.0f} s: {' '.join(cmd[:4])} ...]", flush=True)
                return None, time.monotonic() - started
            time.sleep(0.2)
        echo()
        return proc.returncode, time.monotonic() - started


# --- stage, assemble ------------------------------------------------------------------------


def do_stage(run: Run) -> Outcome:
    carried = sorted(p for p in (REPO / ".gpu").glob("call[0-9]*") if p.is_dir())
    if run.args.calls:  # a rehearsal here, where every call's folder is present
        carried = [p for p in carried if p.name.removeprefix("call") in run.args.calls.split(",")]
    if not carried:
        return Outcome("stage", "skipped", 0, "no .gpu/call* folder in this call's tree")
    lines = carry.stage_parts(carried, run.parts)
    for line in lines:
        if not line.startswith("ok"):
            print(line)
    staged = sum(line.startswith("ok") for line in lines)
    bad = [line for line in lines if line.startswith("BAD")]
    names = ", ".join(p.name for p in carried)
    return Outcome("stage", "failed" if bad else "ok", 0,
                   f"{staged} part(s) from {names}" + (f"; {len(bad)} damaged" if bad else ""))


def do_assemble(run: Run) -> Outcome:
    manifest = run.manifest()
    if manifest is None:
        return Outcome("assemble", "skipped", 0, "nothing staged yet (run stage)")
    results = [carry.assemble(item, run.parts, run.home / "models" if item.kind == "model"
                              else run.files) for item in manifest.items]
    waiting = [r for r in results if r.line.startswith("MISSING")]
    for r in results:
        if r not in waiting[3:]:
            print(r.line)
    if len(waiting) > 3:
        print(f"MISSING ... and {len(waiting) - 3} more files, as the line below says")
    for line in unpack_heads(run):
        print(line)
    bad = [r for r in results if r.line.startswith("BAD")]
    missing = [r for r in results if r.path is None and r not in bad]
    status = "failed" if bad else "partial" if missing else "ok"
    waiting = sorted({p.call for r in missing for p in r.item.parts
                      if not (run.parts / p.name).is_file()})
    note = f"{len(results) - len(missing) - len(bad)}/{len(results)} files"
    if waiting:
        note += "; waiting for " + ", ".join(f"call{c}" for c in waiting)
    return Outcome("assemble", status, 0, note + (f"; {len(bad)} BAD" if bad else ""))


def unpack_heads(run: Run) -> list[str]:
    """The trained heads' tar unpacked beside the model, where the oracles look for them;
    once per tar (a marker holds its SHA-256)."""
    lines, manifest = [], run.manifest()
    digests = {i.final_name: i.sha256 for i in manifest.items} if manifest else {}
    for tar_path in assembled(run, "heads"):
        marker = heads_marker(run, tar_path)
        digest = digests[tar_path.name]  # assemble checked the file against it
        if marker.is_file() and marker.read_text() == digest:
            continue
        with tarfile.open(tar_path) as tar:
            tar.extractall(marker.parent, filter="data")
        marker.write_text(digest)
        lines.append(f"ok      {tar_path.name} unpacked beside the model")
    return lines


def heads_marker(run: Run, tar_path: Path) -> Path:
    return run.home / "models" / (tar_path.name + ".unpacked")


def assembled(run: Run, kind: str) -> list[Path]:
    """The finished files of one kind (model, sdist, wheel, pyside, deb, prebuilt)."""
    manifest = run.manifest()
    if manifest is None:
        return []
    folder = run.home / "models" if kind == "model" else run.files
    return [folder / i.final_name for i in manifest.items
            if i.kind == kind and (folder / i.final_name).is_file()]


# --- install --------------------------------------------------------------------------------


def pip_install(run: Run, wheels: list[Path]) -> tuple[bool, str]:
    """Install the wheels not installed yet (by SHA-256: a wheel packed again with other
    contents is installed again) into the site folder."""
    record_path = run.site / ".installed.json"
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    digests = {w: carry.sha256_file(w) for w in wheels}
    todo = [w for w in wheels if record.get(w.name) != digests[w]]
    if not todo:
        return True, "already installed"
    run.site.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([*run.python(), "-m", "pip", "install", "--no-index", "--no-deps",
                           "--upgrade", "--target", str(run.site), "-q",
                           "--disable-pip-version-check", *map(str, todo)],
                          capture_output=True, text=True)
    if done.returncode:
        return False, done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "pip failed"
    record |= {w.name: digests[w] for w in todo}
    record_path.write_text(json.dumps(record, indent=1))
    return True, f"{len(todo)} wheel(s)"


def link_specviz(run: Run) -> None:
    """specviz from this checkout, by a link named `specviz` (the repository root is the
    package): no build, and the code tested is exactly the code carried."""
    link = run.site / "specviz"
    if link.is_symlink() and link.resolve() == REPO:
        return
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(REPO, target_is_directory=True)


def do_install(run: Run) -> Outcome:
    # The prebuilt CUDA wheel cannot load without CUDA's libraries: a rehearsal on the CPU
    # keeps the llama.cpp it built itself (cuda_wheel.py checked the CUDA one here already).
    prebuilt = assembled(run, "prebuilt") if run.device != "cpu" else []
    wheels = [*assembled(run, "wheel"), *assembled(run, "pyside"), *prebuilt,
              *sorted(run.wheelhouse.glob("llama_cpp_python-*.whl"))]
    if not wheels:
        return Outcome("install", "skipped", 0, "no wheels assembled yet")
    ok, note = pip_install(run, wheels)
    run.site.mkdir(parents=True, exist_ok=True)
    link_specviz(run)
    if ok and assembled(run, "deb") and any(run.site.glob("PySide6")):
        note += "; " + qt_system_libs(run)
    check = subprocess.run([*run.python(), "-c", IMPORT_CHECK], env=run.env(),
                           capture_output=True, text=True, cwd="/")
    print(check.stdout.strip() or check.stderr.strip()[-600:])
    ok = ok and check.returncode == 0
    return Outcome("install", "ok" if ok else "failed", 0, note if ok else
                   f"{note}; import check failed: {check.stderr.strip()[-200:]}")


IMPORT_CHECK = """
import importlib, importlib.util, torch, transformers
import specviz.engines.backends.hf, specviz.engines.models.store as store
cuda = torch.cuda.is_available()
print("torch", torch.__version__, "cuda", cuda, torch.cuda.get_device_name(0) if cuda else "",
      "| transformers", transformers.__version__, "| specviz from", store.__file__)
if importlib.util.find_spec("llama_cpp"):
    import llama_cpp
    print("llama_cpp", llama_cpp.__version__, "gpu offload:",
          bool(llama_cpp.llama_supports_gpu_offload()))
else:
    print("llama_cpp: not installed yet (build-llama)")
"""


def qt_system_libs(run: Run) -> str:
    """Unpack the carried packages of the system libraries Qt cannot find here (and, in
    turn, of what those link), never over the system's own. Fonts always, with a fonts.conf
    that also lists the system's fonts: a machine without fonts draws no text."""
    manifest = run.manifest()
    sonames = manifest.made.get("sonames", {}) if manifest else {}
    debs = {p.name: p for p in assembled(run, "deb")}
    unpacked: list[str] = []
    force = run.args.force_syslibs
    for round_ in range(6):  # each round can reveal what the libraries just unpacked link
        missing = missing_sonames(run)
        wanted = set(debs) if force and round_ == 0 else \
            {sonames[s] for s in missing if s in sonames} - set(unpacked)
        if not wanted:
            break
        for name in sorted(wanted):
            carry.unpack_deb(debs[name], run.sysroot)
            unpacked.append(name)
    fonts = next((d for n, d in debs.items() if n.startswith("fonts-dejavu")), None)
    if fonts:
        carry.unpack_deb(fonts, run.sysroot)
        write_fonts_conf(run)
    still = missing_sonames(run)
    note = f"Qt libs: {len(unpacked)} package(s) unpacked"
    return note + (f", still missing {', '.join(still)}" if still else ", none missing")


def missing_sonames(run: Run) -> list[str]:
    code = ("from specviz.engines.machine import display_libs as d; "
            "print(' '.join(d.check().missing))")
    done = subprocess.run([*run.python(), "-c", code], env=run.env(), capture_output=True,
                          text=True, cwd="/")
    return done.stdout.split()


def write_fonts_conf(run: Run) -> None:
    conf = f"""<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig>
  <dir>/usr/share/fonts</dir>
  <dir>{run.sysroot}/usr/share/fonts</dir>
  <cachedir>{run.work}/fontcache</cachedir>
</fontconfig>
"""
    (run.work / "fonts.conf").write_text(conf, encoding="utf-8")


# --- build-llama ----------------------------------------------------------------------------


def build_command(run: Run, src: Path) -> tuple[list[str], dict[str, str]]:
    """pip wheel on the sdist with the installed scikit-build-core (no network: no isolated
    build environment); its CMake folder is kept, so a build cut short goes on from where it
    stopped."""
    cmake_args = "-DLLAMA_BUILD_TESTS=OFF"
    env = {"CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 4)}
    if run.device == "cuda":
        cmake_args += f" -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES={CUDA_ARCH}"
        nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
        env |= {"CUDACXX": nvcc, "PATH": f"{Path(nvcc).parent}{os.pathsep}{os.environ['PATH']}"}
    env["CMAKE_ARGS"] = cmake_args
    cmd = carry.pip_wheel_command(run.python(), src, run.wheelhouse, run.build / "cmake",
                                  offline=True)
    return cmd, env


def unpack_sdist(run: Run) -> Path | None:
    sdists = assembled(run, "sdist")
    if not sdists:
        return None
    return carry.unpack_sdist(sdists[0], run.build)


def built_wheel(run: Run) -> Path | None:
    found = [*sorted(run.wheelhouse.glob("llama_cpp_python-*.whl")), *assembled(run, "prebuilt")]
    return found[0] if found else None


def do_build_llama(run: Run) -> Outcome:
    """Collect a background build (--wait), or build here (capped by --cap, else --wait),
    or start one detached (--background); then install the wheel and, with --return-wheel,
    cut it into $OUT parts."""
    args = run.args
    status_file = run.build / "build.json"
    if args.wait is not None:
        wait_for_build(run, min(args.wait, run.remaining()))
    if is_building(run):
        return Outcome("build-llama", "partial", 0, f"still building; log {run.build}/build.log")
    wheel = built_wheel(run)
    if wheel is None:
        src = unpack_sdist(run)
        if src is None:
            return Outcome("build-llama", "skipped", 0, "no sdist assembled (it comes in call1)")
        cmd, extra = build_command(run, src)
        if args.background:
            return start_background_build(run)
        if args.dry_run:
            print(" ".join(f"{k}={v!r}" for k, v in extra.items() if k != "PATH"), *cmd)
            return Outcome("build-llama", "ok", 0, "dry run: command printed")
        kind = f"CUDA sm_{CUDA_ARCH}" if run.device == "cuda" else "CPU"
        print(f"building llama-cpp-python ({kind}, {extra['CMAKE_BUILD_PARALLEL_LEVEL']} jobs)"
              "...", flush=True)
        run.build.mkdir(parents=True, exist_ok=True)
        code, seconds = run_capped(cmd, run.env(extra),
                                   min(args.cap or args.wait or 3600, run.remaining()),
                                   log=run.build / "build.log")
        status_file.write_text(json.dumps({"rc": code, "seconds": seconds}))
        wheel = built_wheel(run)
        if wheel is None:
            what = "cut short (run it again: the CMake folder is kept)" if code is None \
                else f"exit {code}"
            return Outcome("build-llama", "failed", seconds,
                           f"no wheel: {what}; log {run.build}/build.log")
    record = json.loads(status_file.read_text()) if status_file.is_file() else {}
    ok, note = pip_install(run, [wheel])
    if ok and run.device == "cuda":
        note += "; " + find_cuda_libs(run)
    note = (f"{wheel.name} {wheel.stat().st_size / MiB:.1f} MiB"
            + (f", built in {record['seconds']:.0f} s" if record.get("seconds") else "")
            + f"; install: {note}")
    if args.return_wheel and run.out:
        parts = carry.split_for_return(wheel, run.out / "wheel")
        note += f"; {len(parts)} part(s) in $OUT/wheel"
    return Outcome("build-llama", "ok" if ok else "failed", record.get("seconds") or 0, note)


def find_cuda_libs(run: Run) -> str:
    """Whether the loader finds the CUDA libraries llama.cpp's CUDA library links; where it
    does not, the toolkit's folder is remembered for LD_LIBRARY_PATH (see Run.env)."""
    lib = next(run.site.glob("llama_cpp/lib/libggml-cuda.so*"), None)
    if lib is None:
        return "no libggml-cuda in the wheel: a CPU build?"
    lost = ldd_missing(lib, run.env())
    toolkit = Path("/usr/local/cuda/lib64")
    if lost and toolkit.is_dir():
        (run.work / "cuda-libs").write_text(str(toolkit))
        lost = ldd_missing(lib, run.env())
    return "CUDA libraries found" if not lost else f"CUDA libraries missing: {', '.join(lost)}"


def ldd_missing(lib: Path, env: dict) -> list[str]:
    out = subprocess.run(["ldd", str(lib)], capture_output=True, text=True, env=env).stdout
    return [line.split()[0] for line in out.splitlines() if "not found" in line]


def start_background_build(run: Run) -> Outcome:
    """The build in a process session of its own: it goes on after this command returns
    (while the machine is held), and `build-llama --wait` collects it."""
    run.build.mkdir(parents=True, exist_ok=True)
    cmd = [*run.python(), str(Path(__file__).resolve()), "--device", run.device,
           "--work", str(run.work), "build-llama", *(["--dry-run"] if run.args.dry_run else [])]
    # $OUT is this command's alone, and the build may outlive this call.
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "GPU_CALL_START")}
    with open(run.build / "background.log", "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, cwd=REPO)
    (run.build / "build.pid").write_text(str(proc.pid))
    return Outcome("build-llama", "started", 0, f"pid {proc.pid}; log {run.build}/build.log")


def is_building(run: Run) -> bool:
    pid_file = run.build / "build.pid"
    if not pid_file.is_file():
        return False
    try:
        pid = int(pid_file.read_text())
        if pid == os.getpid():
            return False  # the detached build itself: the file names it as it starts
        # Still our build (not a process that got its number since), and not a zombie: a
        # finished child its parent has not reaped yet.
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError, IndexError):
        return False
    return b"build-llama" in cmdline and os.fsencode(run.work) in cmdline and state != "Z"


def wait_for_build(run: Run, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while is_building(run) and time.monotonic() < deadline:
        time.sleep(2)


# --- test -----------------------------------------------------------------------------------


def do_test(run: Run) -> Outcome:
    args = run.args
    model = bool(assembled(run, "model"))
    dtypes = args.dtypes.split(",") if args.dtypes else (
        ["float32", "bfloat16"] if run.device == "cuda" else ["float32"])
    files = [f"tests/{f}" for f in (args.tests.split(",") if args.tests else TEST_FILES)]
    expr = args.mark or ""
    if not model or args.no_model:
        expr = f"({expr}) and not model" if expr else "not model"
    elif not importable(run, "llama_cpp"):  # before build-llama: the transformers tests alone
        expr = f"({expr}) and not llama" if expr else "not llama"
    marks = ["-m", expr] if expr else []
    workers = str(args.workers or (8 if run.device == "cuda" else 1))
    # One line per finished test, so a pass cut at its cap still names what failed; and a
    # per-test limit where pytest-timeout is there, so one hung test cannot spend the cap.
    report = ["-v", "--tb=short", "-rfE", "--durations=12"]
    if importable(run, "pytest_timeout"):
        report.append(f"--timeout={TEST_TIMEOUT_S}")
    notes, ok, seconds, skipped = [], True, 0.0, 0
    run.results.mkdir(parents=True, exist_ok=True)
    for dtype in dtypes:
        tag = f"{run.device}-{dtype}" + ("-" + "".join(c for c in expr if c.isalnum()))
        junit = run.results / f"tests-{tag}.xml"
        cmd = [*run.python(), "-m", "pytest", *report, "-p", "no:cacheprovider", "-n", workers,
               "-o", "addopts=", "--max-worker-restart=20", f"--junitxml={junit}", *marks,
               *files]
        # CI=true: a missing model fails instead of skipping, now that it was carried.
        # Each worker's torch and numpy get their share of the cores, not a thread per core
        # each (8 workers x 16 threads there): the CPU-side tests (sampling statistics)
        # would fight over them.
        threads = str(max(1, (os.cpu_count() or 1) // int(workers)))
        env = run.env({"SPECVIZ_TEST_DEVICE": run.device, "SPECVIZ_DTYPE": dtype,
                       "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
                       **({"CI": "true"} if model else {})})
        cap = min(args.cap or 420, run.remaining())
        if cap < 30:
            notes.append(f"{dtype}: skipped, the call's time is spent")
            skipped += 1
            continue
        log = run.results / f"tests-{tag}.log"
        code, took = run_capped(cmd, env, cap, log=log)
        seconds += took
        counts = junit_counts(junit) if code is not None else cut_counts(log)
        notes.append(f"{dtype}: {counts}" + (f" ({marks[1]})" if marks else ""))
        ok = ok and code == 0
        archive(run)
    status = "skipped" if skipped == len(dtypes) else "ok" if ok else "failed"
    return Outcome("test", status, seconds, "; ".join(notes))


def cut_counts(log: Path) -> str:
    """'cut short: N passed, F failed (names)' from a verbose pass's log: pytest writes its
    junit report only at the end, and a pass killed at its cap never gets there."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    outcome = re.compile(r"\b(PASSED|FAILED|ERROR|SKIPPED)\s+(tests/\S+::\S+)")
    seen: dict[str, str] = {}
    for status, test in outcome.findall(text):
        seen[test] = status  # a test's last word: its setup's ERROR, or its outcome
    failed = [t.split("::", 1)[1] for t, s in seen.items() if s in ("FAILED", "ERROR")]
    passed = sum(1 for s in seen.values() if s == "PASSED")
    note = f"cut short: {passed} passed, {len(failed)} failed"
    if failed:
        note += " (" + ", ".join(failed[:6]) + (", ..." if len(failed) > 6 else "") + ")"
    return note


def junit_counts(path: Path) -> str:
    """'N passed, F failed, S skipped' and the failed tests' names, from a junit XML."""
    if not path.is_file():
        return "no report"
    root = ET.parse(path).getroot()
    cases = list(root.iter("testcase"))
    failed = [c for c in cases if c.find("failure") is not None or c.find("error") is not None]
    skipped = [c for c in cases if c.find("skipped") is not None]
    passed = len(cases) - len(failed) - len(skipped)
    text = f"{passed} passed, {len(failed)} failed, {len(skipped)} skipped"
    if failed:
        text += " (" + ", ".join(c.get("name", "?") for c in failed[:6]) + \
            (", ..." if len(failed) > 6 else "") + ")"
    return text


# --- figures --------------------------------------------------------------------------------


def do_figures(run: Run) -> Outcome:
    args = run.args
    sizes = figures.QUICK if args.quick else figures.GPU
    have = {"model": bool(assembled(run, "model")),
            "llama": importable(run, "llama_cpp"),
            "qt": importable(run, "PySide6"),
            "heads": any(heads_marker(run, t).is_file() for t in assembled(run, "heads"))}
    budget_end = time.monotonic() + min(args.budget, run.remaining())
    run.results.mkdir(parents=True, exist_ok=True)
    (run.results / "logs").mkdir(exist_ok=True)
    for folder in ("traces", "traces-transformers"):
        (run.results / folder).mkdir(exist_ok=True)
    rows, done = [], 0
    only = set(args.only.split(",")) if args.only else None
    state = run.results / "figures-done.json"  # steps done in an earlier call on this machine
    finished = json.loads(state.read_text()) if state.is_file() and not args.redo else {}
    for step in figures.steps(run.device, sizes):
        if only and step.name not in only:
            continue
        lacking = [n for n in step.needs if not have[n]]
        left = budget_end - time.monotonic()
        if step.name in finished:
            rows.append(Outcome(step.name, "skipped", 0, "done in an earlier call"))
        elif lacking:
            rows.append(Outcome(step.name, "skipped", 0, "needs " + ", ".join(lacking)))
        elif left < 15:
            rows.append(Outcome(step.name, "skipped", 0, "no time left in the budget"))
        else:
            rows.append(run_step(run, step, min(step.cap_s * args.cap_scale, left - 5)))
            done += rows[-1].status == "ok"
            if rows[-1].status == "ok":
                finished[step.name] = asdict(rows[-1])
                state.write_text(json.dumps(finished, indent=1))
        archive(run, figures_rows=rows)
    for name, why in figures.LEFT_OUT.items():
        rows.append(Outcome(name, "skipped", 0, why))
    run.outcomes.extend(rows)
    shot = run.results / "shot.png"
    if shot.is_file() and run.out:
        shutil.copyfile(shot, run.out / "shot.png")
    ran = [r for r in rows if r.status != "skipped"]
    return Outcome("figures", "ok" if done == len(ran) else "partial",
                   sum(r.seconds for r in rows), f"{done}/{len(ran)} steps ok")


def run_step(run: Run, step: figures.Step, cap: float) -> Outcome:
    print(f"\n== {step.name} (cap {cap:.0f} s)", flush=True)
    started, codes = time.monotonic(), []
    for i, command in enumerate(step.commands):
        cmd = [c.replace("{results}", str(run.results)).replace("{home}", str(run.home))
               for c in command]
        left = cap - (time.monotonic() - started)
        if left <= 0:
            codes.append(None)
            break
        stdout_to = run.results / step.stdout_to if step.stdout_to and i == 0 else None
        code, _ = run_capped(cmd, run.env(step.env), left,
                             log=run.results / "logs" / f"{step.name}.log", stdout_to=stdout_to)
        codes.append(code)
    seconds = time.monotonic() - started
    if all(c == 0 for c in codes):
        return Outcome(step.name, "ok", seconds, step.note)
    what = "cut short" if None in codes else f"exit {next(c for c in codes if c)}"
    return Outcome(step.name, "failed", seconds, f"{what}; logs/{step.name}.log")


def importable(run: Run, module: str) -> bool:
    code = f"import {module}"
    return subprocess.run([*run.python(), "-c", code], env=run.env(), capture_output=True,
                          cwd="/").returncode == 0


# --- what comes back ------------------------------------------------------------------------


def archive(run: Run, figures_rows: list[Outcome] | None = None) -> None:
    """$OUT/results.tar.gz of everything in the results folder, written again after every
    step (a call cut short still brings back what was done), and $OUT/run.json."""
    if not run.out:
        return
    run.out.mkdir(parents=True, exist_ok=True)
    partial = run.out / "results.tar.gz.partial"
    with tarfile.open(partial, "w:gz") as tar:
        if run.results.parent.is_dir():
            tar.add(run.results.parent, arcname="results")
        for log in (run.build / "build.log", run.build / "build.json"):
            if log.is_file():
                tar.add(log, arcname=f"build/{log.name}")
    partial.replace(run.out / "results.tar.gz")
    outcomes = [*run.earlier, *(asdict(o) for o in [*run.outcomes, *(figures_rows or [])])]
    (run.out / "run.json").write_text(json.dumps(
        {"device": run.device, "outcomes": outcomes,
         "machine": machine_facts()}, indent=1), encoding="utf-8")


def machine_facts() -> dict:
    facts = {"cores": os.cpu_count(), "python": sys.version.split()[0]}
    smi = shutil.which("nvidia-smi")
    if smi:
        done = subprocess.run([smi, "--query-gpu=name,memory.total,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True)
        facts["gpu"] = done.stdout.strip()
    return facts


FACTS = """
import importlib.metadata as md, platform, torch
print("python", platform.python_version(), "| glibc", platform.libc_ver()[1], "| torch",
      torch.__version__, "| cuda", torch.version.cuda, torch.cuda.is_available())
for name in ("transformers", "huggingface-hub", "scikit-build-core", "cmake", "ninja"):
    try:
        print(name, md.version(name), end="; ")
    except md.PackageNotFoundError:
        print(name, "MISSING", end="; ")
print()
"""


def do_facts(run: Run) -> Outcome:
    """What the machine is: the card, the compiler, the versions the run relies on."""
    facts = machine_facts()
    print(facts)
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if Path(nvcc).exists():
        done = subprocess.run([nvcc, "--version"], capture_output=True, text=True)
        print(done.stdout.strip().splitlines()[-1])
    done = subprocess.run([*run.python(), "-c", FACTS], capture_output=True, text=True)
    print(done.stdout.strip() or done.stderr.strip()[-300:])
    return Outcome("facts", "ok", 0, facts.get("gpu", "no nvidia-smi"))


def do_env(run: Run) -> Outcome:
    """Print the environment as shell exports, for commands typed by hand there."""
    keys = ("PYTHONPATH", "SPECVIZ_HOME", "SPECVIZ_NO_FETCH", "HF_HUB_OFFLINE",
            "TRANSFORMERS_OFFLINE", "QT_QPA_PLATFORM", "LD_LIBRARY_PATH", "FONTCONFIG_FILE")
    env = run.env()
    for key in keys:
        if key in env:
            print(f"export {key}={env[key]!r}")
    return Outcome("env", "ok", 0)


HANDLERS = {"facts": do_facts, "stage": do_stage, "assemble": do_assemble, "install": do_install,
            "build-llama": do_build_llama, "test": do_test, "figures": do_figures,
            "env": do_env}


def print_table(outcomes: list[Outcome]) -> None:
    print("\n| stage | status | s | note |\n|---|---|---|---|")
    for o in outcomes:
        print(f"| {o.stage} | {o.status} | {o.seconds:.0f} | {o.note} |")


def parse_args(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("stages", nargs="+", choices=STAGES)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--work", type=Path, default=Path("/tmp/specviz-gpu"))
    # A session has 15 minutes of device time, the machine's start (1-2 minutes) and the
    # gap between calls included: two calls of 5.5 minutes fit with a margin.
    p.add_argument("--call-limit", type=float, default=330,
                   help="seconds a device call may run, counted from $GPU_CALL_START (every "
                        "wait, test and figure is cut to fit)")
    p.add_argument("--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get("OUT")
                   else None, help="what comes back (default $OUT)")
    p.add_argument("--calls", default=None,
                   help="stage: only these calls' folders, e.g. 1,2 (a rehearsal here)")
    p.add_argument("--force-syslibs", action="store_true",
                   help="install: unpack every carried .deb and use it (a rehearsal of the "
                        "path taken where Qt's libraries are missing)")
    p.add_argument("--background", action="store_true", help="build-llama: detached")
    p.add_argument("--wait", type=float, default=None,
                   help="build-llama: wait this long for a background build, then collect it")
    p.add_argument("--dry-run", action="store_true", help="build-llama: print the command")
    p.add_argument("--return-wheel", action="store_true",
                   help="build-llama: cut the wheel into parts in $OUT/wheel")
    p.add_argument("--cap", type=float, default=None, help="build-llama, test: seconds at most")
    p.add_argument("--dtypes", default=None, help="test: comma-separated (default: float32, "
                   "and bfloat16 on CUDA)")
    p.add_argument("--tests", default=None, help="test: comma-separated files in tests/")
    p.add_argument("--no-model", action="store_true", help="test: only the tiny-model tests")
    p.add_argument("--mark", default=None, help="test: a pytest -m expression, e.g. model")
    p.add_argument("--workers", type=int, default=None, help="test: pytest-xdist workers")
    p.add_argument("--quick", action="store_true", help="figures: a rehearsal's sizes")
    p.add_argument("--budget", type=float, default=330, help="figures: seconds for all steps")
    p.add_argument("--cap-scale", type=float, default=1.0,
                   help="figures: multiply every step's cap (a slow CPU rehearsal)")
    p.add_argument("--only", default=None, help="figures: comma-separated step names")
    p.add_argument("--redo", action="store_true", help="figures: also the steps done earlier")
    return p.parse_intermixed_args(argv)  # stages and options in any order


def main() -> None:
    args = parse_args()
    run = Run(args)
    if run.out:
        run.out.mkdir(parents=True, exist_ok=True)
    for name in args.stages:
        started = time.monotonic()
        outcome = HANDLERS[name](run)
        outcome.seconds = outcome.seconds or time.monotonic() - started
        run.outcomes.append(outcome)
        archive(run)
    if args.stages != ["env"]:
        print_table(run.outcomes)
    failed = any(o.status == "failed" for o in run.outcomes)
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
