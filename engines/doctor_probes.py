"""The backend probes `specviz doctor` ran, kept until what they tried changes.

A probe loads smollm2-135m in a child process and times a few forwards (probe.py): with both
backends, `specviz doctor` took 21 s on a quiet 2-core machine and 72 s beside other work.
What a probe finds is the backend's build's on this CPU, so its result is kept under a key of
what it tried: specviz's version, the backend's build (llama-cpp-python's version and its
library file's size and mtime; torch's and transformers' versions and torch's library file),
the CPU and the AMX setting (probe.current_key) and the model file. While the key matches
doctor shows the kept result and when it was found; `specviz doctor --refresh` probes again.

The file lives in the specviz cache (SPECVIZ_HOME moves it). A file that cannot be used (not
JSON, too large, not a regular file, an entry of the wrong shape) is said in one line and
replaced by what this doctor finds.
"""

from __future__ import annotations

import stat
import time
from dataclasses import asdict
from pathlib import Path

from .backends import probe
from .bounded_json import loads
from .machine.json_file import write_dict

FILE_NAME = "doctor-probes.json"
MAX_BYTES = 1 << 20  # two probes' results take about 1 KB
# Only a probe that worked is kept: a crash is what the user is fixing, and its line says
# `specviz doctor` probes again; an error or a kill is the file's or the moment's.
KEPT = ("ok",)
TEXT_FIELDS = ("backend", "device", "outcome", "model", "stage", "detail", "build")
NUMBER_FIELDS = ("load_s", "one_ms", "batch_ms", "max_logit_diff")


def cache_path() -> Path:
    from .models import home_dir

    return home_dir("cache") / FILE_NAME


def probe_key(backend: str, model_path: str) -> dict:
    """What a kept probe of `backend` on `model_path` must have been run with to serve now."""
    from .. import __version__

    return {"specviz": __version__, "build": probe.build_id(backend),
            "machine": probe.current_key(backend, None), "model": _file_stamp(model_path)}


def _file_stamp(path: str) -> str:
    try:
        info = Path(path).stat()
    except OSError:
        return path
    return f"{path} ({info.st_size}:{int(info.st_mtime)})"


def read(path: Path) -> tuple[dict[str, dict], str | None]:
    """The kept entries by backend, and why the file cannot be used (None: it can, or it
    is not there). Only regular files of at most MAX_BYTES are read."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, exc.strerror or str(exc)
    if not stat.S_ISREG(info.st_mode):
        return {}, "not a regular file"
    if info.st_size > MAX_BYTES:
        return {}, f"{info.st_size} bytes, more than {MAX_BYTES} a probe file holds"
    try:
        with path.open("rb") as f:
            data = loads(f.read(MAX_BYTES + 1))
    except (OSError, ValueError) as exc:  # not UTF-8, not JSON, nested too deep
        return {}, f"not JSON ({str(exc).splitlines()[0][:80]})"
    if not isinstance(data, dict):
        return {}, "not a JSON object"
    entries = {name: entry for name, entry in data.items() if _entry_ok(name, entry)}
    if len(entries) != len(data):
        return entries, "an entry of the wrong shape"
    return entries, None


def _entry_ok(backend: str, entry) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("key"), dict):
        return False
    at, result = entry.get("at"), entry.get("result")
    return (_number(at) and isinstance(result, dict) and result.get("backend") == backend
            and result.get("outcome") in KEPT
            and all(isinstance(result.get(k, ""), str) for k in TEXT_FIELDS)
            and all(result.get(k) is None or _number(result[k]) for k in NUMBER_FIELDS)
            and result.get("batch_agrees") in (None, True, False))


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def entry(key: dict, result: probe.ProbeResult, at: float | None = None) -> dict:
    return {"key": key, "at": round(time.time() if at is None else at, 1),
            "result": asdict(result)}


def kept_result(found: dict | None, key: dict) -> dict | None:
    """The kept result as doctor's facts hold a probe, with when it was found (`kept_at`);
    None where nothing is kept under `key`."""
    if not found or found["key"] != key:
        return None
    return {**asdict(probe.from_dict(found["result"])), "kept_at": found["at"]}


def write(path: Path, entries: dict[str, dict]) -> str | None:
    """Replace the file with `entries` in one step; why it could not be (None: written)."""
    try:
        write_dict(path, entries)
    except OSError as exc:
        return f"cannot keep the probes in {path} ({exc.strerror or exc}): the next doctor " \
               "probes again"
    return None


def when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))
