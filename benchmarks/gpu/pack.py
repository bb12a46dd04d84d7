"""Pack, here, everything a bare GPU machine with no network needs, in calls of at most 64 MiB.

Run here (network to PyPI and Debian), before a GPU session:

    python benchmarks/gpu/pack.py            # downloads, trims, cuts: .gpu/call1, call2, ...
    python benchmarks/gpu/pack.py --check    # the plan again against today's working tree

What travels (each whole file's SHA-256 in .gpu/callN/manifest.json, with its parts'):
- the smollm2-135m GGUF from the model cache, xz-compressed;
- llama-cpp-python's sdist (the version installed here), trimmed of what the build never reads
  (its .git pack, llama.cpp's vocabulary GGUFs, docs, web UI: 73 MiB -> a few) and recompressed;
  or, with --prebuilt, a CUDA wheel built here (cuda_wheel.py) or on an earlier GPU call;
- wheels of every package specviz (and llama-cpp-python) needs that the device image lacks,
  at the versions installed here, pure-Python ones where a package has them;
- with --heads, the model's EAGLE head and Medusa heads (their weights and settings, not their
  training data), as one tar unpacked beside the model there: a third call;
- PySide6-Essentials cut down to what `specviz shot` loads (QtCore, QtGui, QtWidgets,
  QtNetwork, the offscreen platform), and the Debian packages of the system libraries Qt may
  miss there (unpacked there only where missing).

The calls are filled in the order things are needed: sdist and wheels first (the build starts
at once), then the model, then what the shot needs. Carry folders: .gpu/call<N> (git-ignored).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.metadata as md
import io
import lzma
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

sys.path.insert(0, str(Path(__file__).parent))
import carry
from carry import Item, Manifest, MiB

REPO = Path(__file__).resolve().parents[2]
DEVICE_PYTHON = "3.12"
# The device's Python is Ubuntu 24.04's 3.12 (glibc 2.39): any manylinux wheel up to 2.39.
PLATFORMS = ["manylinux2014_x86_64", *(f"manylinux_2_{v}_x86_64" for v in range(17, 40))]
# Needed at run time but never by the GPU work: av exports videos only (35 MiB).
# Loaded by the window alone: left behind with --no-shot, where a call's megabytes count.
QT_ONLY = {"pyqtgraph", "superqt", "qtpy", "qasync", "shiboken6"}
NOT_CARRIED = {"av": "video export only", "llama-cpp-python": "travels as its sdist",
               "pyside6-essentials": "travels trimmed (below)"}

# llama-cpp-python's sdist: what its CMake build never reads (llama.cpp is a subproject there,
# so its tests, tools and examples are not configured; the version comes from __init__.py).
SDIST_DROP = (".git/", "vendor/llama.cpp/models/", "vendor/llama.cpp/docs/",
              "vendor/llama.cpp/benches/", "vendor/llama.cpp/media/", "vendor/llama.cpp/tools/ui/",
              "vendor/llama.cpp/.github/", "vendor/llama.cpp/gguf-py/", "examples/notebooks/")

# PySide6-Essentials: the bindings specviz and pyqtgraph import (pyqtgraph's plot curves import
# QtOpenGL and QtOpenGLWidgets; its QtSvg and QtTest are optional), the Qt libraries they link
# (Gui links DBus; Core links ICU) and the headless platforms. The wheel is 77 MiB, mostly
# QML, Quick and Designer.
PYSIDE_MODULES = ("QtCore", "QtGui", "QtWidgets", "QtNetwork", "QtOpenGL", "QtOpenGLWidgets")
QT_LIBS = ("Core", "Gui", "Widgets", "Network", "DBus", "OpenGL", "OpenGLWidgets")
QT_PLATFORMS = ("offscreen", "minimal")

# System libraries Qt's GUI library links (engines/machine/display_libs.GUI_LIBS) and what they
# link in turn, as Debian bookworm packages (they run on the device's newer Ubuntu).
DEBS = ("libegl1 libgl1 libglx0 libopengl0 libglvnd0 libxkbcommon0 libfontconfig1 "
        "fontconfig-config fonts-dejavu-core libfreetype6 libpng16-16 libbrotli1 libglib2.0-0 "
        "libdbus-1-3 libx11-6 libx11-data libxcb1 libxau6 libxdmcp6 libbsd0 libmd0 libexpat1 "
        "libpcre2-8-0 libffi8").split()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=REPO / ".gpu")
    p.add_argument("--model", default="smollm2-135m", help="registry model to carry")
    p.add_argument("--prebuilt", type=Path, default=None,
                   help="a CUDA llama-cpp-python wheel built there earlier, or the folder its "
                        "parts came back in (gpu_run.py build-llama --return-wheel): carried "
                        "instead of the sdist")
    p.add_argument("--no-shot", action="store_true", help="leave out PySide6 and the debs")
    p.add_argument("--heads", action="store_true",
                   help="carry the model's EAGLE head and Medusa heads (specviz train-heads)")
    p.add_argument("--check", action="store_true",
                   help="check the packed calls against the working tree as it is now")
    args = p.parse_args()
    ensure_ignored(args.out)
    if args.check:
        raise SystemExit(check(args.out))
    pack(args)


def ensure_ignored(out: Path) -> None:
    """The carry folder must be ignored by git (the tool then sends it only when named)."""
    probe = out.relative_to(REPO) / "probe"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=REPO).returncode == 0
    if not ignored:
        exclude = Path(subprocess.run(["git", "rev-parse", "--git-path", "info/exclude"],
                                      cwd=REPO, capture_output=True, text=True,
                                      check=True).stdout.strip())
        exclude = exclude if exclude.is_absolute() else REPO / exclude
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with open(exclude, "a", encoding="utf-8") as f:
            f.write(f"/{out.relative_to(REPO)}/\n")
        print(f"added /{out.relative_to(REPO)}/ to {exclude}")


def pack(args) -> None:
    cache, built = args.out / "cache", args.out / "files"
    built.mkdir(parents=True, exist_ok=True)
    made: dict = {"python": DEVICE_PYTHON}
    files: dict[str, Path] = {}  # name -> what travels, in the order it is needed
    items: dict[str, Item] = {}

    def add(path: Path, kind: str, note: str = "", plain: Path | None = None) -> None:
        item = Item(path.name, kind, path.stat().st_size, carry.sha256_file(path), note=note)
        if plain is not None:
            item.codec, item.plain_size = "xz", plain.stat().st_size
            item.plain_sha256 = carry.sha256_file(plain)
        files[path.name], items[path.name] = path, item

    if args.prebuilt:
        add(prebuilt_wheel(args.prebuilt, built), "prebuilt", "CUDA wheel built there earlier")
    else:
        trimmed, made["sdist"] = llama_sdist(cache, built)
        add(trimmed, "sdist", "trimmed, recompressed: see made.sdist")
    wanted = [(n, v) for n, v in missing_packages() if not (args.no_shot and n in QT_ONLY)]
    made["wheels"] = {name: version for name, version in wanted}
    for wheel in download_wheels(wanted, cache / "wheels"):
        add(wheel, "wheel")
    model = model_file(args.model)
    # xz takes 7% off a Q4 GGUF: the difference between two calls and three.
    add(xz_copy(model, built), "model", f"registry:{args.model}", plain=model)
    if args.heads:
        add(heads_tar(model, built), "heads", "unpacked beside the model")
    if not args.no_shot:
        packed, plain, made["pyside"] = pyside_trimmed(cache, built)
        add(packed, "pyside", "trimmed to what the shot loads", plain=plain)
        debs, made["sonames"] = download_debs(cache / "debs")
        for deb in debs:
            add(deb, "deb")
    check_requirements(wanted)

    tree = carry.tree_size(REPO)
    capacity = carry.call_capacity(tree)
    plan = carry.layout([(n, f.stat().st_size) for n, f in files.items()], capacity)
    for old in args.out.glob("call[0-9]*"):
        shutil.rmtree(old)
    carry.cut(files, plan, args.out, items)
    calls = [{"call": n, "folder": f"{args.out.relative_to(REPO)}/call{n}",
              "bytes": sum(length for _, _, length in c), "tree_bytes": tree}
             for n, c in enumerate(plan, start=1)]
    manifest = Manifest(list(items.values()), calls, made)
    for n in range(1, len(plan) + 1):
        (args.out / f"call{n}" / carry.MANIFEST).write_text(manifest.to_json(), encoding="utf-8")
    print_plan(manifest, tree, capacity)


# --- llama-cpp-python's sdist ---------------------------------------------------------------


def llama_sdist(cache: Path, built: Path) -> tuple[Path, dict]:
    version = md.version("llama-cpp-python")
    sdist = fetch(cache / "sdist", "llama-cpp-python", version, ".tar.gz",
                  ["--no-binary=:all:", f"llama-cpp-python=={version}"])
    out = built / f"llama_cpp_python-{version}-src.tar.xz"
    if not out.is_file():
        print(f"trimming {sdist.name} (xz; half a minute)...", flush=True)
        trim_tar(sdist, out, SDIST_DROP)
    return out, {"version": version, "original": sdist.name,
                 "original_sha256": carry.sha256_file(sdist),
                 "original_size": sdist.stat().st_size, "dropped": list(SDIST_DROP)}


def trim_tar(src: Path, out: Path, drop: tuple[str, ...]) -> None:
    """Copy a source archive without the members under `drop` (paths below its top folder)."""
    partial = out.with_suffix(".partial")
    partial.parent.mkdir(parents=True, exist_ok=True)  # a fresh machine: no .gpu/files yet
    with tarfile.open(src, "r:gz") as tin, tarfile.open(partial, "w:xz", preset=6) as tout:
        for member in tin:
            inner = member.name.split("/", 1)[1] if "/" in member.name else ""
            if any(inner.startswith(d) or inner + "/" == d for d in drop):
                continue
            tout.addfile(member, tin.extractfile(member) if member.isfile() else None)
    partial.replace(out)


def prebuilt_wheel(path: Path, built: Path) -> Path:
    """The wheel itself, or the folder its parts came back in ($OUT/wheel: joined and checked
    against the .sha256.json beside them)."""
    if path.is_file():
        return path
    records = sorted(path.glob("*.sha256.json"))
    if not records:
        raise SystemExit(f"{path}: neither a wheel nor a folder of returned parts")
    return carry.join_returned(records[0], built)


# --- wheels ---------------------------------------------------------------------------------


def missing_packages() -> list[tuple[str, str]]:
    """specviz's requirements for the device's Python, followed through the packages installed
    here, less what the device has: (name, version installed here)."""
    env = {"python_version": DEVICE_PYTHON, "python_full_version": DEVICE_PYTHON + ".3",
           "sys_platform": "linux", "platform_system": "Linux", "extra": ""}
    todo = [Requirement(r) for r in md.requires("specviz") or []]
    seen: dict[str, str] = {}
    while todo:
        req = todo.pop()
        name = carry.canonical(req.name)
        if (req.marker and not req.marker.evaluate(env)) or name in seen:
            continue
        if name in carry.DEVICE_PACKAGES:
            continue
        try:
            seen[name] = md.version(req.name)
        except md.PackageNotFoundError:
            raise SystemExit(f"{req.name} is needed but not installed here: pip install it"
                             ) from None
        todo += [Requirement(r) for r in md.requires(req.name) or []]
    return sorted((n, v) for n, v in seen.items() if n not in NOT_CARRIED)


def download_wheels(wanted: list[tuple[str, str]], folder: Path) -> list[Path]:
    """One wheel per package: the pure-Python one where there is one (it installs on this
    machine's 3.11 too, for the rehearsal), else the build for the device's CPython 3.12."""
    wheels = []
    for name, version in wanted:
        pin = f"{name}=={version}"
        pure = ["--only-binary=:all:", "--python-version", DEVICE_PYTHON,
                "--implementation", "py", "--abi", "none", "--platform", "any", pin]
        binary = ["--only-binary=:all:", "--python-version", DEVICE_PYTHON, "--implementation",
                  "cp", "--abi", "cp312", "--abi", "abi3", "--abi", "none",
                  *(a for p in PLATFORMS for a in ("--platform", p)), pin]
        wheels.append(fetch(folder, name, version, ".whl", pure, binary))
    return wheels


def fetch(folder: Path, name: str, version: str, suffix: str, *attempts: list[str]) -> Path:
    """`name`'s file of `version` ending in `suffix`, downloaded by pip into `folder` with
    the first of `attempts` that works (kept there: a second run downloads nothing)."""
    folder.mkdir(parents=True, exist_ok=True)
    prefix = carry.canonical(f"{name}-{version}-")

    def found() -> Path | None:
        return next((f for f in sorted(folder.iterdir()) if f.name.endswith(suffix) and
                     carry.canonical(f.name.removesuffix(suffix) + "-").startswith(prefix)), None)

    for attempt in attempts:
        if found():
            break
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                        "-d", str(folder), *attempt], capture_output=True)
    if not found():
        raise SystemExit(f"pip could not download {name}=={version} into {folder}")
    return found()


def check_requirements(wanted: list[tuple[str, str]]) -> None:
    """Every requirement of what is carried is on the device or carried too."""
    have = carry.DEVICE_PACKAGES | {n for n, _ in wanted} | set(NOT_CARRIED)
    env = {"python_version": DEVICE_PYTHON, "sys_platform": "linux", "extra": ""}
    for name, _ in [*wanted, ("llama-cpp-python", ""), ("pyside6-essentials", "")]:
        for raw in md.requires(name) or []:
            req = Requirement(raw)
            if (not req.marker or req.marker.evaluate(env)) and \
                    carry.canonical(req.name) not in have:
                print(f"WARNING: {name} needs {req}, which is neither on the device nor carried")


# --- PySide6, trimmed -----------------------------------------------------------------------


def keep_pyside(name: str) -> bool:
    if ".dist-info/" in name:
        return not name.endswith("/RECORD")  # written again for what is kept
    if not name.startswith("PySide6/"):
        return False
    inner = name.removeprefix("PySide6/")
    if inner.endswith(".py") and not inner.startswith(("Qt/", "scripts/")):
        return True
    if inner.startswith("libpyside6.abi3.so"):
        return True
    if inner in {f"{m}.abi3.so" for m in PYSIDE_MODULES}:
        return True
    if inner.startswith("Qt/lib/libicu"):
        return True
    if inner in {f"Qt/lib/libQt6{lib}.so.6" for lib in QT_LIBS}:
        return True
    return inner in {f"Qt/plugins/platforms/libq{p}.so" for p in QT_PLATFORMS}


def xz_copy(path: Path, built: Path) -> Path:
    """built/<name>.xz, made once."""
    packed = built / (path.name + ".xz")
    if not packed.is_file():
        print(f"compressing {path.name} (xz; a minute)...", flush=True)
        with open(path, "rb") as src, lzma.open(packed.with_suffix(".partial"), "wb",
                                                preset=6) as dst:
            shutil.copyfileobj(src, dst, MiB)
        packed.with_suffix(".partial").replace(packed)
    return packed


HEAD_FILES = {"eagle": ("config.json", "model.safetensors"),
              "medusa": ("medusa.json", "heads.safetensors")}


def heads_tar(model: Path, built: Path) -> Path:
    """built/<model>.heads.tar: the trained heads' side folders as they sit beside the model,
    weights and settings only (the training's cached answers stay here)."""
    tar_path = built / f"{model.stem}.heads.tar"
    with tarfile.open(tar_path, "w") as tar:
        for kind, names in HEAD_FILES.items():
            folder = model.parent / f"{model.stem}.{kind}"
            for name in names:
                if not (folder / name).is_file():
                    raise SystemExit(f"no {kind} head for {model.name} here: specviz "
                                     f"train-heads --kind {kind} --target ... first")
                info = tar.gettarinfo(folder / name, f"{folder.name}/{name}")
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                with open(folder / name, "rb") as f:
                    tar.addfile(info, f)
    return tar_path


def pyside_trimmed(cache: Path, built: Path) -> tuple[Path, Path, dict]:
    """The PySide6-Essentials wheel with only what `keep_pyside` keeps, stored uncompressed
    and then xz-compressed as a whole (smaller than the wheel's own deflate)."""
    version = md.version("PySide6-Essentials")
    wheel = fetch(cache / "wheels", "PySide6-Essentials", version, ".whl",
                  ["--only-binary=:all:", "--python-version", DEVICE_PYTHON, "--implementation",
                   "cp", "--abi", "abi3", *(a for p in PLATFORMS for a in ("--platform", p)),
                   f"PySide6-Essentials=={version}"])
    plain = built / wheel.name
    packed = built / (wheel.name + ".xz")
    if not packed.is_file():
        print(f"trimming {wheel.name} (xz; a minute)...", flush=True)
        kept = rewrite_wheel(wheel, plain, keep_pyside)
        check_qt_links(plain)
        xz_copy(plain, built)
        print(f"  kept {kept} files: {plain.stat().st_size / MiB:.0f} MiB, "
              f"{packed.stat().st_size / MiB:.1f} MiB compressed")
    return packed, plain, {"version": version, "original": wheel.name,
                           "original_sha256": carry.sha256_file(wheel),
                           "modules": list(PYSIDE_MODULES), "qt_libs": list(QT_LIBS),
                           "platforms": list(QT_PLATFORMS)}


def rewrite_wheel(src: Path, out: Path, keep) -> int:
    """A wheel of `src`'s kept files, stored, with a RECORD that lists exactly them."""
    record_lines, kept = [], 0
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
        record = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
        for info in zin.infolist():
            if info.is_dir() or not keep(info.filename):
                continue
            data = zin.read(info)
            zout.writestr(info, data, compress_type=zipfile.ZIP_STORED)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record_lines.append(f"{info.filename},sha256={digest.decode()},{len(data)}")
            kept += 1
        record_lines.append(f"{record},,")
        zout.writestr(record, "\n".join(record_lines) + "\n")
    return kept


def check_qt_links(wheel: Path) -> None:
    """Every Qt, ICU and PySide library a kept binary links is kept too (`ldd` here)."""
    with tempfile.TemporaryDirectory() as tmp:
        zipfile.ZipFile(wheel).extractall(tmp)
        shiboken = Path(md.distribution("shiboken6").locate_file("shiboken6"))
        env = {"LD_LIBRARY_PATH": f"{tmp}/PySide6/Qt/lib:{tmp}/PySide6:{shiboken}",
               "PATH": "/usr/bin:/bin"}
        for so in Path(tmp).rglob("*.so*"):
            out = subprocess.run(["ldd", str(so)], capture_output=True, text=True, env=env).stdout
            lost = [line.split()[0] for line in out.splitlines() if "not found" in line
                    and any(k in line for k in ("Qt6", "icu", "pyside", "shiboken"))]
            if lost:
                raise SystemExit(f"trimmed PySide6: {so.name} links {', '.join(lost)}, which "
                                 "was left out; add it to QT_LIBS in pack.py")


# --- system libraries, as Debian packages --------------------------------------------------


def download_debs(folder: Path) -> tuple[list[Path], dict[str, str]]:
    """The packages of DEBS (this machine's Debian release) and which sonames each holds."""
    folder.mkdir(parents=True, exist_ok=True)
    missing = [d for d in DEBS if not list(folder.glob(f"{d}_*.deb"))]
    if missing:
        done = subprocess.run(["apt-get", "download", *missing], cwd=folder,
                              capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"apt-get download failed: {done.stderr.strip()[-300:]} "
                             "(try apt-get update first)")
    debs = sorted(p for d in DEBS for p in folder.glob(f"{d}_*.deb"))
    sonames = {so: deb.name for deb in debs for so in carry.deb_sonames(deb)}
    return debs, sonames


# --- the model ------------------------------------------------------------------------------


def model_file(name: str) -> Path:
    from specviz.engines.models import registry, store

    spec = registry.get_spec(name)
    if not store.is_present(spec):
        raise SystemExit(f"{name} is not in the model cache: specviz models pull {name}")
    return store.model_path(spec)


# --- the plan -------------------------------------------------------------------------------


def print_plan(manifest: Manifest, tree: int, capacity: int) -> None:
    print(f"\nworking tree {tree / MiB:.1f} MiB; each call carries at most "
          f"{capacity / MiB:.1f} MiB (64 MiB less the tree and a {carry.MARGIN // MiB} MiB "
          "margin)")
    for call in manifest.calls:
        n = call["call"]
        parts = [(i, p) for i in manifest.items for p in i.parts if p.call == n]
        total = call["bytes"] + tree
        print(f"call {n}: carry [\"{call['folder']}\"]  {call['bytes'] / MiB:5.1f} MiB "
              f"+ tree = {total / MiB:.1f} MiB of 64")
        for item, part in parts:
            whole = "" if len(item.parts) == 1 else f" ({item.parts.index(part) + 1}/" \
                                                   f"{len(item.parts)})"
            print(f"    {part.size / MiB:6.2f} MiB  {item.kind:8} {item.name}{whole}")
    stream = io.StringIO()
    for item in manifest.items:
        if item.codec:
            stream.write(f"  {item.final_name}: {item.plain_size / MiB:.1f} MiB unpacked\n")
    print(f"\n{len(manifest.calls)} call(s); manifest in each folder.\n{stream.getvalue()}",
          end="")


def check(out: Path) -> int:
    """The packed calls against the working tree now: 0 when every call fits."""
    manifests = sorted(out.glob(f"call[0-9]*/{carry.MANIFEST}"))
    if not manifests:
        print(f"nothing packed in {out}: run pack.py first")
        return 1
    manifest = Manifest.read(manifests[0])
    tree = carry.tree_size(REPO)
    worst = 0
    for call in manifest.calls:
        folder = REPO / call["folder"]
        size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
        worst = max(worst, size)
        verdict = "fits" if size + tree <= carry.CALL_BUDGET else "OVER 64 MiB"
        print(f"call {call['call']}: {size / MiB:.1f} MiB + tree {tree / MiB:.1f} MiB = "
              f"{(size + tree) / MiB:.1f} MiB: {verdict}")
    return 0 if worst + tree <= carry.CALL_BUDGET else 1


if __name__ == "__main__":
    main()
