"""Files written all or nothing: a reader never sees half a file, a failure leaves none.

Everything specviz writes whole (pictures, exports, profiles, facts about this machine,
settings, heads) goes through here: the bytes go to a temporary file beside the target,
flushed to the disk, which replaces the target by one rename only once it is complete; the
folder is flushed after the rename, so the new name survives a power cut too. A full disk, a
read-only folder or a missing one becomes one line naming the file, and the target is as it
was. Files that grow as a run goes (traces, suffix memories) append whole records instead.

Several files that belong together (a head's weights and its config) are replaced as one
unit by `replace_together`: a journal written after them commits the set, and a save cut
short after the commit is finished by the next one (`committed` reads through it).

`crash_point` is called between the stages of every write: the crash tests replace it with
a function that kills the process there (tests/test_crash_writers.py), as SQLite's tests do.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .bounded_json import loads
from .errors import SpecvizError

JOURNAL = ".specviz-pending.json"  # in a folder whose files are being replaced together


def crash_point(stage: str) -> None:
    """Nothing: the crash tests swap in a function that kills the process at `stage`."""


def cannot_write(path: Path | str, exc: OSError) -> SpecvizError:
    """The one line for a write that failed: what, where and why."""
    return SpecvizError(f"cannot write {path}: {exc.strerror or exc}")


@contextmanager
def replacing(out: Path | str, mode: int | None = None) -> Iterator[Path]:
    """A new temporary path beside `out` to write; `out` replaced by it when the block ends
    well, the temporary removed when it raises. Raises OSError as it comes (callers that
    measure again next time ignore it); `written_atomically` makes it one line. `mode`: the
    file's permissions, else those a new file gets here (0666 less the umask)."""
    out = Path(out)
    temp = new_temp(out, 0o666 if mode is None else mode)
    try:
        yield temp
        crash_point("written")
        if mode is not None:
            temp.chmod(mode)  # exactly what was asked, whatever the umask
        sync_file(temp)
        crash_point("synced")
        os.replace(temp, out)
        crash_point("renamed")
        sync_folder(out.parent)
    finally:
        temp.unlink(missing_ok=True)


@contextmanager
def written_atomically(out: Path | str, mode: int | None = None) -> Iterator[Path]:
    """`replacing`, with an OSError (the writer's own too) as one line naming `out`."""
    try:
        with replacing(out, mode) as temp:
            yield temp
    except OSError as exc:
        raise cannot_write(out, exc) from None


def new_temp(out: Path, mode: int = 0o666) -> Path:
    """An empty file of a new name beside `out`, created with `mode` less the umask (as any
    new file is: mkstemp's 0600 would keep a shared figure private)."""
    for _ in range(100):
        temp = out.with_name(f".{out.name}.{secrets.token_hex(4)}.part")
        try:
            os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
            return temp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(out))


def sync_file(path: Path) -> None:
    """The bytes on the disk before the rename makes them the file: after a power cut the
    target is the old file or the new one, never a new name over empty blocks."""
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def sync_folder(folder: Path) -> None:
    """The folder's entries on the disk: a rename is durable only once its folder is. Windows
    cannot open a folder to flush it (NTFS journals renames itself), and some file systems
    refuse it (EINVAL): nothing more can be done there."""
    if os.name == "nt":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def write_text(out: Path | str, text: str, mode: int | None = None) -> Path:
    """`out` replaced by `text` in one step; SpecvizError naming `out` where it cannot be."""
    with written_atomically(out, mode) as temp:
        temp.write_text(text, encoding="utf-8")
    return Path(out)


def write_bytes(out: Path | str, data: bytes, mode: int | None = None) -> Path:
    with written_atomically(out, mode) as temp:
        temp.write_bytes(data)
    return Path(out)


def replace_together(folder: Path, writers: dict[str, Callable[[Path], object]]) -> Path:
    """The files `writers` names in `folder` replaced as one unit: each writer fills a
    temporary path beside its file; once all are on the disk a journal naming them is
    written (the commit), then each is renamed into place. A crash before the commit leaves
    the old files, after it the new ones (`committed` reads them; the next save settles
    them). One line naming `folder` where it cannot be written; the old files stay."""
    folder = Path(folder)
    temps: dict[str, Path] = {}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        settle(folder)  # an earlier save's renames first: its journal is replaced below
        for name, write in writers.items():
            temps[name] = new_temp(folder / name)
            write(temps[name])
            sync_file(temps[name])
            crash_point(f"wrote {name}")
        write_text(folder / JOURNAL, json.dumps({n: t.name for n, t in temps.items()}))
    except (OSError, SpecvizError) as exc:
        for temp in temps.values():
            temp.unlink(missing_ok=True)
        raise exc if isinstance(exc, SpecvizError) else cannot_write(folder, exc) from None
    crash_point("committed")
    try:
        settle(folder)
    except OSError as exc:  # committed: `committed` reads the new files, the next save ends it
        raise cannot_write(folder, exc) from None
    return folder


def settle(folder: Path) -> None:
    """Finish a save `replace_together` committed: its files renamed into place, the journal
    removed."""
    for name, temp in _pending(folder).items():
        if temp.exists():
            os.replace(temp, folder / name)
            crash_point(f"renamed {name}")
    if (folder / JOURNAL).exists():
        sync_folder(folder)
        (folder / JOURNAL).unlink()
        sync_folder(folder)


def committed(folder: Path, name: str) -> Path:
    """The path holding `name`'s committed bytes: the file itself, or the temporary a
    committed save had not yet renamed in (a reader never writes: the folder may be
    read-only, or another's)."""
    temp = _pending(Path(folder)).get(name)
    return temp if temp is not None and temp.exists() else Path(folder) / name


def _pending(folder: Path) -> dict[str, Path]:
    """The journal's files: only plain names in `folder` (a hostile journal renames nothing
    elsewhere); {} without a journal."""
    try:
        data = loads((folder / JOURNAL).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {name: folder / temp for name, temp in data.items()
            if _plain(name) and isinstance(temp, str) and _plain(temp)}


def _plain(name: str) -> bool:
    return (isinstance(name, str) and name not in ("", ".", "..", JOURNAL)
            and Path(name).name == name)
