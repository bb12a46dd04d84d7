"""A log that a flood cannot fill: at most a few lines of a kind per window of time, the rest
counted and said in one line when the window ends (`specviz serve` under attack: 50 slow
clients reconnecting wrote 12,000 lines in 40 s)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

BURST = 5  # lines of one kind logged whole per window
WINDOW_S = 10.0

Schedule = Callable[[float, Callable[[], None]], Any]  # asyncio's loop.call_later


class LimitedLog:
    """Passes at most `burst` lines per `window_s` seconds to `log`; the others are counted
    and summed up in one line ("41 more refused in the last 10 s") as the window ends,
    by `schedule` where given, else at the next line."""

    def __init__(self, log: Callable[[str], None], what: str, burst: int = BURST,
                 window_s: float = WINDOW_S, schedule: Schedule | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log, self.what, self.burst, self.window_s = log, what, burst, window_s
        self.schedule, self.clock = schedule, clock
        self._started: float | None = None  # when the window began
        self._said = 0  # lines passed in this window
        self.held = 0  # lines counted, not passed, in this window

    def __call__(self, line: str) -> None:
        now = self.clock()
        if self._started is None or now - self._started >= self.window_s:
            self.flush()
            self._started, self._said = now, 0
        if self._said < self.burst:
            self._said += 1
            self.log(line)
            return
        if not self.held and self.schedule is not None:
            self.schedule(self._started + self.window_s - now, self.flush)
        self.held += 1

    def flush(self) -> None:
        """Say how many lines were held back, if any (the window's end)."""
        if self.held:
            self.log(f"{self.held} more {self.what} in the last {self.window_s:g} s (at most "
                     f"{self.burst} are logged each {self.window_s:g} s)")
            self.held = 0
