"""The draft models on this machine that could draft for a target: the registry's (downloaded
or not) and the models other tools keep (the Hugging Face cache, LM Studio, llama.cpp's cache,
Ollama, the person's folders: engines/models/local.py, as `specviz models list --local` and the
window's model picker find them), each once, the target left out; and the ones that need not
be tried: not smaller than the target, not downloaded, or too dear by their cost profile."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..models import is_present, load_registry, model_path
from ..models import local as local_models
from ..models.hub_names import PICKLED_WEIGHTS, WEIGHTS


@dataclass(frozen=True)
class DraftModel:
    label: str  # as the table shows it
    name: str  # what --draft takes (a registry or Hub name, else the path)
    path: Path | None  # None: a registry model not downloaded
    size: int  # bytes of its weights
    where: str  # "registry" or the tool whose store holds it


def draft_models(target_path: str | os.PathLike[str],
                 places: local_models.Places | None) -> list[DraftModel]:
    """Every model here but the target, smallest first: each file or folder once."""
    seen = {os.path.realpath(target_path)}
    found = []
    for spec in load_registry().values():
        path = model_path(spec)
        key = os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            found.append(DraftModel(spec.name, spec.name, path if is_present(spec) else None,
                                    spec.size, "registry"))
    for m in local_models.find(places) if places else []:
        key = os.path.realpath(m.path)
        if key not in seen:
            seen.add(key)
            name = m.name if m.where == local_models.HF_CACHE else str(m.path)
            found.append(DraftModel(m.name, name, m.path, m.size, m.where))
    return sorted(found, key=lambda d: d.size)


def weights_size(path: str | os.PathLike[str]) -> int:
    """Bytes of a model's weights: a GGUF file's size, a model folder's weight files'."""
    path = Path(path)
    if not path.is_dir():
        return path.stat().st_size
    weights = [p for p in path.iterdir() if p.name.endswith(WEIGHTS)] or [
        p for p in path.iterdir() if p.name.endswith(PICKLED_WEIGHTS)]
    return sum(p.stat().st_size for p in weights)


def size_reason(draft: DraftModel, target_bytes: int) -> str:
    """Why a draft this large is not tried ("" where it is smaller than the target)."""
    if draft.size < target_bytes:
        return ""
    return (f"not smaller than the target ({megabytes(draft.size)}; the target "
            f"{megabytes(target_bytes)})")


def megabytes(size: int) -> str:
    return f"{size / 1e9:.1f} GB" if size >= 1e9 else f"{size / 1e6:.0f} MB"
