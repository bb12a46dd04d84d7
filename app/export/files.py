"""Getting results out of the window: pictures, a figures table, and the traces themselves.

Every file is written whole or not at all (engines.atomic): a full disk, a read-only or a
missing folder is one line naming the file, and what was there before stays.
"""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import QWidget

from ...engines.atomic import cannot_write, write_bytes, written_atomically
from ...engines.errors import SpecvizError

FIGURE_COLUMNS = ("lane", "oracle", "k", "streams", "tokens", "tok_per_s", "acceptance_rate",
                  "mean_accepted_tokens", "speedup", "trace")


def save_png(what: QWidget | QPixmap, path: str | Path) -> Path:
    """What a widget shows now, at its size on screen (a window or a lane), or a picture."""
    picture = what if isinstance(what, QPixmap) else what.grab()
    return write_bytes(path, png_bytes(picture))


def png_bytes(picture: QPixmap) -> bytes:
    """The picture encoded as PNG in memory: the file is then written by Python, whose
    errors say why (QPixmap.save to a path only says that it failed)."""
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not picture.save(buffer, "PNG"):
        raise SpecvizError(f"cannot encode a {picture.width()}x{picture.height()} picture "
                           "as PNG")
    buffer.close()
    return bytes(data.data())


def write_figures_csv(path: str | Path, rows: list[dict]) -> Path:
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, FIGURE_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return write_bytes(path, text.getvalue().encode("utf-8"))


def copy_traces(paths: list[Path], folder: str | Path) -> list[Path]:
    """Copy the lanes' JSONL traces into `folder`; the copies' paths."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(folder, exc) from None
    return [_copy(path, folder / path.name) for path in paths]


def _copy(source: Path, out: Path) -> Path:
    try:
        original = source.open("rb")
    except OSError as exc:  # said as a read: the copy's folder is not to blame
        raise SpecvizError(f"cannot read {source}: {exc.strerror or exc}") from None
    with original, written_atomically(out) as temp:
        with temp.open("wb") as copy:
            shutil.copyfileobj(original, copy)
        shutil.copystat(source, temp)
    return out
