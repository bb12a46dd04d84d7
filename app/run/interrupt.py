"""Ctrl-C for a command that drives the window without a person (`specviz shot`).

While Qt's event loop waits in C++, no Python runs, so Python's SIGINT handler waits too; and
when its KeyboardInterrupt does fire inside a Qt callback (a timer, a slot), PySide prints it
and carries on. So here the handler only notes the interrupt and stops what is waiting (the
asyncio task being run, else Qt's loop); a timer wakes the interpreter a few times a second so
the handler runs at once; and the command calls `check()` between its stages, where a
KeyboardInterrupt reaches the command line's "specviz: interrupted" (exit 130).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

from PySide6.QtCore import QTimer

WAKE_MS = 100  # how late a Ctrl-C may be noticed while Qt waits


class CtrlC:
    """Whether Ctrl-C was pressed, and the one task it cancels."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.pressed = False
        self._loop = loop
        self._task: asyncio.Task | None = None

    def check(self) -> None:
        """KeyboardInterrupt once Ctrl-C was pressed: call it where unwinding is safe."""
        if self.pressed:
            raise KeyboardInterrupt

    def run(self, work: Coroutine[Any, Any, Any]) -> Any:
        """Run `work` on the loop to its end, or until Ctrl-C cancels it."""
        self._task = self._loop.create_task(work)
        try:
            return self._loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            self.check()
            raise
        finally:
            self._task = None

    def _on_sigint(self, _signum: int, _frame: object) -> None:
        self.pressed = True
        if self._task is not None:
            self._task.cancel()
        elif self._loop.is_running():
            self._loop.stop()


@contextmanager
def ctrl_c_stops(loop: asyncio.AbstractEventLoop) -> Iterator[CtrlC]:
    """Within the block, Ctrl-C (SIGINT) stops the work and the block's `check()` raises."""
    ctrl_c = CtrlC(loop)
    previous = signal.signal(signal.SIGINT, ctrl_c._on_sigint)
    wake = QTimer(interval=WAKE_MS)
    wake.timeout.connect(lambda: None)  # Python runs, and with it a pending handler
    wake.start()
    try:
        yield ctrl_c
    finally:
        wake.stop()
        signal.signal(signal.SIGINT, previous)
