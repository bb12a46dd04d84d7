"""A GGUF's tokenizer and config for transformers, read from the file once, then kept.

transformers reads a GGUF's metadata again for the tokenizer, the config and the weights:
three parses of every field (the vocabulary is most of it), 3.9 s and 3.0 s of a 20 s
smollm2-135m load on a 2-core EPYC before the weights' own 12.7 s. The tokenizer and config
saved the first time and loaded from their small files after take 0.1 s, and the model built
from the kept config computes the same logits (tests/test_hf_gguf.py). Kept per file (its
path, size and modification time) and transformers release, in the cache folder. A load's
reads of the file share one parse, over a plain array rather than gguf's memmap
(models/gguf_read.py).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from ..atomic import sync_folder
from ..models import gguf_read

FOLDER = "gguf-meta"  # under the cache folder
CONFIG = "config.json"


def tokenizer_and_config(folder: Path, gguf: str, store: Path):
    """(tokenizer, config) of `folder / gguf`, kept in `store` after the first read."""
    from transformers import AutoConfig, AutoTokenizer

    gguf_read.install()  # transformers parses the file for each below: once, shared
    kept = store / _key(folder / gguf)
    if (kept / CONFIG).is_file():
        try:
            return AutoTokenizer.from_pretrained(kept), AutoConfig.from_pretrained(kept)
        except (OSError, ValueError):
            _discard(kept)  # damaged: read from the file again
    with gguf_read.shared():
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
        config = AutoConfig.from_pretrained(folder, gguf_file=gguf)
    _keep(kept, tok, config)
    return tok, config


def _keep(kept: Path, tok, config) -> None:
    """Saved in a folder of its own beside, then renamed into place: a half-written folder
    is never read, and two processes keeping the same file never write one folder."""
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(dir=kept.parent, prefix=f".{kept.name}.",
                                        suffix=".partial"))
    except OSError:
        return  # read from the file next time
    try:
        tok.save_pretrained(partial)
        config.save_pretrained(partial)  # last: its file marks the folder whole
        _swap_in(partial, kept)
    except OSError:
        pass  # read from the file next time
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _swap_in(partial: Path, kept: Path) -> None:
    """`partial` becomes `kept`. The key names the file's bytes, so a `kept` already there
    (another process's) holds the same: it stays, and never is there a moment without one."""
    if kept.exists() and not (kept / CONFIG).is_file():
        _discard(kept)  # without its config it is never read: it would block every rename
    try:
        partial.rename(kept)
    except OSError:
        if not (kept / CONFIG).is_file():
            raise
    sync_folder(kept.parent)


def _discard(kept: Path) -> None:
    """A damaged folder renamed aside before it is removed: a process keeping a new one
    meanwhile is never deleted with it."""
    aside = kept.with_name(f".{kept.name}.damaged-{os.getpid()}")
    try:
        kept.rename(aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)


def _key(path: Path) -> str:
    from importlib.metadata import version

    stat = path.stat()
    text = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{version('transformers')}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def quiet_conversion() -> None:
    """Silence the bar transformers draws while converting a GGUF's tensors ("Converting and
    de-quantizing GGUF tensors"): it is plain tqdm, out of reach of transformers'
    `disable_progress_bar`, and drew a bar into `specviz run`'s output on every load. The
    backend reports its load itself."""
    try:
        from transformers import modeling_gguf_pytorch_utils as conversion
    except ImportError:  # another transformers layout: its bar stays
        return
    bar = getattr(conversion, "tqdm", None)
    if isinstance(bar, type) and not issubclass(bar, _Silent):
        conversion.tqdm = type("SilentTqdm", (_Silent, bar), {})


def name_maps_once() -> None:
    """transformers builds gguf's tensor-name map (`gguf.get_tensor_name_map`, 7 ms) again
    for each of a model's modules while it converts a GGUF: 397 times for smollm2, a third of
    the load. The map depends only on the architecture and the layer count and is only read:
    built once each."""
    try:
        import gguf
    except ImportError:
        return
    build = getattr(gguf, "get_tensor_name_map", None)
    if callable(build) and not hasattr(build, "cache_info"):
        gguf.get_tensor_name_map = functools.lru_cache(maxsize=16)(build)


class _Silent:
    """Mixed into transformers' tqdm class: every bar made disabled, the class otherwise the
    same (its class methods and `write` included)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["disable"] = True
        super().__init__(*args, **kwargs)
