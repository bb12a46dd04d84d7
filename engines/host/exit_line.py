"""One line for an engine process that ended unasked: the window's own, or one that
`specviz serve` started for a client on another machine."""

from __future__ import annotations

import signal


def death_line(code: int, crashed: bool, build: str, stderr: list[str]) -> str:
    """What ended the engine process, on what, and what the user can do."""
    if crashed:
        try:
            cause = f"killed by {signal.Signals(code).name}"
        except ValueError:
            cause = f"killed by signal {code}"
    else:
        cause = f"exited with status {code}"
    if crashed and code == getattr(signal, "SIGKILL", -1):
        cause += " (out of memory, or killed from outside)"
    on = f" running {build}" if build else ""
    last = f"; its last words: {stderr[-1][:160]}" if stderr else ""
    return (f"the engine process {cause}{on}{last}. Everything received is kept; Run starts "
            "a fresh engine (`specviz doctor` checks the backends)")
