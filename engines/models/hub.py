"""Models named by their Hugging Face Hub repository: looked up, fetched into the Hub's own cache
with huggingface_hub's download functions, and found there again without the network.

Fetching is split in two, as for registry models: `pull` (network, progress, cancellable) runs
where a person waits, and `cached` (no network) is what the engine calls to open the model. The
downloads run in a child process so that Cancel can kill them; the Hub's cache keeps what a
cancelled download had received (`.incomplete`) and resumes from it next time.

The token (HF_TOKEN, or the one `hf auth login` stored) is huggingface_hub's to find and send:
specviz never reads, prints or records it.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..bounded_json import loads
from ..errors import ModelError
from . import hub_names
from .hub_names import HubName

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_ERROR_MARK = "specviz-hub-error: "
_OFFLINE_CLASSES = {"TransportError", "OfflineModeIsEnabled", "ConnectionError", "TimeoutError"}
DEFAULT_ENDPOINT = "https://huggingface.co"


class HubOffline(ModelError):
    """The Hub could not be reached and the model is not in the cache."""


@dataclass(frozen=True)
class HubModel:
    """What a Hub name resolves to at one commit: its kind and the files to fetch."""

    name: HubName
    commit: str
    kind: str  # "gguf" or "transformers"
    files: tuple[str, ...]
    sizes: dict[str, int] = field(default_factory=dict, compare=False)

    @property
    def total(self) -> int:
        return sum(self.sizes.get(f, 0) for f in self.files)


# --- where -------------------------------------------------------------------------------------


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")


def cache_root() -> Path:
    """The Hub's cache folder, read from the environment as huggingface_hub reads it (at each
    call, so that a changed HF_HOME or HF_HUB_CACHE counts)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    home = os.environ.get("HF_HOME") or os.path.join(xdg, "huggingface")
    return Path(home).expanduser() / "hub"


def offline_forced() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def repo_folder(repo: str) -> Path:
    return cache_root() / ("models--" + repo.replace("/", "--"))


# --- the cache, without the network -------------------------------------------------------------


def cached(name: HubName) -> Path | None:
    """The model's path in the Hub cache (a snapshot folder, or a GGUF's first part), or None
    when the cache does not hold all of it."""
    snapshot = _snapshot(name)
    if snapshot is None:
        return None
    files = _files_in(snapshot)
    if name.wants_gguf or "config.json" not in files:
        try:
            parts = hub_names.pick_gguf(name, files)
        except ModelError:
            return None
        return snapshot / parts[0]
    wanted = hub_names.transformers_files(files)
    if not any(f.endswith(hub_names.WEIGHTS + hub_names.PICKLED_WEIGHTS) for f in wanted):
        return None
    return snapshot if _shards_present(snapshot) else None


def _snapshot(name: HubName) -> Path | None:
    folder = repo_folder(name.repo)
    revision = name.revision or "main"
    commit = revision if _COMMIT.match(revision) else _read_ref(folder, revision)
    if commit is None:
        return None
    snapshot = folder / "snapshots" / commit
    return snapshot if snapshot.is_dir() else None


def _read_ref(folder: Path, revision: str) -> str | None:
    try:
        return (folder / "refs" / revision).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _files_in(snapshot: Path) -> list[str]:
    """Files present in a snapshot (links to blobs that exist), as repository paths."""
    found = []
    for root, _, names in os.walk(snapshot):
        for filename in names:
            path = Path(root, filename)
            if path.exists():  # a dangling link is a file that is gone
                found.append(path.relative_to(snapshot).as_posix())
    return sorted(found)


def _shards_present(snapshot: Path) -> bool:
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = snapshot / index_name
        if index.exists():
            try:
                shards = set(loads(index.read_text(encoding="utf-8"))["weight_map"].values())
            except (OSError, ValueError, KeyError, AttributeError):
                return False
            return all((snapshot / shard).exists() for shard in shards)
    return True


def cached_summary(repo: str) -> str:
    """What the cache holds of a repository, for the offline message."""
    snapshots = repo_folder(repo) / "snapshots"
    files = sorted({f for s in (snapshots.iterdir() if snapshots.is_dir() else [])
                    for f in _files_in(s)})
    if not files:
        return f"nothing of {repo} is cached"
    ggufs = [f for f in files if hub_names.is_gguf(f)]
    if ggufs:
        return f"cached of {repo}: {', '.join(ggufs[:6])}"
    return f"cached of {repo}: {', '.join(files[:6])}" + (" ..." if len(files) > 6 else "")


def sha256_of_cached(path: Path) -> str | None:
    """A cached LFS file's SHA-256: the Hub cache names its blob by it (no hashing needed)."""
    try:
        blob = Path(os.readlink(path)).name if path.is_symlink() else None
    except OSError:
        return None
    return blob if blob and re.fullmatch(r"[0-9a-f]{64}", blob) else None


def identify(name: HubName, path: Path) -> dict:
    """What a trace records of a Hub model: repo, revision, files and their SHA-256 (never a
    token)."""
    snapshot = path if path.is_dir() else _snapshot(name) or path.parent
    present = _files_in(snapshot)
    if path.is_file():
        files = hub_names.split_parts(path.relative_to(snapshot).as_posix(), present)
    else:
        files = hub_names.transformers_files(present)
    hashes = {f: sha256_of_cached(snapshot / f) for f in files}
    size = sum((snapshot / f).stat().st_size for f in files if (snapshot / f).exists())
    main = hashes[files[0]] if path.is_file() else None
    return {"name": str(name), "path": str(path), "size": size, "sha256": main,
            "hub": {"repo": name.repo, "revision": snapshot.name, "files": hashes}}


# --- the network -------------------------------------------------------------------------------


def lookup(name: HubName) -> HubModel:
    """Ask the Hub what `name` means: the commit, the kind, the files and their sizes."""
    from huggingface_hub import HfApi

    if offline_forced():
        raise HubOffline(_offline_line(name, "HF_HUB_OFFLINE is set"))
    try:
        info = HfApi(endpoint=endpoint()).model_info(
            name.repo, revision=name.revision, files_metadata=True)
    except Exception as error:  # huggingface_hub's errors, mapped to one line each below
        raise _as_model_error(error, name) from None
    sizes = {s.rfilename: int(s.size or 0) for s in info.siblings or []}
    return _plan(name, info.sha or "", sizes)


def is_unreachable(repo: str) -> bool:
    """One quick question to the Hub (no retries): cannot it be reached at all? huggingface_hub's
    downloads retry for about 20 s first, too long a wait before another source is tried."""
    from huggingface_hub import HfApi

    if offline_forced():
        return True
    try:
        HfApi(endpoint=endpoint()).model_info(repo, timeout=10)
    except Exception as error:  # only whether it was reached matters here
        return bool({c.__name__ for c in type(error).__mro__} & _OFFLINE_CLASSES)
    return False


def _plan(name: HubName, commit: str, sizes: dict[str, int]) -> HubModel:
    files = sorted(sizes)
    if name.wants_gguf:
        return HubModel(name, commit, "gguf", tuple(hub_names.pick_gguf(name, files)), sizes)
    if "config.json" in files:
        wanted = hub_names.transformers_files(files)
        if not any(f.endswith(hub_names.WEIGHTS + hub_names.PICKLED_WEIGHTS) for f in wanted):
            raise ModelError(f"{name.repo} has a config.json but no weights (.safetensors)")
        return HubModel(name, commit, "transformers", tuple(wanted), sizes)
    if any(hub_names.is_gguf(f) for f in files):
        return HubModel(name, commit, "gguf", tuple(hub_names.pick_gguf(name, files)), sizes)
    raise ModelError(f"{name.repo} is neither a transformers model (no config.json) nor has a "
                     "GGUF file")


def explain(error: BaseException, name: HubName) -> str:
    """One line for a huggingface_hub error, naming the repository, never the token."""
    kinds = {c.__name__ for c in type(error).__mro__}
    repo = name.repo
    if "GatedRepoError" in kinds:
        how = ("your token has no access to it yet" if _has_token()
               else "log in with `hf auth login` or set HF_TOKEN")
        return (f"{repo} is gated: accept its terms on {endpoint()}/{repo} and {how}")
    if "RevisionNotFoundError" in kinds:
        return f"{repo} has no revision {name.revision!r}"
    if "RepositoryNotFoundError" in kinds:
        private = "" if _has_token() else " (or it is private: log in with `hf auth login`)"
        return f"no such repository on the Hub: {repo}{private}"
    if "EntryNotFoundError" in kinds:
        return f"{repo} has no such file: {_first_line(error)}"
    if kinds & _OFFLINE_CLASSES:
        return _offline_line(name, "the Hub cannot be reached")
    return f"{repo}: {_first_line(error)}"


def _as_model_error(error: BaseException, name: HubName) -> ModelError:
    kinds = {c.__name__ for c in type(error).__mro__}
    line = explain(error, name)
    return HubOffline(line) if kinds & _OFFLINE_CLASSES else ModelError(line)


def _offline_line(name: HubName, why: str) -> str:
    return (f"offline ({why}: {endpoint()}) and {name} is not in the cache; "
            f"{cached_summary(name.repo)}")


def _has_token() -> bool:
    from huggingface_hub import get_token

    return bool(get_token())


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def pull(name: HubName, progress=None, cancel: threading.Event | None = None) -> Path:
    """Fetch what `name` needs into the Hub cache (unless there) and return its path.
    `progress(done, total, message)` as for registry models; `cancel` kills the download."""
    from .download_process import DownloadCancelled, run_killable, tree_size

    try:
        model = lookup(name)
    except HubOffline:
        path = cached(name)
        if path is None:
            raise
        if progress:
            progress(1, 1, "offline: using the cached copy")
        return path
    done_before = _present_bytes(model)
    if done_before == model.total and (path := cached(name)) is not None:
        return path  # this commit's files are all here: no download to start
    blobs = repo_folder(name.repo) / "blobs"
    start = tree_size(blobs) if blobs.is_dir() else 0
    message = f"downloading {len(model.files)} file(s) of {name.repo}"

    def tick(_: list[str]) -> None:
        if progress:
            now = tree_size(blobs) if blobs.is_dir() else 0
            progress(min(done_before + now - start, model.total), model.total, message)

    command = [sys.executable, "-m", "specviz.engines.models.hub", "download", str(name),
               name.revision or "main", *model.files]
    env = {**os.environ, "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_ENDPOINT": endpoint(),
           "HF_HUB_CACHE": str(cache_root())}
    returncode, output = run_killable(command, env, cancel or threading.Event(), tick)
    if returncode != 0:
        marked = [line[len(_ERROR_MARK):] for line in output if line.startswith(_ERROR_MARK)]
        raise ModelError(marked[-1] if marked else f"download of {name} failed: "
                         f"{(output or ['no output'])[-1]}")
    path = cached(name)
    if path is None:
        raise DownloadCancelled("download cancelled") if cancel and cancel.is_set() else \
            ModelError(f"{name} was downloaded but is not complete in {cache_root()}")
    if progress:
        progress(model.total, model.total, "done")
    return path


def _present_bytes(model: HubModel) -> int:
    snapshot = repo_folder(model.name.repo) / "snapshots" / model.commit
    return sum(model.sizes.get(f, 0) for f in model.files if (snapshot / f).exists())


def _download(argv: list[str]) -> int:
    """The child: fetch the named files with huggingface_hub; one marked line on failure."""
    from huggingface_hub import hf_hub_download

    text, revision, *files = argv
    name = hub_names.parse(text) or HubName(text)
    try:
        for filename in files:
            hf_hub_download(name.repo, filename, revision=revision, cache_dir=cache_root(),
                            endpoint=endpoint())
    except Exception as error:  # reported as one line to the parent
        print(_ERROR_MARK + explain(error, name), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "download":
        sys.exit(_download(sys.argv[2:]))
    sys.exit("usage: python -m specviz.engines.models.hub download NAME REVISION FILE...")
