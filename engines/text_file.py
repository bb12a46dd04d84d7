"""Text files a person hands specviz (prompts, corpora, questions): read as UTF-8, or one line
saying why not."""

from __future__ import annotations

from pathlib import Path

from .errors import SpecvizError


def read_text(path: str | Path, what: str, allow_empty: bool = False) -> str:
    """The file's text; a SpecvizError naming `what` and `path` when it cannot be read, is not
    UTF-8 text (a binary file, a model, an archive) or holds nothing but white space."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SpecvizError(f"cannot read {what} {path}: {exc.strerror}") from None
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
