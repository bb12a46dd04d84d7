"""A suffix memory's file: one JSON line per run, appended whole, read as far as it is whole.

A line is `{"run": label, "tokens": [ids]}`, added by one write of whole lines; a write cut
short (a full disk) is undone, so the file never ends in half a line. The first line names
whose memory it is, `{"memory": {"model": name, "tokenizer": fingerprint}}`: token ids mean
nothing to another tokenizer, and another model's memory is refused by that name whatever its
ids (older files without it are read where their ids fit this model's vocabulary). Reading
keeps every line that is a run. A torn last line (a process killed while writing) is cut
off; unreadable lines before it are kept in a numbered copy of the file (never overwriting
an earlier copy) and the file is written again with its runs. A file holding no run at all
is not a memory: the caller refuses it, and nothing here renames or writes it.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..atomic import write_bytes
from ..bounded_json import loads
from ..errors import SpecvizError

MAX_BYTES = 64 << 20  # a memory is bounded to a few MB: a larger file is something else
RECORD_START = b'{"run":'  # how every run's line written here begins
OWNER_START = b'{"memory":'  # how the first line, naming the model, begins

Record = tuple[str, list[int]]


@dataclass
class Contents:
    """A memory file as read: its bytes, its runs, and what is not a run in it."""

    data: bytes
    records: list[Record] = field(default_factory=list)
    unreadable: int = 0  # lines before the last that are not runs
    first_unreadable: str = ""  # the first of them, "line N: why"
    torn_at: int | None = None  # where a torn last line begins (None: the file ends whole)
    owner: dict | None = None  # whose memory it is (None: a file from before memories said)

    @property
    def is_memory(self) -> bool:
        """Empty, or naming its model, or holding a run, or only a first line cut off while it
        was written."""
        first_torn = self.data.startswith((RECORD_START, OWNER_START)) and b"\n" not in self.data
        return (bool(self.records) or self.owner is not None or not self.data.strip()
                or first_torn)


def load(path: Path) -> Contents | None:
    """The file's contents, None where there is none; SpecvizError (one line) for a folder,
    a device, a file too large to be a memory or one that cannot be read."""
    if not check_kind(path):
        return None
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _refused(path, exc.strerror or str(exc)) from None
    return parse(data)


def check_kind(path: Path) -> bool:
    """Whether the file is there; SpecvizError (one line) for a folder, a device, a file too
    large to be a memory or one whose kind cannot be asked. Asked before a model loads."""
    try:
        info = path.stat()
    except (FileNotFoundError, NotADirectoryError):  # saving it says why, as the run ends
        return False
    except OSError as exc:
        raise _refused(path, exc.strerror or str(exc)) from None
    if stat.S_ISDIR(info.st_mode):
        raise _refused(path, "it is a folder")
    if not stat.S_ISREG(info.st_mode):
        raise _refused(path, "it is not a regular file")
    if info.st_size > MAX_BYTES:
        raise _refused(path, f"{info.st_size:,} bytes is larger than a memory grows")
    return True


def not_a_memory(path: Path) -> SpecvizError:
    return _refused(path, "it holds no run of a suffix memory (JSON lines written by specviz)")


def check_owner(path: Path, contents: Contents, owner: dict) -> None:
    """SpecvizError where the file names another model or tokenizer than `owner`'s."""
    theirs = contents.owner
    if theirs is not None and theirs != owner:
        raise _refused(path, f"it is the memory of {theirs.get('model')} (tokenizer "
                             f"{theirs.get('tokenizer')}), not of {owner.get('model')} "
                             f"(tokenizer {owner.get('tokenizer')})")


def check_vocabulary(path: Path, contents: Contents, vocab_size: int) -> None:
    """SpecvizError where a run holds a token id past the model's vocabulary: the memory of
    another model, which would be drafted into this one's embedding."""
    largest = max((max(tokens, default=0) for _, tokens in contents.records), default=0)
    if largest >= vocab_size:
        raise _refused(path, f"it holds token {largest}, past this model's {vocab_size} "
                             "(the memory of another model)")


def _refused(path: Path, why: str) -> SpecvizError:
    return SpecvizError(f"{path} cannot be a suffix memory: {why}; give a new file's path, "
                        "or off")


def parse(data: bytes) -> Contents:
    contents = Contents(data)
    *whole, tail = data.split(b"\n")  # `tail`: what follows the last newline
    offset, last_bad, first, bad = 0, None, 1, []
    if whole and (owner := _owner(whole[0])) is not None:
        contents.owner = owner
        offset, whole, first = len(whole[0]) + 1, whole[1:], 2
    for number, line in enumerate(whole, start=first):
        if line.strip():
            record = _record(line)
            if isinstance(record, str):
                bad.append(f"line {number}: {record}")
                last_bad = offset
            else:
                contents.records.append(record)
                last_bad = None
        offset += len(line) + 1
    if tail.strip():
        contents.torn_at = offset
    elif last_bad is not None:  # a last line that is not a run is taken for a torn one
        contents.torn_at = last_bad
        bad.pop()
    contents.unreadable, contents.first_unreadable = len(bad), bad[0] if bad else ""
    return contents


def _record(line: bytes) -> Record | str:
    """The run a line holds, or why it holds none."""
    try:
        record = loads(line)
    except ValueError as exc:  # not JSON, not UTF-8, nested too deep
        return str(exc)
    if not isinstance(record, dict):
        return "not a JSON object"
    label, tokens = record.get("run"), record.get("tokens")
    if not isinstance(label, str) or not isinstance(tokens, list) or not all(
            type(t) is int and t >= 0 for t in tokens):
        return "not a run (a label and a list of token ids)"
    return label, tokens


def _owner(line: bytes) -> dict | None:
    if not line.startswith(OWNER_START):
        return None
    try:
        owner = loads(line).get("memory")
    except (ValueError, AttributeError):
        return None
    return owner if isinstance(owner, dict) else None


def owner_line(owner: dict | None) -> bytes:
    """The first line naming whose memory it is (nothing for a memory that names no one)."""
    if owner is None:
        return b""
    return (json.dumps({"memory": owner}, separators=(",", ":")) + "\n").encode()


def line(label: str, tokens: list[int]) -> bytes:
    return (json.dumps({"run": label, "tokens": tokens}, separators=(",", ":")) + "\n").encode()


def append(path: Path, data: bytes) -> None:
    """Add whole lines at the file's end in one write; one cut short (a full disk) is undone,
    so the file never ends in half a line. OSError where it cannot be written."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.fstat(fd).st_size
        try:
            _write_all(fd, data)
        except OSError:
            os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    rest = memoryview(data)
    while rest:  # more than one write only where the first was cut short
        rest = rest[os.write(fd, rest):]


def rewrite(path: Path, data: bytes) -> None:
    """The file replaced by `data` in one step; SpecvizError naming it where it cannot be."""
    write_bytes(path, data)


def repair(path: Path, contents: Contents) -> str | None:
    """Called under the memory's lock: the file made whole again. A torn last line is cut off;
    unreadable lines are kept in a numbered copy of the file, which is then written again with
    its runs only. What was done, in a line (None: nothing to say)."""
    name, runs = path.name, f"its {len(contents.records)} runs kept"
    try:
        if contents.unreadable:
            kept = set_aside(path, contents.data)  # nothing is dropped that is not kept
            rewrite(path, owner_line(contents.owner)
                    + b"".join(line(*r) for r in contents.records))
            return (f"the suffix memory {name} had {contents.unreadable} unreadable lines "
                    f"({contents.first_unreadable}): {runs}, the file as it was saved as "
                    f"{kept.name}")
        if contents.torn_at is not None:
            os.truncate(path, contents.torn_at)
            return (f"the suffix memory {name} ended in a line cut off while written: "
                    f"dropped, {runs}")
    except (OSError, SpecvizError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return (f"the suffix memory {name} has lines that are not runs, skipped ({runs}; "
                f"it could not be repaired: {why})")
    return None


def set_aside(path: Path, data: bytes) -> Path:
    """A copy of the file's bytes beside it, `<name>.corrupt-N` with the first N not taken:
    an earlier copy is never overwritten. OSError where none can be made."""
    for n in range(1, 10_000):
        copy = path.with_name(f"{path.name}.corrupt-{n}")
        try:
            fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        try:
            _write_all(fd, data)
        except OSError:
            copy.unlink()
            raise
        finally:
            os.close(fd)
        return copy
    raise OSError(f"{path.name}.corrupt-1 to -9999 all exist")
