"""Text files a person hands specviz (prompts, corpora, questions): read as UTF-8, or one line
saying why not. Only regular files are read, and only as many bytes as a run can use: a
device (/dev/zero) or a pipe would be read until memory ran out, and a 50 MB prompt took 50 s
and 3.6 GB to tokenize before it was refused as longer than the context."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import SpecvizError

# Bytes a token may stand for, generously: English text averages about 4, code about 3; a
# long run of spaces or a long merge is one token, but a whole file of them is not a prompt.
BYTES_PER_TOKEN = 32
LONGEST_CONTEXT = 1 << 20  # tokens: the longest context models offer (a million)
MAX_BYTES = 16 << 20  # any text file: a million-token context at 16 bytes a token


def limit_for(n_ctx: int | None) -> int:
    """The bytes a text that must fit a context of `n_ctx` tokens can hold at most (0 or
    None: the model's own context, not known before it loads)."""
    return min(MAX_BYTES, n_ctx * BYTES_PER_TOKEN) if n_ctx else MAX_BYTES


def read_text(path: str | Path, what: str, allow_empty: bool = False,
              limit: int = MAX_BYTES) -> str:
    """The file's text; a SpecvizError naming `what` and `path` when it cannot be read, is not
    a regular file, is larger than `limit` bytes, is not UTF-8 text (a binary file, a model,
    an archive) or holds nothing but white space."""
    path = Path(path)
    data = read_bytes(path, what, limit)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecvizError(f"{what} {path} is not UTF-8 text (byte {exc.start} is "
                           f"0x{data[exc.start]:02x}); give a text file") from None
    if "\x00" in text:
        raise SpecvizError(f"{what} {path} is not text (it holds NUL bytes); give a text file")
    if not allow_empty and not text.strip():
        raise SpecvizError(f"{what} {path} is empty")
    return text


def read_bytes(path: Path, what: str, limit: int) -> bytes:
    """At most `limit` bytes of a regular file: its kind is asked before it is opened (a
    FIFO's open waits for a writer), and at most one byte past the limit is read (a file
    may grow after its size was asked)."""
    check_file(path, what, limit)
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise SpecvizError(f"cannot read {what} {path}: {exc.strerror}") from None
    if len(data) > limit:
        raise SpecvizError(f"{what} {path} is {len(data):,} bytes or more, more than a run "
                           f"can use (at most {limit:,}); give a shorter file")
    return data


def check_file(path: Path, what: str, limit: int = MAX_BYTES) -> os.stat_result:
    """The file's stat where it is a regular file of at most `limit` bytes; else one line
    saying why not. Asked of a run's files before a model loads (a corpus refused after a
    transformers model had loaded took 7 s to say so)."""
    try:
        info = path.stat()
    except OSError as exc:
        raise SpecvizError(f"cannot read {what} {path}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise SpecvizError(f"{what} {path} is not a regular file "
                           f"({_kind(info.st_mode)}); give a text file")
    if info.st_size > limit:
        raise SpecvizError(f"{what} {path} is {info.st_size:,} bytes, more than a run can use "
                           f"(at most {limit:,}); give a shorter file")
    return info


def _kind(mode: int) -> str:
    kinds = {stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a pipe", stat.S_ISCHR: "a device",
             stat.S_ISBLK: "a device", stat.S_ISSOCK: "a socket"}
    return next((name for test, name in kinds.items() if test(mode)), "not a file")

