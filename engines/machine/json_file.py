"""Small JSON files of facts about this machine (probe results, the small-row plan): read as a
dict whatever state they are in, written whole or not at all."""

from __future__ import annotations

import json
import os
import tempfile
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
    OSError where it cannot be written, leaving the file as it was and nothing beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # A temporary name of its own: two processes saving at once never write one file.
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(data, indent=1))
        os.chmod(name, 0o644)
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
