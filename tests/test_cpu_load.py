"""The thread count follows the cores other work leaves free (engines/machine/cpu_load.py):
the rule on readings handed in, the gauge on an injected clock, and llama.cpp switching
threads mid-run with the same logits."""

from __future__ import annotations

import numpy as np
import pytest

from specviz.engines.machine import cpu_load
from specviz.engines.machine.cpu_load import (
    CpuReading,
    ThreadGauge,
    free_threads,
    others_busy,
    start_threads,
)


def test_others_are_the_machines_busy_time_less_our_own():
    before = CpuReading(busy_s=100.0, own_s=10.0, wall_s=0.0)
    # one second: both cores busy, ours 1.0 of them: one core's worth of others
    after = CpuReading(busy_s=102.0, own_s=11.0, wall_s=1.0)
    assert others_busy(before, after) == pytest.approx(1.0)
    assert others_busy(before, CpuReading(100.5, 10.5, 1.0)) == 0.0  # all busy time ours


def test_a_span_too_short_to_judge_says_nothing():
    before = CpuReading(0.0, 0.0, 0.0)
    assert others_busy(before, CpuReading(0.2, 0.0, cpu_load.MIN_SPAN_S / 2)) is None


@pytest.mark.parametrize(("others", "cores", "most", "threads"), [
    (0.0, 2, 2, 2),   # quiet
    (0.3, 2, 2, 2),   # a tab or an editor: our thread keeps nearly its core
    (0.67, 2, 2, 1),  # one busy loop beside our two spinning threads (3 runnable, 2 cores)
    (1.0, 2, 2, 1),   # one busy loop beside one thread
    (1.4, 2, 2, 1),   # two busy loops: never below one thread
    (2.0, 2, 2, 1),
    (1.0, 8, 7, 7),   # beside a window on 8 cores: the count asked is the most
    (3.0, 8, 8, 5),
])
def test_threads_are_the_cores_left_free(others, cores, most, threads):
    assert free_threads(others, cores, most) == threads


class Machine:
    """Counters of a machine whose other work the test sets, on a clock the test moves."""

    def __init__(self, cores: int) -> None:
        self.cores, self.now, self.busy, self.own = cores, 0.0, 0.0, 0.0
        self.others = 0.0  # cores others use
        self.ours = 0.0  # cores we use

    def run(self, seconds: float) -> None:
        self.now += seconds
        self.busy += (self.others + self.ours) * seconds
        self.own += self.ours * seconds

    def read(self) -> CpuReading:
        return CpuReading(self.busy, self.own, self.now)


def test_the_gauge_follows_other_work_coming_and_going():
    m = Machine(cores=2)
    gauge = ThreadGauge(most=2, cores=2, read=m.read, clock=lambda: m.now)
    m.ours = 2.0
    m.run(0.5)
    assert gauge.check() == 2
    m.others, m.ours = 0.67, 1.33  # a busy loop starts: three runnable on two cores
    m.run(0.5)
    assert gauge.check() == 1
    m.others, m.ours = 1.0, 1.0
    m.run(0.5)
    assert gauge.check() == 1  # one thread beside it: stays
    m.others, m.ours = 0.0, 1.0  # the loop ends
    m.run(0.5)
    assert gauge.check() == 2
    assert gauge.fewest == 1


def test_the_gauge_reads_nothing_between_checks_closer_than_its_span():
    m = Machine(cores=2)
    reads = []

    def read():
        reads.append(m.now)
        return m.read()

    gauge = ThreadGauge(most=2, cores=2, read=read, clock=lambda: m.now)
    m.others, m.ours = 1.0, 1.0
    for _ in range(15):  # one and a half spans
        m.run(cpu_load.MIN_SPAN_S / 10)
        gauge.check()
    assert len(reads) == 2  # at construction and once a span had passed
    assert gauge.threads == 1


def test_a_spawned_servers_threads_come_from_the_free_cores():
    assert start_threads(2, cores=2, others=1.0) == 1
    assert start_threads(2, cores=2, others=0.1) == 2


@pytest.mark.parametrize(("asked", "others", "threads"), [(None, 1.0, 3), (None, 0.1, 4),
                                                         (2, 3.0, 2)])
def test_a_spawned_server_lane_starts_on_the_cores_free_when_it_starts(monkeypatch, tmp_path,
                                                                     asked, others, threads):
    """Where it is wired: a llama-server lane's session (as the run builder makes it) starts
    its server with the threads the run asks for, or else the compute threads less the
    cores other work holds as it starts (4 cores here, one of them busy: 3)."""
    from specviz.engines.host import server_lanes
    from specviz.engines.host.run_spec import LaneSpec, ModelChoice, ServerSpec
    from specviz.engines.loop.session import RunSettings
    from specviz.engines.machine import hardware
    from specviz.engines.oracles.registry import SPAWNED
    from specviz.engines.servers import spawn

    started = []
    monkeypatch.setattr(spawn, "spawned_session",
                        lambda _spec, model, threads, _settings, ctx=None: started.append(
                            (model, threads)) or "session")
    monkeypatch.setattr(hardware, "compute_threads", lambda *_a, **_k: 4)
    monkeypatch.setattr(cpu_load.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(cpu_load, "measure_others", lambda *_a, **_k: others)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    lane = LaneSpec(SPAWNED, 0, server=ServerSpec())
    model = ModelChoice(str(gguf), "llama", "cpu", asked)
    assert server_lanes.build_session(lane, RunSettings("hi"), model) == "session"
    assert started == [(gguf, threads)]


def test_this_machines_counters_read(tmp_path):
    reading = cpu_load.read_now()
    if reading is None:
        pytest.skip("no /proc here")
    assert reading.busy_s > 0 and reading.own_s > 0
    assert cpu_load.measure_others(span_s=cpu_load.MIN_SPAN_S) is not None


def test_llama_cpp_takes_fewer_threads_mid_run_and_back(tmp_path):
    from tiny_gguf import write_tiny_gguf

    from specviz.engines.backends.llama import LlamaBackend

    backend = LlamaBackend(write_tiny_gguf(tmp_path / "tiny.gguf"), n_ctx=256, threads=None)
    m = Machine(cores=2)
    backend.threads = 2
    backend._gauge = ThreadGauge(most=2, cores=2, read=m.read, clock=lambda: m.now)
    try:
        fewer_threads_mid_run_and_back(backend, m, "llama.cpp", atol=1e-3)
    finally:
        backend.close()


def fewer_threads_mid_run_and_back(backend, m: Machine, who: str, atol: float) -> None:
    """`backend` (following a gauge on `m`, at most 2 threads) forwards on 1 thread once
    other work takes a core, with the quiet logits; says so once; and a cost profile's
    forwards are timed at 2 however busy the machine."""
    ids = backend.tokenize("def add(x, y): return x + y", add_special=True)
    quiet = backend.forward(ids, logits=3).copy()
    assert backend.threads_now == 2
    m.others, m.ours = 1.0, 1.0
    m.run(1.0)
    backend.reset()
    busy = backend.forward(ids, logits=3).copy()
    assert backend.threads_now == 1
    np.testing.assert_allclose(busy, quiet, atol=atol)
    assert f"{who} ran on 1 thread instead of 2" in backend.busy_note()
    assert backend.busy_note() is None  # said once
    with backend.holding_threads():  # a cost profile is timed at its own count
        assert backend.threads_now == 2
        m.run(1.0)
        backend.reset()
        backend.forward(ids)
        assert backend.threads_now == 2


def test_a_thread_count_asked_for_is_kept(tmp_path):
    from tiny_gguf import write_tiny_gguf

    from specviz.engines.backends.llama import LlamaBackend

    backend = LlamaBackend(write_tiny_gguf(tmp_path / "tiny.gguf"), n_ctx=256, threads=2)
    try:
        assert backend._gauge is None
        assert backend.share()._gauge is None
    finally:
        backend.close()


def test_backends_of_one_process_follow_one_gauge(tmp_path, monkeypatch):
    # Lanes compared by turns must switch thread counts together: each with a gauge of its
    # own, one ran a quarter second on the other's count when load came or went.
    from tiny_gguf import write_tiny_gguf

    from specviz.engines.backends.llama import LlamaBackend

    monkeypatch.setattr("specviz.engines.backends.llama.compute_threads", lambda: 2)
    assert cpu_load.shared_gauge(2) is cpu_load.shared_gauge(2)
    assert cpu_load.shared_gauge(3) is not cpu_load.shared_gauge(2)
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    a, b = LlamaBackend(path, n_ctx=256), LlamaBackend(path, n_ctx=256)
    try:
        assert a._gauge is b._gauge is cpu_load.shared_gauge(2)
    finally:
        a.close()
        b.close()
