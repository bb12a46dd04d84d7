"""A download in a child process that a Cancel kills within a tick, and the errors of one.

Used by the registry's pulls (pip, huggingface_hub) and by Hub-name pulls alike.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO

from ..errors import ModelError

TICK_S = 0.1


class DownloadError(ModelError):
    """One source could not deliver a file; `offline` when it could not be reached at all."""

    def __init__(self, message: str, offline: bool = False) -> None:
        super().__init__(message)
        self.offline = offline


class DownloadCancelled(ModelError):
    """The caller's cancel event was set; temporary files are gone."""


def run_killable(
    command: list[str],
    env: dict[str, str],
    cancel: threading.Event,
    tick: Callable[[list[str]], None],
) -> tuple[int, list[str]]:
    """Run a command, calling `tick(its recent output lines)` until it ends or `cancel` is set."""
    output: deque[str] = deque(maxlen=200)
    process = subprocess.Popen(
        command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, errors="replace",
    )  # fmt: skip
    reader = threading.Thread(target=_collect, args=(process.stdout, output), daemon=True)
    reader.start()
    try:
        while process.poll() is None:
            if cancel.wait(TICK_S):
                raise DownloadCancelled("download cancelled")
            tick(list(output))  # a snapshot: the reader thread keeps appending
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        reader.join()
    return process.returncode, list(output)


def _collect(stream: IO[str], output: deque[str]) -> None:
    for line in stream:
        output.append(line.rstrip())


def tree_size(folder: Path) -> int:
    """Bytes in a folder that a downloader is busy changing (os.walk skips vanished folders)."""
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            with contextlib.suppress(OSError):  # removed meanwhile
                total += os.stat(os.path.join(root, name)).st_size
    return total
