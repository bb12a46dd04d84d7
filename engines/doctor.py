"""`specviz doctor`: what this machine offers, what works on it, and what to install.

`gather()` collects the facts (the CPU, llama.cpp's build and buffer types, torch's devices,
each backend probed in a child process on smollm2-135m and kept until its build changes
(doctor_probes.py), the models and cost profiles here);
`advice()` turns facts into the one command that gets what is missing, and takes them as a
plain dict so that a test can hand it another machine's; `render()` prints the table.
"""

from __future__ import annotations

import ast
import importlib.util
import platform
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from . import doctor_probes
from .backends import cpu_dtype, probe
from .machine.hardware import CpuFacts, read_cpu

PROBE_MODEL = "smollm2-135m"
REINSTALL = "pip install --force-reinstall --no-cache-dir --no-deps llama-cpp-python"


def gather(run_probes: bool = True, say: Callable[[str], None] = lambda _: None,
           refresh: bool = False) -> dict:
    cpu = read_cpu()
    facts = {
        "cpu": {"model": cpu.model, "arch": cpu.arch, "cores": cpu.cores,
                "memory_gib": cpu.memory_gib, "features": cpu.features, "amx": cpu.has_amx},
        "gpu": gpu_hardware(),
        "load": load_facts(cpu.cores),
        "llama": llama_facts(),
        "torch": torch_facts(),
        "models": model_facts(),
        "profiles": profile_facts(),
        "window": window_facts(),
        "probes": [],
    }
    if run_probes:
        facts["probes"] = probe_backends(facts, say, refresh)
    facts["advice"] = advice(facts)
    return facts


def load_facts(cores: int, others: float | None = None) -> dict:
    """How busy the machine is now, and the threads llama.cpp's automatic count would take."""
    from .machine.cpu_load import free_threads, measure_others
    from .machine.hardware import compute_threads

    others = measure_others() if others is None else others
    if others is None:
        return {"others": None}
    most = compute_threads()
    return {"others": round(others, 2), "threads": free_threads(others, cores, most),
            "most": most}


def _load_line(load: dict) -> str:
    if load.get("others") is None:
        return "not readable here (no /proc)"
    busy = f"other work uses {load['others']:.1f} of the cores now"
    if load["threads"] < load["most"]:
        return (f"{busy}: llama.cpp's automatic threads would run {load['threads']} of "
                f"{load['most']} (a thread beside busy work stalls the others at every step; "
                "they come back when the cores are free)")
    return f"{busy}: llama.cpp's automatic threads take all {load['most']}"


def gpu_hardware() -> dict:
    """GPUs the machine has, whatever the libraries were built for."""
    return {
        "nvidia": bool(shutil.which("nvidia-smi")) or Path("/proc/driver/nvidia").exists(),
        "amd": Path("/opt/rocm").exists() or Path("/dev/kfd").exists(),
        "apple": platform.system() == "Darwin" and platform.machine() == "arm64",
    }


def window_facts() -> dict:
    """Whether Qt finds the system libraries it needs for a window (on Linux)."""
    from .machine import display_libs

    if not display_libs.needed():
        return {"checked": False}
    found = display_libs.check()
    return {"checked": True, "platform": found.platform, "missing": list(found.missing),
            "how": found.how, "advice": found.advice() if found.missing else ""}


def llama_facts() -> dict:
    if importlib.util.find_spec("llama_cpp") is None:
        return {"installed": False}
    from .backends import llama_buffers
    from .backends.llama import llama_lib, system_info

    lib = llama_lib()
    extra = llama_buffers.extra_buffers(lib)
    available = extra.available if extra else []
    allow = llama_buffers.amx_allowed()
    return {
        "installed": True,
        "version": probe.package_version("llama-cpp-python"),
        "system_info": system_info(),
        "gpu_offload": bool(lib.llama_supports_gpu_offload()),
        "extra_buffers": available,
        "weights_may_use": llama_buffers.allowed_buffers(available, allow),
        "amx_allowed": allow,
    }


def torch_facts() -> dict:
    spec = importlib.util.find_spec("torch")
    if spec is None:
        return {"installed": False}
    facts = {"installed": True, "transformers": probe.package_version("transformers"),
             "dtype_races": cpu_dtype.raced_here(cpu_dtype.store_path())}
    build = torch_build(Path(spec.origin or "").parent / "version.py")
    if build.get("__version__") and not (build.get("cuda") or build.get("hip")
                                         or gpu_hardware()["apple"]):
        # A CPU build has no device to ask about: importing torch only to hear so took
        # 3-6 s of doctor's 5-14.
        return {**facts, "version": build["__version__"], "cuda": [], "cuda_build": None,
                "mps": False}
    import torch

    cuda = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    return {**facts, "version": torch.__version__, "cuda": cuda,
            "cuda_build": torch.version.cuda, "mps": mps}


def torch_build(version_file: Path) -> dict:
    """The constants torch's build wrote into torch/version.py (its version, the CUDA or
    ROCm it was built for), read as text: {} where it cannot be read."""
    try:
        tree = ast.parse(version_file.read_text(encoding="utf-8"))
    except (OSError, ValueError, SyntaxError):
        return {}
    found = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        value = getattr(node, "value", None)
        for target in targets:
            if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
                found[target.id] = value.value
    return found


def model_facts() -> list[dict]:
    from .models import is_present, load_registry, model_path

    return [{"name": s.name, "present": is_present(s), "path": str(model_path(s))}
            for s in load_registry().values()]


def profile_facts() -> list[str]:
    from .cost.profile import profiles_dir

    folder = profiles_dir()
    # a cost profile's name holds its backend, device and threads; beside them lie the
    # small-row and dtype choices, which are not profiles
    return sorted(p.stem for p in folder.glob("*--*.json")) if folder.is_dir() else []


def probe_backends(facts: dict, say: Callable[[str], None], refresh: bool = False,
                   runner: probe.Runner | None = None) -> list[dict]:
    """Each installed backend's probe: kept from an earlier doctor where it tried the same
    build, CPU and model (doctor_probes.py), else tried afresh in a child process (also with
    `refresh`). A fresh result replaces the stored ones, so a crash found earlier is
    forgotten once the machine is fixed."""
    present = {m["name"]: m for m in facts["models"]}.get(PROBE_MODEL, {})
    if not present.get("present"):
        return []
    path = doctor_probes.cache_path()
    kept, problem = ({}, None) if refresh else doctor_probes.read(path)
    if problem:
        say(f"ignoring the kept probes in {path} ({problem}): probing again, replacing it")
    results, keep = [], {}
    for backend, key in (("llama", "llama"), ("transformers", "torch")):
        if not facts[key].get("installed"):
            continue
        wanted = doctor_probes.probe_key(backend, present["path"])
        result = doctor_probes.kept_result(kept.get(backend), wanted)
        if result is not None:
            keep[backend] = kept[backend]
            results.append(result)
            continue
        say(f"probing {backend} on {PROBE_MODEL} in a child process...")
        fresh = (runner or probe.run_child)(backend, present["path"], "auto")
        if fresh.outcome in ("ok", "crash"):
            probe.store(probe.current_key(backend, None), fresh, forget_backend=True)
        if fresh.outcome in doctor_probes.KEPT:
            keep[backend] = doctor_probes.entry(wanted, fresh)
        results.append(asdict(fresh))
    if keep != kept or problem:
        unwritten = doctor_probes.write(path, keep)
        if unwritten:
            say(unwritten)
    return results


def advice(facts: dict) -> list[str]:
    """One line per thing to do, each with its command."""
    out: list[str] = []
    gpu, llama, torch = facts["gpu"], facts["llama"], facts["torch"]
    if not llama.get("installed"):
        out.append("llama.cpp backend missing: pip install llama-cpp-python")
    elif not llama.get("gpu_offload"):
        if gpu["nvidia"]:
            out.append(f'llama.cpp was built without CUDA: CMAKE_ARGS="-DGGML_CUDA=on" {REINSTALL}')
        elif gpu["apple"]:
            out.append(f'llama.cpp was built without Metal: CMAKE_ARGS="-DGGML_METAL=on" '
                       f"{REINSTALL}")
        elif gpu["amd"]:
            out.append(f'llama.cpp was built without ROCm: CMAKE_ARGS="-DGGML_HIP=on" {REINSTALL}')
    window = facts.get("window", {})
    if window.get("missing"):
        out.append(window["advice"])
    if not torch.get("installed"):
        out.append("transformers backend missing: pip install torch transformers")
    elif gpu["nvidia"] and not torch.get("cuda"):
        out.append("torch cannot use the NVIDIA GPU (a CPU build): install a CUDA build of torch "
                   "(the selector on pytorch.org gives the pip command)")
    if facts["cpu"]["amx"] and llama.get("installed") and not llama.get("amx_allowed"):
        out.append("AMX is left out of llama.cpp's weight buffers (it crashes on many cloud "
                   "machines); SPECVIZ_LLAMA_AMX=1 allows it")
    models = {m["name"]: m["present"] for m in facts["models"]}
    if not models.get(PROBE_MODEL):
        out.append(f"no model to probe the backends with: specviz models pull {PROBE_MODEL}")
    cpu = _cpu(facts)
    for result in facts["probes"]:
        r = probe.from_dict(result)
        if r.outcome == "crash":
            out.append(probe.crash_message(r, cpu))
        elif r.outcome in ("error", "timeout", "killed"):
            out.append(f"{r.backend} backend failed its probe ({r.outcome}: {r.detail})")
        elif r.batch_agrees is False:
            out.append(f"{r.backend}: a batch's greedy tokens differ from one-by-one decoding "
                       f"(logits differ by up to {r.max_logit_diff}); specviz reports where "
                       "a speculative run departs from plain decoding")
    if not facts["profiles"]:
        out.append("no cost profile yet: the first run with --k auto measures one (or "
                   "specviz profile --target MODEL)")
    return out


def _cpu(facts: dict) -> CpuFacts:
    c = facts["cpu"]
    return CpuFacts(model=c["model"], arch=c["arch"], flags=frozenset(c["features"]),
                    cores=c["cores"], memory_gib=c["memory_gib"])


# ------------------------------------------------------------------ the table


def render(facts: dict) -> str:
    rows: list[tuple[str, str]] = []
    c = facts["cpu"]
    rows.append(("CPU", f"{c['model']} ({c['arch']}), {c['cores']} cores, "
                        f"{c['memory_gib']} GiB"))
    rows.append(("CPU features", ", ".join(c["features"]) or "none of AVX2/AVX-512/AMX"))
    if "load" in facts:
        rows.append(("CPU load", _load_line(facts["load"])))
    gpus = [name for name, here in facts["gpu"].items() if here]
    rows.append(("GPU hardware", ", ".join(gpus) or "none found"))
    rows.append(("window", _window_line(facts.get("window", {}))))
    rows += _llama_rows(facts["llama"])
    rows += _torch_rows(facts["torch"])
    for r in facts["probes"]:
        rows.append((f"probe {r['backend']}", _probe_line(r)))
    present = [m["name"] for m in facts["models"] if m["present"]]
    rows.append(("models here", ", ".join(present) or "none (specviz models pull NAME)"))
    rows.append(("cost profiles", ", ".join(facts["profiles"]) or "none"))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    if facts["advice"]:
        lines += ["", "To do:"] + [f"  - {a}" for a in facts["advice"]]
    return "\n".join(lines)


def _window_line(window: dict) -> str:
    if not window.get("checked"):
        return "not checked (Qt brings its own libraries here)"
    if window["missing"]:
        return f"cannot open ({window['platform']}): missing {', '.join(window['missing'])}"
    return f"system libraries for Qt's {window['platform']} platform found ({window['how']})"


def _llama_rows(llama: dict) -> list[tuple[str, str]]:
    if not llama.get("installed"):
        return [("llama.cpp", "not installed")]
    amx = " (AMX allowed)" if llama["amx_allowed"] else ""
    return [("llama.cpp", f"llama-cpp-python {llama['version']}, GPU offload "
                          f"{'yes' if llama['gpu_offload'] else 'no'}"),
            ("llama.cpp build", llama["system_info"].strip(" |")),
            ("weight buffers", f"{', '.join(llama['weights_may_use']) or 'CPU only'}{amx} "
                               f"(offered: {', '.join(llama['extra_buffers']) or 'none'})")]


def _torch_rows(torch: dict) -> list[tuple[str, str]]:
    if not torch.get("installed"):
        return [("torch", "not installed")]
    devices = ["cpu"] + [f"cuda ({n})" for n in torch["cuda"]] + (["mps"] if torch["mps"] else [])
    rows = [("torch", f"{torch['version']}, transformers {torch['transformers']}, devices: "
                      f"{', '.join(devices)}")]
    if torch.get("dtype_races"):  # bfloat16 against float32, raced on a CPU that has both
        rows.append(("transformers dtype", cpu_dtype.races_line(torch["dtype_races"])))
    return rows


def _probe_line(r: dict) -> str:
    if r["outcome"] != "ok":
        return f"{r['outcome'].upper()} at {r['stage'] or 'start'}: {r['detail']}"
    agree = "agree" if r["batch_agrees"] else "DIFFER"
    return (f"ok: load {r['load_s']:.1f} s, 1 token {r['one_ms']:.1f} ms, "
            f"{probe.N_BATCH} tokens {r['batch_ms']:.1f} ms; batched and one-by-one greedy "
            f"{agree} (max logit diff {r['max_logit_diff']:.2g}){_kept_since(r)}")


def _kept_since(r: dict) -> str:
    at = r.get("kept_at")
    return "" if at is None else (f"; probed {doctor_probes.when(at)}, kept for this build "
                                  "(--refresh probes again)")

