"""torch's intra-op threads for the transformers backend: the count asked for, or, left to
auto on a CPU, torch's own count following the cores other work leaves free, as llama.cpp's
threads do (machine/cpu_load.py).

torch splits a CPU operation across OpenMP threads that meet when it ends, so beside a busy
process the thread whose core was taken holds every operation up: smollm2-135m decoded 2.7
tokens/s beside a compile where it decoded 14 quietly. `torch.set_num_threads` takes effect
at the next operation and is process-wide, so the count is set before each forward wherever
it differs from what torch has (another backend in the process may have set its own). The
inter-op pool cannot be resized once started, and a forward does not use it.

Inductor writes the thread count into the CPU kernels it compiles unless it is the machine's
core count (then they read it when they run): compiled steps are therefore compiled at the
nominal count (`nominal_count()`), never at a count a busy moment left.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..machine.cpu_load import ThreadGauge, shared_gauge

_default: int | None = None  # torch's own count in this process, before specviz set one


def default_threads(torch) -> int:
    """torch's own thread count (the machine's physical cores, or OMP_NUM_THREADS), read
    once per process, before the first backend sets any."""
    global _default
    if _default is None:
        _default = torch.get_num_threads()
    return _default


class TorchThreads:
    """The thread count a transformers backend's forwards run at."""

    def __init__(self, torch, asked: int | None, device: str,
                 gauge: ThreadGauge | None = None) -> None:
        self._torch = torch
        default = default_threads(torch)  # read before any backend of this process sets one
        self.nominal = asked or default
        # A GPU's kernels do not wait on CPU threads: left as they are unless asked for.
        self._managed = asked is not None or device == "cpu"
        follows = asked is None and device == "cpu" and self.nominal > 1
        self.gauge = (gauge or shared_gauge(self.nominal)) if follows else None
        self.set_now(held=True)  # loading and the races at init time the nominal count

    @property
    def now(self) -> int:
        return self._torch.get_num_threads()

    def set_now(self, held: bool = False, count: int | None = None) -> None:
        """Before a forward: the nominal count (or `count`) where `held` or asked for, else
        the free cores' (judged at most every cpu_load.MIN_SPAN_S)."""
        if not self._managed:
            return
        n = (count or self.nominal) if held or self.gauge is None else self.gauge.check()
        if self._torch.get_num_threads() != n:
            self._torch.set_num_threads(n)

    @contextmanager
    def nominal_count(self) -> Iterator[None]:
        """The nominal count for the block (a graph compiled in it), then the count before."""
        before = self._torch.get_num_threads()
        self.set_now(held=True)
        try:
            yield
        finally:
            if self._managed and self._torch.get_num_threads() != before:
                self._torch.set_num_threads(before)

    def note(self) -> str | None:
        return None if self.gauge is None else self.gauge.note("torch")
