"""What a run in the window is made of, on the window's side: lanes' settings, traces,
the cost profile the theoretical curves are priced with.

The run itself is built and stepped in an engine process (engines.host.engine_process) from the
same run spec the command line uses (engines.host.run_spec).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from ...engines.host.run_spec import LaneSpec, ModelChoice
from ...engines.machine.hardware import compute_threads

MAX_LANES = 4  # lanes side by side in the window
DEFAULT_TARGET = "smollm2-135m"  # the model a first run uses: small enough for any machine

# How the window asks for the draft file a llama-server lane's type reads (the command line:
# --draft FILE.gguf).
ASK_DRAFT = "pick its GGUF in the lane's draft model box"

__all__ = ["ASK_DRAFT", "DEFAULT_TARGET", "MAX_LANES", "gui_threads", "lane_problem",
           "new_trace_path", "profile_costs", "traces_dir"]


def lane_problem(lane: LaneSpec) -> str | None:
    """What keeps a lane from starting that the window can tell before a run, in one line
    (a llama-server lane's speculation: a draft type without its draft file); None where
    nothing does here (the engine checks the rest, each lane in its own line)."""
    from ...engines.host.server_lanes import spawned_problem

    return spawned_problem(lane, ASK_DRAFT)


def traces_dir() -> Path:
    from ...engines.models import home_dir

    return home_dir("data") / "traces"


def new_trace_path(oracle: str, lane_id: str) -> Path:
    folder = traces_dir()
    folder.mkdir(parents=True, exist_ok=True)
    now = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
    return folder / f"{stamp}-{lane_id}-{re.sub(r'[^a-z0-9-]', '', oracle)}.jsonl"


def profile_costs(model: ModelChoice, context: int = 512) -> tuple[list[float] | None, str, bool]:
    """The stored cost profile of the run's target as costs of 1..33 tokens relative to one,
    a label, and whether there is one: (None, why, False) when there is none (the curves are
    then not drawn: free batches would promise what a CPU cannot keep)."""
    from ...engines.backends.cpu_dtype import remembered_for
    from ...engines.cost import profile as prof
    from ...engines.errors import SpecvizError
    from ...engines.machine.device_choice import DeviceFacts, model_dtype

    device = model.device or ("cpu" if model.backend == "llama" else None) or "cpu"
    threads = model.threads or gui_threads()
    measured = remembered_for(model.target, threads) if model.backend == "transformers" else None
    try:
        dtype = model_dtype(model.backend, device, model.dtype, DeviceFacts.about(device),
                            measured)
    except SpecvizError as exc:  # a SPECVIZ_DTYPE it does not know: said, the window opens
        return None, str(exc), False
    stored, problem = prof.read(model.target, model.backend, device, threads, dtype,
                                prof.planned_variant(model.backend, device, model.target,
                                                     model.threads, dtype, model.compile))
    if stored is None:
        return None, (f"the stored profile is not usable: {problem}" if problem
                      else "no profile of this machine yet"), False
    costs = [stored.relative(n, context) for n in range(1, 34)]
    n = prof.threads_run(stored.threads)  # a profile of every core names no count
    used = f"{n} thread{'s' if n != 1 else ''}"
    return costs, f"{stored.backend}/{stored.device}, {used}, context {context}", True


def gui_threads() -> int:
    """Compute threads for a run in the window: all cores but the GUI thread's."""
    return compute_threads(beside_a_window=True)
