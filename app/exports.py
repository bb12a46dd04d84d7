"""Getting results out of the window: pictures, a figures table, and the traces themselves."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import QWidget

FIGURE_COLUMNS = ("lane", "oracle", "k", "tokens", "tok_per_s", "acceptance_rate",
                  "mean_accepted_tokens", "speedup", "trace")


def save_png(what: QWidget | QPixmap, path: str | Path) -> Path:
    """What a widget shows now, at its size on screen (a window or a lane), or a picture."""
    path = Path(path)
    picture = what if isinstance(what, QPixmap) else what.grab()
    if not picture.save(str(path), "PNG"):
        raise OSError(f"could not write {path}")
    return path


def write_figures_csv(path: str | Path, rows: list[dict]) -> Path:
    path = Path(path)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, FIGURE_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def copy_traces(paths: list[Path], folder: str | Path) -> list[Path]:
    """Copy the lanes' JSONL traces into `folder`; the copies' paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copy2(path, folder / path.name)) for path in paths]
