"""Fetching a registry model or a Hub name from the window: ask first, then a progress dialog
that can cancel.

`models.pull` runs on an executor thread; its progress callback crosses to the GUI thread as a
queued signal. Dialogs are opened non-modally and awaited, never `exec()`ed: a nested event loop
inside a running asyncio task would let other tasks step re-entrantly.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import Executor
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QMessageBox,
    QProgressBar,
    QVBoxLayout,
    QWidget,
)

from ...engines import models
from ...engines.models.download_process import DownloadCancelled


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


async def ask(parent: QWidget, title: str, text: str) -> bool:
    box = QMessageBox(QMessageBox.Icon.Question, title, text,
                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, parent)
    answer: asyncio.Future[bool] = asyncio.get_event_loop().create_future()
    box.finished.connect(lambda result: answer.done() or answer.set_result(
        result == QMessageBox.StandardButton.Yes.value))
    box.open()
    return await answer


class FetchDialog(QDialog):
    """Bytes, rate and a Cancel button for one download."""

    progressed = Signal(int, int, str)  # done, total, message; emitted on the pull thread

    def __init__(self, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Fetching {name}")
        self.cancel = threading.Event()
        self._samples: list[tuple[float, int]] = []
        self.bar = QProgressBar()
        self.label = QLabel("starting…")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        buttons.rejected.connect(self._on_cancel)
        box = QVBoxLayout(self)
        box.addWidget(self.bar)
        box.addWidget(self.label)
        box.addWidget(buttons)
        self.setMinimumWidth(420)
        self.progressed.connect(self._show, Qt.ConnectionType.QueuedConnection)

    def report(self, done: int, total: int, message: str) -> None:
        """models.pull's progress callback (any thread)."""
        self.progressed.emit(done, total, message)

    def _show(self, done: int, total: int, message: str) -> None:
        now = time.monotonic()
        self._samples = [s for s in self._samples if now - s[0] < 2.0] + [(now, done)]
        t0, d0 = self._samples[0]
        rate = (done - d0) / (now - t0) if now > t0 else 0.0
        self.bar.setMaximum(max(total, 1))
        self.bar.setValue(done)
        self.label.setText(f"{_mb(done)} of {_mb(total)}, {_mb(int(rate))}/s: {message}")

    def _on_cancel(self) -> None:
        self.cancel.set()
        self.label.setText("cancelling…")

    def reject(self) -> None:  # Esc and the window's close button cancel too
        self._on_cancel()


async def fetch(parent: QWidget, name: str, executor: Executor,
                ask_first: bool = False) -> Path | None:
    """Fetch registry model or Hub name `name` with a progress dialog whose Cancel stops it
    (after a question, with `ask_first`); its path, or None when declined or cancelled."""
    if ask_first and not await ask(parent, "Fetch model",
                                   f"{name} ({models.size_line(name)}) is not downloaded yet. "
                                   "Fetch it now?"):
        return None
    dialog = FetchDialog(name, parent)
    dialog.show()
    loop = asyncio.get_event_loop()
    try:
        return await loop.run_in_executor(
            executor, lambda: models.pull(name, progress=dialog.report, cancel=dialog.cancel))
    except DownloadCancelled:
        return None
    finally:
        dialog.hide()
        dialog.deleteLater()
