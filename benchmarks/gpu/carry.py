"""What travels to the GPU machine in parts, and how it is put back together there.

The device tool sends the working tree and the carry folders named in a call, at most 64 MiB
together, to a machine with no network. The model (98 MB) alone is over that, so every file
that travels is one stream cut into parts, each call filled in turn (`layout`). The manifest
records each whole file's SHA-256 and size, and each part's, so the machine can say which
part is missing or damaged before anything runs on a broken file.

Standard library only: pack.py uses it here, gpu_run.py there (Python 3.12, no network) and
tests/test_gpu_prep.py in CI.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import tarfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

MiB = 1 << 20
CALL_BUDGET = 64 * MiB  # the tool's limit: working tree + carry folders, per call
# Kept free in every call: the tree grows between packing and the GPU session (results,
# docs), and a call over the limit is refused outright.
MARGIN = 2 * MiB
PART_MAX = 60 * MiB  # no part larger than this, whatever the room in a call
MANIFEST = "manifest.json"
HASH_CHUNK = 1 << 20

# The packages the device image already holds (/work/.library/device/KINDS.md, "Python
# packages already there", read 2026-11-17). Anything else a run imports must be carried.
DEVICE_PACKAGES = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy
coverage cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython
diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools formulaic
frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib
jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator
lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx
ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand
nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13
nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging
pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache
protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks
pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece
sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels
sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile
tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics
torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3
uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())


def canonical(name: str) -> str:
    """A distribution's name as PyPI compares them (PEP 503)."""
    return "-".join(name.replace("_", "-").replace(".", "-").lower().split("-"))


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@dataclass
class Part:
    name: str  # file name in the carry folder: <item>.partNN
    size: int
    sha256: str
    call: int  # 1-based: which call's folder holds it


@dataclass
class Item:
    """One whole file that travels, as it is rebuilt there."""

    name: str  # the assembled file's name
    kind: str  # model | sdist | wheel | pyside | deb | prebuilt | heads
    size: int  # of what travels (after `codec`)
    sha256: str
    codec: str | None = None  # "xz": what travels is compressed; unpacked after assembly
    plain_size: int | None = None  # after unpacking
    plain_sha256: str | None = None
    note: str = ""
    parts: list[Part] = field(default_factory=list)

    @property
    def final_name(self) -> str:
        """The file's name once unpacked (`.xz` dropped)."""
        return self.name.removesuffix(".xz") if self.codec == "xz" else self.name


@dataclass
class Manifest:
    items: list[Item]
    calls: list[dict]  # per call: folder, bytes carried, tree bytes assumed
    made: dict = field(default_factory=dict)  # what made it: versions, trims, where from

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        raw = json.loads(text)
        items = [Item(**{**i, "parts": [Part(**p) for p in i["parts"]]}) for i in raw["items"]]
        return cls(items, raw["calls"], raw.get("made", {}))

    @classmethod
    def read(cls, path: Path) -> Manifest:
        return cls.from_json(path.read_text(encoding="utf-8"))


# --- Planning: which bytes go in which call -------------------------------------------------


def call_capacity(tree_bytes: int, budget: int = CALL_BUDGET, margin: int = MARGIN) -> int:
    """Bytes of parts one call can carry beside the working tree."""
    room = budget - margin - tree_bytes
    if room <= 0:
        raise ValueError(f"the working tree alone ({tree_bytes / MiB:.1f} MiB) leaves no room "
                         f"under {budget / MiB:.0f} MiB less a {margin / MiB:.0f} MiB margin")
    return room


def layout(sizes: list[tuple[str, int]], capacity: int,
           part_max: int = PART_MAX) -> list[list[tuple[str, int, int]]]:
    """Cut the files, in the order given (what is needed first, first), into calls of at most
    `capacity` bytes: per call a list of (name, offset, length). A file that does not fit in
    the room left in a call is split there, so no call goes out half empty."""
    calls: list[list[tuple[str, int, int]]] = [[]]
    room = capacity
    for name, size in sizes:
        offset = 0
        while offset < size:
            if room == 0:
                calls.append([])
                room = capacity
            length = min(size - offset, room, part_max)
            calls[-1].append((name, offset, length))
            offset += length
            room -= length
    return [c for c in calls if c]


def tree_size(repo: Path) -> int:
    """Bytes of the working tree the tool sends: tracked files and untracked ones git does not
    ignore (the carry folders are ignored and counted apart)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo, capture_output=True, check=True).stdout.split(b"\0")
    total = 0
    for name in filter(None, listed):
        path = repo / os.fsdecode(name)
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    shared = repo / "shared"  # the tool sends a shared/ folder too, where a checkout has one
    if shared.is_dir():
        total += sum(p.stat().st_size for p in shared.rglob("*") if p.is_file())
    return total


# --- Cutting here ---------------------------------------------------------------------------


def safe_name(name: str) -> str:
    """A file name of letters, digits, '.', '_' and '-' only (Debian's '%3a' and '+' are
    replaced): what the device tool is sure to carry and bring back."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def cut(files: dict[str, Path], plan: list[list[tuple[str, int, int]]], out: Path,
        items: dict[str, Item]) -> None:
    """Write each call's parts into out/call<N>/ and record them in `items`."""
    counters: dict[str, int] = {}
    for number, call in enumerate(plan, start=1):
        folder = out / f"call{number}"
        folder.mkdir(parents=True, exist_ok=True)
        for name, offset, length in call:
            index = counters.get(name, 0)
            counters[name] = index + 1
            part_name = f"{safe_name(name)}.part{index:02d}"
            digest = hashlib.sha256()
            with open(files[name], "rb") as src, open(folder / part_name, "wb") as dst:
                src.seek(offset)
                left = length
                while left:
                    chunk = src.read(min(HASH_CHUNK, left))
                    if not chunk:
                        raise OSError(f"{files[name]} is shorter than planned")
                    dst.write(chunk)
                    digest.update(chunk)
                    left -= len(chunk)
            items[name].parts.append(Part(part_name, length, digest.hexdigest(), number))


# --- Putting back together there ------------------------------------------------------------


def stage_parts(carried: list[Path], staging: Path) -> list[str]:
    """Copy the parts of the carry folders present into `staging`, each checked against the
    manifest; lines saying what was staged or refused. Parts already staged are skipped."""
    staging.mkdir(parents=True, exist_ok=True)
    lines = []
    for folder in carried:
        manifest_path = folder / MANIFEST
        if not manifest_path.is_file():
            lines.append(f"SKIP {folder}: no {MANIFEST}")
            continue
        shutil.copyfile(manifest_path, staging / MANIFEST)
        expected = {p.name: p for i in Manifest.read(manifest_path).items for p in i.parts}
        for path in sorted(folder.glob("*.part[0-9][0-9]")):
            part = expected.get(path.name)
            target = staging / path.name
            if part is None:
                lines.append(f"SKIP {path}: not in the manifest (packed by another pack.py run?)")
            elif target.is_file() and sha256_file(target) == part.sha256:
                lines.append(f"ok   {path.name} (already staged)")
            elif sha256_file(path) != part.sha256:
                lines.append(f"BAD  {path}: SHA-256 differs from the manifest; re-run pack.py "
                             f"and carry call {part.call} again")
            else:
                shutil.copyfile(path, target)
                lines.append(f"ok   {path.name} ({part.size / MiB:.1f} MiB, call {part.call})")
    return lines


@dataclass
class Assembled:
    item: Item
    path: Path | None  # the finished file, None when it could not be made
    line: str  # one line: what happened, or what is missing or wrong


def assemble(item: Item, staging: Path, dest: Path) -> Assembled:
    """Concatenate an item's staged parts into dest/<final name>, check SHA-256 (and unpack
    an xz item). Idempotent: a finished file that still checks out is kept."""
    final = dest / item.final_name
    want = item.plain_sha256 if item.codec else item.sha256
    if final.is_file() and final.stat().st_size == (item.plain_size if item.codec else item.size):
        if sha256_file(final) == want:
            return Assembled(item, final, f"ok      {item.final_name} (already assembled)")
    missing = [p for p in item.parts if not (staging / p.name).is_file()]
    if missing:
        calls = sorted({p.call for p in missing})
        names = ", ".join(p.name.rsplit(".", 1)[1] for p in missing)
        return Assembled(item, None, f"MISSING {item.name}: {names} not staged; they come with "
                         + ", ".join(f"call{c}" for c in calls))
    dest.mkdir(parents=True, exist_ok=True)
    joined = dest / (item.name + ".joining")
    with open(joined, "wb") as out:
        for part in item.parts:
            with open(staging / part.name, "rb") as src:
                shutil.copyfileobj(src, out, HASH_CHUNK)
    got = sha256_file(joined)
    if got != item.sha256:
        joined.unlink()
        bad = [p.name for p in item.parts if sha256_file(staging / p.name) != p.sha256]
        which = f"damaged part(s): {', '.join(bad)}" if bad else "parts check out: wrong manifest?"
        return Assembled(item, None, f"BAD     {item.name}: SHA-256 {got[:12]}… is not the "
                         f"manifest's {item.sha256[:12]}…; {which}")
    if item.codec == "xz":
        unpacked = dest / (item.final_name + ".unpacking")
        with lzma.open(joined) as src, open(unpacked, "wb") as out:
            shutil.copyfileobj(src, out, HASH_CHUNK)
        joined.unlink()
        if sha256_file(unpacked) != item.plain_sha256:
            unpacked.unlink()
            return Assembled(item, None, f"BAD     {item.final_name}: unpacked file's SHA-256 "
                             "is not the manifest's")
        joined = unpacked
    joined.replace(final)
    return Assembled(item, final, f"ok      {item.final_name} ({final.stat().st_size / MiB:.1f}"
                     f" MiB, {len(item.parts)} part(s), SHA-256 checked)")


def split_for_return(path: Path, out: Path, part_max: int = 15 * MiB) -> list[Path]:
    """Cut a file built there (the CUDA wheel) into parts small enough to come back through
    $OUT (16 MiB a file), with <name>.sha256.json describing them for `join_returned`."""
    out.mkdir(parents=True, exist_ok=True)
    parts = []
    with open(path, "rb") as src:
        index = 0
        while chunk := src.read(part_max):
            part = out / f"{path.name}.part{index:02d}"
            part.write_bytes(chunk)
            parts.append(part)
            index += 1
    record = {"name": path.name, "size": path.stat().st_size, "sha256": sha256_file(path),
              "parts": [{"name": p.name, "sha256": sha256_file(p)} for p in parts]}
    (out / f"{path.name}.sha256.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    return parts


def join_returned(record_path: Path, dest: Path) -> Path:
    """Rebuild a file that came back in parts (beside its .sha256.json) and check it."""
    record = json.loads(record_path.read_text(encoding="utf-8"))
    target = dest / record["name"]
    with open(target, "wb") as out:
        for part in record["parts"]:
            out.write((record_path.parent / part["name"]).read_bytes())
    if sha256_file(target) != record["sha256"]:
        target.unlink()
        raise ValueError(f"{record['name']}: SHA-256 of the joined parts is not the recorded one")
    return target


# --- Building llama-cpp-python from its trimmed sdist ------------------------------------
# The same steps here (cuda_wheel.py, with the CUDA toolkit from PyPI) and there (gpu_run.py,
# with the device's nvcc): unpack once, then `pip wheel` with the CMake folder kept, so a
# build cut short goes on from where it stopped.


def unpack_sdist(sdist: Path, dest: Path) -> Path:
    """The sdist's source folder under dest, unpacked the first time only."""
    src = dest / sdist.name.removesuffix("-src.tar.xz")
    marker = dest / "src.unpacked"
    if not (marker.is_file() and src.is_dir()):
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as tar:
            tar.extractall(dest, filter="data")
        marker.write_text(sdist.name)
    return src


def pip_wheel_command(python: list[str], src: Path, wheelhouse: Path, cmake_dir: Path,
                      offline: bool) -> list[str]:
    """offline: the machine has no network, so the installed scikit-build-core builds it (no
    isolated build environment) and no index is asked."""
    cmd = [*python, "-m", "pip", "wheel", "-v", "--no-deps", "--disable-pip-version-check",
           "-w", str(wheelhouse), f"--config-settings=build-dir={cmake_dir}"]
    if offline:
        cmd += ["--no-build-isolation", "--no-index"]
    return [*cmd, str(src)]


# --- Debian packages, read without dpkg ---------------------------------------------------
# The shot needs a few system libraries (EGL, fontconfig, xkbcommon...) the device image may
# lack. They travel as Debian packages and are unpacked into a folder of their own, never into
# /, and only those whose libraries are missing there.


def _ar_members(path: Path) -> dict[str, bytes]:
    """The members of an `ar` archive (a .deb is one)."""
    data = path.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise ValueError(f"{path.name} is not a Debian package (no ar header)")
    members, pos = {}, 8
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        members[name] = data[pos + 60:pos + 60 + size]
        pos += 60 + size + (size % 2)  # members are padded to an even offset
    return members


def deb_data(path: Path):
    """The package's data.tar as an open tarfile (xz or gzip; zstd is refused by name)."""
    import io
    import tarfile

    for name, blob in _ar_members(path).items():
        if name.startswith("data.tar"):
            if name.endswith(".zst"):
                raise ValueError(f"{path.name}: data.tar.zst needs zstd, which Python lacks")
            return tarfile.open(fileobj=io.BytesIO(blob), mode="r:*")
    raise ValueError(f"{path.name} has no data.tar")


def deb_sonames(path: Path) -> list[str]:
    """Shared-library names (lib*.so.N) a package puts in the multiarch library folder."""
    with deb_data(path) as tar:
        names = [Path(m.name).name for m in tar.getmembers()
                 if "/lib/x86_64-linux-gnu/" in m.name and ".so." in Path(m.name).name]
    return sorted(set(names))


def unpack_deb(path: Path, dest: Path) -> None:
    """Unpack a package's files under `dest` (links that would point outside it are left
    out: they are configuration links, not libraries)."""
    import tarfile

    def inside(member, where):
        try:
            return tarfile.data_filter(member, where)
        except tarfile.FilterError:
            return None

    dest.mkdir(parents=True, exist_ok=True)
    with deb_data(path) as tar:
        tar.extractall(dest, filter=inside)
