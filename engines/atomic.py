"""Files written all or nothing: a reader never sees half a file, a failure leaves none.

Everything specviz writes whole (pictures, exports, profiles, facts about this machine,
settings) goes through `written_atomically`: the bytes go to a temporary file beside the
target, which replaces the target by one rename only once it is complete. A full disk, a
read-only folder or a missing one becomes one line naming the file, and the target is as it
was. Files that grow as a run goes (traces, suffix memories) append whole records instead.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import SpecvizError


def cannot_write(path: Path | str, exc: OSError) -> SpecvizError:
    """The one line for a write that failed: what, where and why."""
    return SpecvizError(f"cannot write {path}: {exc.strerror or exc}")


@contextmanager
def written_atomically(out: Path | str, mode: int = 0o644) -> Iterator[Path]:
    """A temporary path beside `out` to write; renamed to `out` when the block ends well,
    removed when it raises (an OSError becomes one line naming `out`). `mode`: the file's
    permissions (mkstemp's 0600 would keep a file to share private)."""
    out = Path(out)
    try:
        fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".part")
    except OSError as exc:
        raise cannot_write(out, exc) from None
    os.close(fd)
    temp = Path(name)
    try:
        yield temp
        temp.chmod(mode)
        _flush_to_disk(temp)
        os.replace(temp, out)
    except OSError as exc:
        raise cannot_write(out, exc) from None
    finally:
        temp.unlink(missing_ok=True)


def _flush_to_disk(path: Path) -> None:
    """The bytes on the disk before the rename makes them the file: after a power cut the
    target is the old file or the new one, never a new name over empty blocks."""
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def write_text(out: Path | str, text: str, mode: int = 0o644) -> Path:
    """`out` replaced by `text` in one step; SpecvizError naming `out` where it cannot be."""
    with written_atomically(out, mode) as temp:
        temp.write_text(text, encoding="utf-8")
    return Path(out)


def write_bytes(out: Path | str, data: bytes, mode: int = 0o644) -> Path:
    with written_atomically(out, mode) as temp:
        temp.write_bytes(data)
    return Path(out)
