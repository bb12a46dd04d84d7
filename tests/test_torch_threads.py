"""torch's threads follow the cores other work leaves free (engines/backends/torch_threads.py),
on readings and a clock the test hands in: a count asked for is kept, a GPU's left alone, a
cost profile timed at the nominal count, and compiled graphs compiled at it."""

from __future__ import annotations

import pytest
from test_cpu_load import Machine, fewer_threads_mid_run_and_back

from specviz.engines.backends import torch_threads
from specviz.engines.backends.torch_threads import TorchThreads
from specviz.engines.machine.cpu_load import ThreadGauge


class FakeTorch:
    """torch's process-wide thread count, and the calls that set it."""

    def __init__(self, threads: int) -> None:
        self.threads, self.sets = threads, []

    def get_num_threads(self) -> int:
        return self.threads

    def set_num_threads(self, n: int) -> None:
        self.sets.append(n)
        self.threads = n


@pytest.fixture
def torch_default_of_two(monkeypatch):
    """torch's own count taken as 2 (whatever this machine's is), and torch's real count as
    it was after the test: it is process-wide."""
    import torch

    before = torch.get_num_threads()
    monkeypatch.setattr(torch_threads, "_default", 2)
    yield
    torch.set_num_threads(before)


def busy_gauge(m: Machine) -> ThreadGauge:
    return ThreadGauge(most=2, cores=2, read=m.read, clock=lambda: m.now)


def test_auto_threads_follow_other_work_and_come_back(torch_default_of_two):
    m, torch = Machine(cores=2), FakeTorch(threads=2)
    threads = TorchThreads(torch, None, "cpu", gauge=busy_gauge(m))
    m.ours = 2.0
    m.run(0.5)
    threads.set_now()
    assert torch.threads == 2 and torch.sets == []  # nothing set where nothing changed
    m.others, m.ours = 1.0, 1.0
    m.run(0.5)
    threads.set_now()
    assert torch.threads == 1
    m.others = 0.0
    m.run(0.5)
    threads.set_now()
    assert torch.threads == 2
    assert "torch ran on 1 thread instead of 2" in threads.note()
    assert threads.note() is None  # said once


def test_a_count_asked_for_is_kept_whatever_another_backend_set():
    torch = FakeTorch(threads=8)
    threads = TorchThreads(torch, 3, "cpu")
    assert threads.gauge is None and torch.threads == 3
    torch.set_num_threads(1)  # another backend in the process, following the free cores
    threads.set_now()
    assert torch.threads == 3
    assert threads.note() is None


def test_a_gpus_backend_leaves_the_cpu_threads_alone_unless_asked():
    torch = FakeTorch(threads=4)
    threads = TorchThreads(torch, None, "cuda")
    torch.set_num_threads(1)
    threads.set_now()
    assert threads.gauge is None and torch.threads == 1 and torch.sets == [1]
    TorchThreads(torch, 2, "cuda").set_now()
    assert torch.threads == 2


def test_one_default_thread_has_nothing_to_follow(monkeypatch):
    monkeypatch.setattr(torch_threads, "_default", 1)
    assert TorchThreads(FakeTorch(threads=1), None, "cpu").gauge is None


def test_a_block_at_the_nominal_count_gives_back_the_count_before(torch_default_of_two):
    m, torch = Machine(cores=2), FakeTorch(threads=2)
    threads = TorchThreads(torch, None, "cpu", gauge=busy_gauge(m))
    m.others, m.ours = 1.0, 1.0
    m.run(0.5)
    threads.set_now()
    with threads.nominal_count():
        assert torch.threads == 2
    assert torch.threads == 1


def test_the_backend_takes_fewer_threads_mid_run_with_the_same_logits(tiny_model_dir,
                                                                      torch_default_of_two):
    import torch

    from specviz.engines.backends.hf import TransformersBackend

    backend = TransformersBackend(tiny_model_dir, device="cpu", compile="off")
    m = Machine(cores=2)
    backend.cpu_threads = TorchThreads(torch, None, "cpu", gauge=busy_gauge(m))
    try:
        fewer_threads_mid_run_and_back(backend, m, "torch", atol=1e-4)
    finally:
        backend.close()


def test_a_new_compiled_width_is_compiled_at_the_nominal_count(tiny_model_dir, monkeypatch,
                                                              torch_default_of_two):
    """Inductor writes the count into the CPU kernels it compiles: a width first met while
    other work held a core is compiled at the nominal count; a graph already made runs at
    the free cores' count."""
    import torch

    from specviz.engines.backends import hf_compiled
    from specviz.engines.backends.hf import TransformersBackend

    backend = TransformersBackend(tiny_model_dir, device="cpu", compile="off")
    m = Machine(cores=2)
    threads = TorchThreads(torch, None, "cpu", gauge=busy_gauge(m))
    ran_at = []

    def fake_compile(fn, **options):
        return lambda *args: ran_at.append(torch.get_num_threads())

    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr(hf_compiled, "RUN_LAYERS", 0)  # the decoder in one call
    steps = hf_compiled.CompiledSteps(backend.model, tell=lambda _: None,
                                      compiling=threads.nominal_count)
    m.others, m.ours = 1.0, 1.0
    m.run(1.0)
    threads.set_now()
    assert torch.get_num_threads() == 1
    steps.rows(None, None, None, None, width=4)  # compiled now
    steps.rows(None, None, None, None, width=4)  # made already
    assert ran_at == [2, 1]
    assert torch.get_num_threads() == 1
    backend.close()
