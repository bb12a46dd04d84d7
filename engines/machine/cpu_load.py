"""How many cores other processes are using right now, and how many threads that leaves us.

llama.cpp's worker threads meet at a spinning barrier after every operation of a forward pass.
When another process takes one of their cores, the thread on it is descheduled for whole
scheduler slices while the others spin, so every operation waits a slice: on a 2-core machine
beside one busy process, two threads decoded at 29% of their quiet speed where one thread kept
~70%. torch's threads meet likewise at the end of each operation (smollm2-135m decoded
2.7 tokens/s beside a compile, 14 quietly). So the thread count follows the cores the rest of
the machine leaves free: llama.cpp's (backends/llama.py) and torch's (backends/torch_threads.py).

The readings are counters (Linux's /proc/stat and this process's /proc/self/stat), compared
between two moments: no sleeping, no sampling thread. The rule takes plain numbers, so a test
hands it a busy machine it does not have.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

# A core counts as taken by others once they use this much of it: a process using a
# fifth of a core (a browser tab, an editor) leaves our thread on it nearly its whole core.
TAKEN = 0.6
# Readings closer together than this are too coarse (clock ticks are 10 ms) to judge by.
MIN_SPAN_S = 0.25


@dataclass(frozen=True)
class CpuReading:
    """Cumulative CPU seconds at one moment: the whole machine's busy time (all cores),
    this process's own (all its threads), and the wall clock."""

    busy_s: float
    own_s: float
    wall_s: float


def others_busy(before: CpuReading, after: CpuReading) -> float | None:
    """Cores other processes kept busy between two readings (None: too short a span)."""
    span = after.wall_s - before.wall_s
    if span < MIN_SPAN_S:
        return None
    others = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    return max(0.0, others / span)


def free_threads(others: float, cores: int, most: int) -> int:
    """Threads that each get a core of their own beside `others` cores of other work:
    at least 1, at most `most` (the count asked for, or every core)."""
    taken = int(others + (1 - TAKEN))  # 0.6 of a core taken counts as a whole core
    return max(1, min(most, cores - taken))


def read_now() -> CpuReading | None:
    """This moment's counters; None where /proc is not there (macOS, Windows)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
        with open("/proc/self/stat", encoding="ascii", errors="replace") as f:
            own = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    values = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    busy = sum(values) - values[3] - values[4]
    own = int(own[11]) + int(own[12])  # utime, stime: fields 14 and 15 of the whole line
    return CpuReading(busy / tick, own / tick, time.monotonic())


class ThreadGauge:
    """Follows the free cores during a run: `check()` before a forward pass returns the
    thread count to use now, judged from the counters since its last reading (at most every
    MIN_SPAN_S: between two checks it costs a clock read)."""

    def __init__(self, most: int, cores: int | None = None, read=read_now,
                 clock=time.monotonic) -> None:
        self.most = most
        self.cores = cores or os.cpu_count() or 1
        self._read = read
        self._clock = clock  # the clock `read` stamps its readings with
        self._last = read()
        self.threads = most
        self.others = 0.0  # cores others used over the last span judged
        self.fewest = most  # the fewest threads this run used (what a run reports)

    def check(self) -> int:
        if self._last is None or self._clock() - self._last.wall_s < MIN_SPAN_S:
            return self.threads
        now = self._read()
        others = None if now is None else others_busy(self._last, now)
        if others is None:
            return self.threads
        self._last = now
        self.others = others
        self.threads = free_threads(others, self.cores, self.most)
        self.fewest = min(self.fewest, self.threads)
        return self.threads

    def note(self, who: str) -> str | None:
        """One line when other work took cores during the run and `who` (the library whose
        threads these are) ran on fewer; said once: the next run says its own."""
        if self.fewest >= self.most:
            return None
        fewest, self.fewest = self.fewest, self.most
        return (f"other work took cores during the run (last seen {self.others:.1f} of "
                f"{self.cores}): {who} ran on {fewest} thread{'s' if fewest > 1 else ''} "
                f"instead of {self.most} while it did, so no thread waited for a core")


_shared: dict[int, ThreadGauge] = {}
_shared_lock = threading.Lock()


def shared_gauge(most: int) -> ThreadGauge:
    """The process's one gauge for backends of `most` threads. Lanes compared by turns each
    had a gauge of their own, judged at their own steps: when load came or went, one lane
    ran for a span on the other's count (a quarter second: about ten steps at 1.4x), and
    plain decoding against itself read 0.97x "slower". One gauge switches them together."""
    with _shared_lock:
        gauge = _shared.get(most)
        if gauge is None:
            gauge = _shared[most] = ThreadGauge(most)
        return gauge


def measure_others(span_s: float = 0.3, read=read_now, sleep=time.sleep) -> float | None:
    """Cores other processes use now, over a short wait (before a run starts)."""
    before = read()
    if before is None:
        return None
    sleep(span_s)
    after = read()
    return None if after is None else others_busy(before, after)


def start_threads(most: int, cores: int | None = None, others: float | None = None) -> int:
    """Threads for something whose count is fixed once started (a spawned llama-server):
    the cores free now, `others` measured here unless handed in."""
    others = measure_others() if others is None else others
    return most if others is None else free_threads(others, cores or os.cpu_count() or 1, most)
