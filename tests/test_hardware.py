"""Hardware rules with the facts of other machines injected: the AMX rule, the probe, crashes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from specviz.engines.backends import llama_buffers as lb
from specviz.engines.backends import probe
from specviz.engines.errors import BackendCrashed, BackendError
from specviz.engines.machine.hardware import CpuFacts, parse_cpuinfo

SAPPHIRE_RAPIDS = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8488C
flags\t\t: fpu sse sse2 avx avx2 fma f16c avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8
"""
EPYC = """processor\t: 0
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse sse2 avx avx2 fma f16c avx512f avx512_vnni
"""
GRAVITON = """processor\t: 0
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics asimddp sve
CPU implementer\t: 0x41
"""


def facts(cpuinfo: str, arch: str = "x86_64") -> CpuFacts:
    model, flags = parse_cpuinfo(cpuinfo)
    return CpuFacts(model=model, arch=arch, flags=flags, cores=2)


def test_cpuinfo_is_read_for_x86_and_arm():
    spr, epyc, arm = facts(SAPPHIRE_RAPIDS), facts(EPYC), facts(GRAVITON, "aarch64")
    assert spr.has_amx and not epyc.has_amx and not arm.has_amx
    assert spr.model.startswith("Intel(R) Xeon") and "amx_int8" in spr.features
    assert epyc.features == ["avx2", "fma", "f16c", "avx512f", "avx512_vnni"]
    assert arm.features == ["asimd", "sve"]
    assert len({spr.fingerprint, epyc.fingerprint, arm.fingerprint}) == 3


def test_amx_is_left_out_unless_allowed_and_repacking_stays():
    sapphire_rapids_build = ["AMX", "CPU_REPACK"]
    assert lb.allowed_buffers(sapphire_rapids_build, allow_amx=False) == ["CPU_REPACK"]
    assert lb.allowed_buffers(sapphire_rapids_build, allow_amx=True) == ["AMX", "CPU_REPACK"]
    assert lb.allowed_buffers(["CPU_REPACK"], allow_amx=False) == ["CPU_REPACK"]
    assert not lb.amx_allowed({}) and not lb.amx_allowed({lb.ENV_AMX: "0"})
    assert lb.amx_allowed({lb.ENV_AMX: "1"}) and lb.amx_allowed({lb.ENV_AMX: "on"})


def test_without_the_buffer_list_only_an_amx_build_on_an_amx_cpu_turns_repacking_off():
    amx_build = "CPU : AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 |"
    plain_build = "CPU : AVX2 = 1 | AVX512 = 1 | REPACK = 1 |"
    spr, epyc = facts(SAPPHIRE_RAPIDS), facts(EPYC)
    assert lb.fallback_without_list(spr.has_amx, amx_build, allow_amx=False)
    assert not lb.fallback_without_list(spr.has_amx, amx_build, allow_amx=True)
    assert not lb.fallback_without_list(spr.has_amx, plain_build, allow_amx=False)
    assert not lb.fallback_without_list(epyc.has_amx, amx_build, allow_amx=False)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    from tiny_gguf import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-q4_0.gguf")


def test_the_chosen_list_is_what_llama_cpp_loads_into(tiny_gguf, monkeypatch):
    """The AMX rule works by editing llama.cpp's list of extra buffer types before a load.
    No AMX here, so the same edit is shown on CPU_REPACK: left out, no weight is repacked."""
    from specviz.engines.backends.llama import LlamaBackend, system_info

    default = LlamaBackend(tiny_gguf, n_ctx=128, threads=1)
    if "REPACK = 1" not in system_info() or "CPU_REPACK" not in default.weight_buffers:
        pytest.skip(f"llama.cpp repacks nothing on this CPU: {default.weight_buffers}")
    monkeypatch.setattr(lb, "allowed_buffers", lambda available, allow: [])
    plain = LlamaBackend(tiny_gguf, n_ctx=128, threads=1)
    monkeypatch.undo()
    again = LlamaBackend(tiny_gguf, n_ctx=128, threads=1)
    assert "CPU_REPACK" not in plain.weight_buffers, plain.weight_buffers
    assert again.weight_buffers == default.weight_buffers
    ids = default.tokenize("def x(a): return a")
    repacked, unpacked, restored = (b.forward(ids)[0] for b in (default, plain, again))
    assert (repacked == restored).all()  # same kernels, same numbers
    assert abs(repacked - unpacked).max() < 0.1  # other kernels, the same model
    for b in (default, plain, again):
        b.close()


# ------------------------------------------------------------------ the probe


@pytest.fixture
def probe_cache(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "probes.json"
    monkeypatch.setattr(probe, "cache_path", lambda: path)
    return path


def crashing_child(stage: str = "one") -> list[str]:
    """A child that reports a stage, then dies of a segmentation fault as AMX did."""
    code = (f"import json, os, signal; print(json.dumps({{'stage': 'load'}}), flush=True); "
            f"print(json.dumps({{'stage': '{stage}'}}), flush=True); "
            "os.kill(os.getpid(), signal.SIGSEGV)")
    return [sys.executable, "-c", code, "--"]


def test_a_crash_in_the_child_is_named_in_one_line_and_remembered(probe_cache, tiny_gguf):
    calls = []

    def runner(backend, model, device):
        calls.append(backend)
        return probe.run_child(backend, model, device, command=crashing_child())

    with pytest.raises(BackendCrashed) as first:
        probe.ensure_works("llama", tiny_gguf, runner=runner)
    with pytest.raises(BackendCrashed) as second:
        probe.ensure_works("llama", tiny_gguf, runner=runner)
    message = str(first.value)
    assert calls == ["llama"]  # the crash is cached: the second use does not probe again
    assert str(second.value) == message and "\n" not in message
    assert "SIGSEGV in its first forward" in message and "llama-cpp-python" in message
    assert "specviz doctor" in message
    stored = json.loads(probe_cache.read_text())
    assert [r["outcome"] for r in stored.values()] == ["crash"]


def test_the_advice_fits_the_machine():
    crash = probe.ProbeResult("llama", "cpu", "crash", detail="SIGSEGV", stage="one")
    spr, epyc = facts(SAPPHIRE_RAPIDS), facts(EPYC)
    assert "-DGGML_AMX_INT8=OFF" in probe.advice(crash, spr)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(lb.ENV_AMX, "1")
        assert f"unset {lb.ENV_AMX}" in probe.advice(crash, spr)
        assert f"unset {lb.ENV_AMX}" not in probe.advice(crash, epyc)
    torch_crash = probe.ProbeResult("transformers", "cpu", "crash", detail="SIGILL")
    assert "--backend llama" in probe.advice(torch_crash, epyc)


def test_a_real_probe_succeeds_once_then_costs_nothing(probe_cache, tiny_gguf):
    first = probe.ensure_works("llama", tiny_gguf)
    assert first is not None and first.ok and first.stage == "done"
    assert first.batch_agrees is True and first.max_logit_diff < 1.0
    assert first.one_ms > 0 and first.batch_ms > 0
    assert probe.ensure_works("llama", tiny_gguf) is None  # cached


def test_an_error_in_the_child_is_not_taken_for_a_crash(probe_cache, tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    result = probe.ensure_works("llama", broken)
    assert result.outcome == "error" and "could not load" in result.detail
    assert not probe_cache.exists()  # a bad file says nothing about the machine


def test_a_stored_crash_stops_the_command_line_with_exit_2(probe_cache, tiny_gguf, capsys):
    from specviz.app.cli.main import main

    key = probe.current_key("llama", "auto")
    probe.store(key, probe.ProbeResult("llama", "auto", "crash", detail="SIGSEGV",
                                       stage="one", build="llama-cpp-python test"))
    code = main(["run", "--target", str(tiny_gguf), "--no-chat", "--prompt", "def x",
                 "--max-tokens", "4"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "llama backend crashed on this machine" in err


def test_a_timeout_is_an_error_not_a_hang(probe_cache, tiny_gguf):
    slow = [sys.executable, "-c", "import time; time.sleep(30)", "--"]
    result = probe.run_child("llama", str(tiny_gguf), "auto", timeout=1, command=slow)
    assert result.outcome == "timeout"
    with pytest.raises(BackendError, match="did not load the model"):
        probe.ensure_works("llama", tiny_gguf, runner=lambda *a: result)


def test_a_probe_killed_from_outside_is_not_taken_for_a_crash(probe_cache, tiny_gguf):
    killed = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
              "--"]
    result = probe.run_child("llama", str(tiny_gguf), "auto", command=killed)
    assert result.outcome == "killed" and result.detail == "SIGKILL"
    with pytest.raises(BackendError, match="out of memory, or from outside"):
        probe.ensure_works("llama", tiny_gguf, runner=lambda *a: result)
    assert not probe_cache.exists()  # nothing remembered: the next run tries again


def test_doctor_replaces_what_was_known_of_a_backend_on_any_device(probe_cache):
    crash = probe.ProbeResult("llama", "cpu", "crash", detail="SIGSEGV")
    probe.store("llama-cpu", crash)
    probe.store("torch", probe.ProbeResult("transformers", "auto", "ok"))
    probe.store("llama-auto", probe.ProbeResult("llama", "auto", "ok"), forget_backend=True)
    assert set(json.loads(probe_cache.read_text())) == {"torch", "llama-auto"}


@pytest.mark.parametrize(("cores", "headless", "window"), [(1, 1, 1), (2, 2, 2), (4, 4, 3),
                                                           (16, 16, 15)])
def test_threads_beside_the_window_leave_a_core_except_on_two(cores, headless, window):
    from specviz.engines.machine.hardware import compute_threads

    assert compute_threads(cores=cores) == headless
    assert compute_threads(beside_a_window=True, cores=cores) == window
