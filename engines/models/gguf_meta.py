"""Read GGUF metadata (architecture, context length, chat template) with the `gguf` library.

Used where a backend's own API does not expose a field, and to describe a model without
loading its weights. Arrays (the vocabulary) are skipped: they are large and not needed here.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from ..errors import ModelError


@lru_cache(maxsize=8)
def read_metadata(path: str | Path) -> dict[str, str | int | float | bool]:
    """Scalar and string metadata of a GGUF file, keyed by GGUF field name."""
    from gguf import GGUFValueType

    from .gguf_read import reader_class

    try:
        reader = reader_class()(str(path))
    except (OSError, ValueError, IndexError) as exc:  # IndexError: gguf's own reader's
        raise ModelError(f"{path} is not a readable GGUF file: {exc}") from None
    meta: dict[str, str | int | float | bool] = {}
    for name, field in reader.fields.items():
        if not field.types or field.types[0] == GGUFValueType.ARRAY:
            continue
        value = field.contents()
        if isinstance(value, (str, int, float, bool)):
            meta[name] = value
    return meta
