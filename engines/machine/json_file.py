"""Small JSON files of facts about this machine (probe results, the small-row plan, the
compile choice, the CPU's dtype): read as a dict whatever state they are in, written whole or
not at all, and changed under a file lock, so two processes that each add a fact keep both."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from ..atomic import replacing
from ..bounded_json import SMALL_FILE, read_json
from ..errors import SpecvizError

LOCK_WAIT_S = 30  # a writer holds the lock for one small write; longer means it hung


def read_dict(path: Path | None) -> dict:
    """The file's object, or {} when it is missing, unreadable, too large, nested too deep
    or not an object (the facts are measured again)."""
    try:
        data = read_json(path, "facts", SMALL_FILE) if path else {}
    except SpecvizError:
        return {}
    return data if isinstance(data, dict) else {}


def write_dict(path: Path, data: dict) -> None:
    """Replace the file with `data` in one step (a reader never sees half of it); raises
    OSError where it cannot be written, leaving the file as it was and nothing beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as temp:
        temp.write_text(json.dumps(data, indent=1), encoding="utf-8")


def update_dict(path: Path, change: Callable[[dict], dict]) -> dict:
    """Read, `change` and write the file as one step among processes (a lock file beside it):
    a read-modify-write without it loses whatever another process wrote in between. Returns
    what was written; raises OSError (filelock's Timeout is one) where it cannot be."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path.with_name(path.name + ".lock"), timeout=LOCK_WAIT_S):
        data = change(read_dict(path))
        write_dict(path, data)
    return data
