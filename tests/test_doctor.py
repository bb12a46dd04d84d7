"""`specviz doctor`: the advice for other machines' facts, and the command itself."""

from __future__ import annotations

import json

from specviz.app.cli.main import main
from specviz.engines import doctor

CPU = {"model": "Intel(R) Xeon(R) Platinum 8488C", "arch": "x86_64", "cores": 2,
       "memory_gib": 16.0, "features": ["avx2", "avx512f", "amx_int8"], "amx": True}
LLAMA_CPU_ONLY = {"installed": True, "version": "0.3.36", "system_info": "CPU : AVX2 = 1",
                  "gpu_offload": False, "extra_buffers": ["AMX", "CPU_REPACK"],
                  "weights_may_use": ["CPU_REPACK"], "amx_allowed": False}
TORCH_CPU = {"installed": True, "version": "2.13.0+cpu", "cuda": [], "cuda_build": None,
             "mps": False, "transformers": "5.23.0"}


def machine(**changes) -> dict:
    facts = {"cpu": CPU, "gpu": {"nvidia": False, "amd": False, "apple": False},
             "llama": LLAMA_CPU_ONLY, "torch": TORCH_CPU,
             "models": [{"name": "smollm2-135m", "present": True, "path": "/m.gguf"}],
             "profiles": ["smollm2-135m--llama--cpu--t2"], "probes": []}
    return {**facts, **changes}


def test_a_gpu_the_builds_cannot_use_gets_the_rebuild_command():
    nvidia = doctor.advice(machine(gpu={"nvidia": True, "amd": False, "apple": False}))
    assert any('CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall' in a for a in nvidia)
    assert any("CUDA build of torch" in a for a in nvidia)
    apple = doctor.advice(machine(gpu={"nvidia": False, "amd": False, "apple": True}))
    assert any("-DGGML_METAL=on" in a for a in apple)
    offloading = dict(LLAMA_CPU_ONLY, gpu_offload=True)
    cuda_torch = dict(TORCH_CPU, cuda=["NVIDIA H100"])
    fine = doctor.advice(machine(gpu={"nvidia": True, "amd": False, "apple": False},
                                 llama=offloading, torch=cuda_torch))
    assert not any("CUDA" in a for a in fine)


def test_amx_missing_models_and_profiles_are_said():
    advice = doctor.advice(machine(models=[], profiles=[]))
    assert any("SPECVIZ_LLAMA_AMX=1" in a for a in advice)
    assert any("specviz models pull smollm2-135m" in a for a in advice)
    assert any("specviz profile" in a for a in advice)
    plain_cpu = dict(CPU, amx=False, features=["avx2"])
    assert not any("AMX" in a for a in doctor.advice(machine(cpu=plain_cpu)))


def test_a_crashed_probe_is_the_crash_line_and_a_disagreement_is_explained():
    crash = {"backend": "llama", "device": "auto", "outcome": "crash", "stage": "one",
             "detail": "SIGSEGV", "build": "llama-cpp-python 0.3.36"}
    differs = {"backend": "llama", "device": "auto", "outcome": "ok", "stage": "done",
               "batch_agrees": False, "max_logit_diff": 0.7}
    advice = doctor.advice(machine(probes=[crash, differs]))
    assert any("crashed on this machine (SIGSEGV in its first forward" in a for a in advice)
    assert any("differ from one-by-one decoding" in a and "0.7" in a for a in advice)


def test_doctor_prints_this_machine_as_json_and_as_a_table(capsys):
    assert main(["doctor", "--json", "--no-probe"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["cpu"]["cores"] >= 1 and facts["llama"]["installed"]
    assert "CPU :" in facts["llama"]["system_info"] and "AMX" not in facts["llama"][
        "weights_may_use"]
    assert facts["torch"]["version"].startswith("2.")
    assert main(["doctor", "--no-probe"]) == 0
    table = capsys.readouterr().out
    assert table.startswith("CPU ") and "weight buffers" in table and "torch" in table


def test_the_dtype_raced_for_each_model_here_is_listed():
    raced = {**TORCH_CPU, "dtype_races": [
        {"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "dtype": "float32", "float32_ms": 32.8,
         "bfloat16_ms": 38.7, "threads": None},
        {"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "dtype": "bfloat16", "float32_ms": 60.1,
         "bfloat16_ms": 41.0, "threads": 2}]}
    table = doctor.render({**machine(torch=raced), "advice": []})
    assert "transformers dtype" in table
    assert ("SmolLM2-135M-Instruct.Q4_1.gguf on the default threads: float32 (32.8 ms in "
            "float32, 38.7 in bfloat16); SmolLM2-135M-Instruct.Q4_1.gguf on 2 threads: bfloat16 "
            "(60.1 ms in float32, 41.0 in bfloat16)") in table
    assert "transformers dtype" not in doctor.render({**machine(), "advice": []})


def test_a_race_is_remembered_with_what_doctor_names(tmp_path):
    from specviz.engines.backends import cpu_dtype

    store = tmp_path / "cpu-dtype.json"
    cpu_dtype.remember(store, tmp_path / "m.gguf", None,
                       {"dtype": "bfloat16", "float32_ms": 60.0, "bfloat16_ms": 44.0})
    (race,) = cpu_dtype.raced_here(store)
    assert race["model"] == "m.gguf" and race["dtype"] == "bfloat16"


def test_doctor_says_when_other_work_has_the_cores_and_what_threads_follow():
    from specviz.engines.doctor import _load_line, load_facts

    busy = load_facts(2, others=1.0)
    assert busy["threads"] < busy["most"] or busy["most"] == 1
    if busy["most"] > 1:
        assert "would run 1 of" in _load_line(busy)
    assert "take all" in _load_line(load_facts(2, others=0.1))
    assert "not readable" in _load_line({"others": None})


def test_torchs_build_is_read_from_its_version_file_without_importing_it(tmp_path):
    cpu = tmp_path / "cpu.py"
    cpu.write_text("from typing import Optional\n__version__ = '2.13.0+cpu'\ndebug = False\n"
                   "cuda: Optional[str] = None\nhip: Optional[str] = None\n")
    assert doctor.torch_build(cpu) == {"__version__": "2.13.0+cpu", "debug": False,
                                       "cuda": None, "hip": None}
    cuda = tmp_path / "cuda.py"
    cuda.write_text("__version__ = '2.13.0+cu128'\ncuda: Optional[str] = '12.8'\n")
    assert doctor.torch_build(cuda)["cuda"] == "12.8"
    broken = tmp_path / "broken.py"
    broken.write_bytes(b"__version__ = (\xff")
    assert doctor.torch_build(broken) == {} and doctor.torch_build(tmp_path / "no.py") == {}


def test_torchs_facts_are_what_importing_it_says():
    import torch

    facts = doctor.torch_facts()
    assert facts["version"] == torch.__version__
    assert facts["cuda_build"] == torch.version.cuda
    assert len(facts["cuda"]) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
