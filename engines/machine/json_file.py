"""Small JSON files of facts about this machine (probe results, the small-row plan): read as a
dict whatever state they are in, written whole or not at all."""

from __future__ import annotations

import json
from pathlib import Path


def read_dict(path: Path | None) -> dict:
    """The file's object, or {} when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_dict(path: Path, data: dict) -> None:
    """Replace the file with `data` in one step (a reader never sees half of it); raises
    OSError where it cannot be written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    tmp.replace(path)
