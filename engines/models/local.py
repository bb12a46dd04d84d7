"""Models already on this machine: the Hugging Face cache, LM Studio's models folder, llama.cpp's
cache, Ollama's store and folders the person names. Found where they lie; nothing is copied.

Every place is read from facts passed in (`Places`), so that tests lay out each tool's folders
in a temporary directory; `Places.here()` reads this machine's.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..bounded_json import loads
from ..errors import ModelError
from . import hub, hub_names

HF_CACHE = "Hugging Face cache"
LM_STUDIO = "LM Studio"
LLAMA_CPP = "llama.cpp cache"
OLLAMA = "Ollama"
FOLDER = "folder"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
MAX_DEPTH = 4  # how deep a named folder is searched


@dataclass(frozen=True)
class LocalModel:
    name: str  # what the person sees (a Hub name where the tool keeps one)
    format: str  # "gguf" or "transformers"
    size: int
    quant: str | None
    where: str  # which tool's store
    path: Path  # what `--target` takes


@dataclass(frozen=True)
class Places:
    hf_cache: Path
    lm_studio: tuple[Path, ...]
    llama_cpp: Path
    ollama: tuple[Path, ...]
    folders: tuple[Path, ...] = field(default=())

    @classmethod
    def here(cls, folders: Iterable[str | Path] = (), env=os.environ,
             home: Path | None = None) -> Places:
        home = home or Path.home()
        lm = [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]
        lm += _lm_studio_setting(home / ".lmstudio" / "settings.json")
        ollama = ([Path(env["OLLAMA_MODELS"])] if env.get("OLLAMA_MODELS") else
                  [home / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")])
        return cls(hub.cache_root(), tuple(lm), _llama_cache(env, home), tuple(ollama),
                   tuple(Path(f).expanduser() for f in folders))


def _lm_studio_setting(settings: Path) -> list[Path]:
    """A downloads folder moved in LM Studio's settings."""
    try:
        folder = loads(settings.read_text(encoding="utf-8")).get("downloadsFolder")
    except (OSError, ValueError, AttributeError):
        return []
    return [Path(folder).expanduser()] if isinstance(folder, str) and folder else []


def _llama_cache(env, home: Path) -> Path:
    if env.get("LLAMA_CACHE"):
        return Path(env["LLAMA_CACHE"]).expanduser()
    if sys.platform == "darwin":
        return home / "Library" / "Caches" / "llama.cpp"
    if sys.platform == "win32":
        return Path(env.get("LOCALAPPDATA", home / "AppData" / "Local")) / "llama.cpp"
    return Path(env.get("XDG_CACHE_HOME") or home / ".cache") / "llama.cpp"


def find(places: Places) -> list[LocalModel]:
    """Every model found, grouped by where, each path once."""
    found: dict[Path, LocalModel] = {}
    for model in [*hf_cache(places.hf_cache), *_each(places.lm_studio, lm_studio),
                  *llama_cpp(places.llama_cpp), *_each(places.ollama, ollama),
                  *_each(places.folders, folder)]:
        found.setdefault(model.path, model)
    return list(found.values())


def _each(folders: Iterable[Path], scan) -> Iterator[LocalModel]:
    seen = set()
    for path in folders:
        key = os.path.realpath(path)
        if key not in seen and path.is_dir():
            seen.add(key)
            yield from scan(path)


def hf_cache(root: Path) -> Iterator[LocalModel]:
    """huggingface_hub's own scan of its cache: each model repository's newest revision."""
    from huggingface_hub import scan_cache_dir

    if not root.is_dir():
        return
    try:
        info = scan_cache_dir(root)
    except Exception:  # a cache huggingface_hub cannot read holds nothing usable
        return
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model" or not repo.revisions:
            continue
        revision = max(repo.revisions, key=lambda r: ("main" in r.refs, r.last_modified))
        yield from _snapshot_models(repo.repo_id, Path(revision.snapshot_path))


def _snapshot_models(repo: str, snapshot: Path) -> Iterator[LocalModel]:
    name = hub_names.HubName(repo)
    files = sorted(f.relative_to(snapshot).as_posix() for f in snapshot.rglob("*")
                   if f.is_file())
    if "config.json" in files and hub.cached(name) == snapshot:
        wanted = hub_names.transformers_files(files)
        yield LocalModel(repo, "transformers", _size(snapshot / f for f in wanted), None,
                         HF_CACHE, snapshot)
    for first in _gguf_firsts(files):
        parts = _parts(first, files)
        yield LocalModel(f"{repo}/{first}", "gguf", _size(snapshot / p for p in parts),
                         hub_names.quant_of(first), HF_CACHE, snapshot / first)


def lm_studio(root: Path) -> Iterator[LocalModel]:
    """`<publisher>/<repository>/<file>.gguf`: named as on the Hub, which it mirrors."""
    files = _relative_ggufs(root, depth=3)
    for first in _gguf_firsts(files):
        parts = _parts(first, files)
        yield LocalModel(first, "gguf", _size(root / p for p in parts),
                         hub_names.quant_of(first), LM_STUDIO, root / first)


def llama_cpp(root: Path) -> Iterator[LocalModel]:
    """llama.cpp's -hf downloads: `<org>_<repo>_<file>.gguf`, flat."""
    if not root.is_dir():
        return
    files = sorted(p.name for p in root.glob("*.gguf"))
    for first in _gguf_firsts(files):
        parts = _parts(first, files)
        yield LocalModel(first, "gguf", _size(root / p for p in parts),
                         hub_names.quant_of(first), LLAMA_CPP, root / first)


def ollama(root: Path) -> Iterator[LocalModel]:
    """Ollama's manifests name the GGUF blob of each `model:tag`."""
    manifests = root / "manifests"
    if not manifests.is_dir():
        return
    for manifest in sorted(p for p in manifests.rglob("*") if p.is_file()):
        model = _ollama_model(root, manifest.relative_to(manifests))
        if model:
            yield model


def _ollama_model(root: Path, relative: Path) -> LocalModel | None:
    try:
        manifest = loads((root / "manifests" / relative).read_text(encoding="utf-8"))
        layer = next(x for x in manifest["layers"] if x.get("mediaType") == OLLAMA_MODEL_LAYER)
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return None
    blob = root / "blobs" / str(layer.get("digest", "")).replace(":", "-")
    if not blob.is_file():
        return None
    *where, model, tag = relative.parts
    name = f"{model}:{tag}" if where[-2:] == ["registry.ollama.ai", "library"] else \
        "/".join([*where, model]) + f":{tag}"
    return LocalModel(name, "gguf", blob.stat().st_size, _ollama_quant(root, manifest),
                      OLLAMA, blob)


def _ollama_quant(root: Path, manifest: dict) -> str | None:
    """The config blob says the file type (`Q4_K_M`)."""
    digest = str((manifest.get("config") or {}).get("digest", ""))
    try:
        config = loads((root / "blobs" / digest.replace(":", "-")).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    quant = config.get("file_type") if isinstance(config, dict) else None
    return str(quant).upper() if quant else None


def folder(root: Path) -> Iterator[LocalModel]:
    """A folder the person added: its GGUFs and its transformers model folders."""
    files = _relative_ggufs(root, depth=MAX_DEPTH)
    for first in _gguf_firsts(files):
        parts = _parts(first, files)
        yield LocalModel(first, "gguf", _size(root / p for p in parts),
                         hub_names.quant_of(first), FOLDER, root / first)
    for config in sorted(_walk(root, MAX_DEPTH, lambda p: p.name == "config.json")):
        model = config.parent
        weights = [p for p in model.iterdir() if p.name.endswith(hub_names.WEIGHTS)]
        if weights and not _is_heads(config):
            name = model.relative_to(root).as_posix() if model != root else model.name
            yield LocalModel(name, "transformers", _size(weights), None, FOLDER, model)


def _is_heads(config: Path) -> bool:
    """Heads specviz trained (beside a model, saying so in their config) are not models."""
    if config.parent.suffix in (".eagle", ".medusa"):
        return True
    try:
        return "specviz" in loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False


def _relative_ggufs(root: Path, depth: int) -> list[str]:
    return sorted(p.relative_to(root).as_posix()
                  for p in _walk(root, depth, lambda p: p.name.lower().endswith(".gguf")))


def _walk(root: Path, depth: int, wanted) -> Iterator[Path]:
    base = len(root.parts)
    for current, folders, names in os.walk(root):
        if len(Path(current).parts) - base >= depth:
            folders[:] = []
        folders[:] = [f for f in folders if not f.startswith(".")]
        for filename in names:
            path = Path(current, filename)
            if wanted(path) and path.exists():
                yield path


def _gguf_firsts(files: list[str]) -> list[str]:
    """The GGUFs that are models (no projectors), a split counted by its first part."""
    return [f for f in files if hub_names.is_gguf(f)
            and hub_names.split_parts_index(f) in (None, 1)]


def _parts(first: str, files: list[str]) -> list[str]:
    try:
        return hub_names.split_parts(first, files)
    except ModelError:  # a split with a part missing: its size is what is here
        return [first]


def _size(paths: Iterable[Path]) -> int:
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size
        except OSError:
            pass
    return total
