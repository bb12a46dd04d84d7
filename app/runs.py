"""What a run in the window is made of, without Qt: lane choices in, ready sessions out.

Each lane gets its own target backend: sessions own their backend's KV cache, so two lanes
stepping in turn on one backend would overwrite each other's cache.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import platformdirs

from ..engines.backends import load_backend
from ..engines.backends.base import Backend
from ..engines.errors import SpecvizError
from ..engines.oracles import make_oracle
from ..engines.sampling import SamplingParams
from ..engines.session import K_MAX, RunSettings, Session
from ..engines.trace import TraceWriter
from . import cmd_run


@dataclass(frozen=True)
class ModelChoice:
    target: str  # registry name, .gguf file or model folder
    backend: str = "llama"
    device: str | None = None  # None: the backend picks the best available
    threads: int | None = None  # CPU threads; None: all cores but one (see gui_threads)


DRAFT_ORACLES = ("draft", "cross-draft", "tree")  # the oracles that need a draft model


@dataclass(frozen=True)
class LaneConfig:
    oracle: str = "none"
    k: int = 4
    draft: str | None = None  # the draft oracles' model (registry name or path)
    exit_layer: int = 0  # early-exit: the layers that draft (0: three quarters of them)
    auto_k: bool = False  # K chosen every step from the cost profile (k is then unused)


@dataclass(frozen=True)
class RunRequest:
    prompt: str
    model: ModelChoice
    max_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    chat: bool = True


@dataclass
class LaneJob:
    """A lane ready to run: its session and where its trace goes."""

    lane_id: str
    session: Session
    writer: TraceWriter | None = None
    trace_path: Path | None = None
    backends: list[Backend] = field(default_factory=list)

    @property
    def device(self) -> str:
        return self.session.target.device

    def close(self) -> None:
        """Free the models and finish the trace; on the worker thread, after the last step."""
        if self.writer:
            self.writer.close()
        for backend in self.backends:
            backend.close()


def traces_dir() -> Path:
    home = os.environ.get("SPECVIZ_HOME")
    base = Path(home).expanduser() if home else Path(platformdirs.user_data_dir("specviz"))
    return base / "traces"


def new_trace_path(oracle: str, lane_id: str) -> Path:
    folder = traces_dir()
    folder.mkdir(parents=True, exist_ok=True)
    now = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
    return folder / f"{stamp}-{lane_id}-{re.sub(r'[^a-z0-9-]', '', oracle)}.jsonl"


def resolve_model(name_or_path: str) -> Path:
    from ..engines.models import resolve

    return resolve(name_or_path)


def build_job(lane_id: str, lane: LaneConfig, request: RunRequest, record: bool = True) -> LaneJob:
    """Load the lane's models and build its session (slow: call it off the GUI thread)."""
    model = request.model
    backends: list[Backend] = []
    try:
        target = load_backend(model.backend, resolve_model(model.target), device=model.device,
                              threads=model.threads or gui_threads())
        backends.append(target)
        draft = _load_draft(lane, model) if lane.oracle in DRAFT_ORACLES else None
        if draft:
            backends.append(draft)
        oracle = make_oracle(lane.oracle, target=target, draft=draft, exit_layer=lane.exit_layer)
        policy = _k_policy(lane, model, oracle, target, draft)
        session = Session(target, oracle, _settings(lane, request), k_policy=policy)
        path = new_trace_path(lane.oracle, lane_id) if record else None
        writer = TraceWriter(path, trace_header(lane, request, session)) if path else None
    except BaseException:
        for backend in backends:
            backend.close()
        raise
    return LaneJob(lane_id, session, writer, path, backends)


def _load_draft(lane: LaneConfig, model: ModelChoice) -> Backend:
    if not lane.draft:
        raise SpecvizError(f"the {lane.oracle} oracle needs a draft model: pick one in the lane")
    return load_backend(model.backend, resolve_model(lane.draft), device=model.device,
                        threads=model.threads or gui_threads())


def _k_policy(lane: LaneConfig, model: ModelChoice, oracle, target: Backend,
              draft: Backend | None):
    """The cost-aware K chooser for a lane set to auto (measures a missing profile: slow)."""
    if not lane.auto_k or lane.oracle == "none":
        return None
    from .options import k_policy

    args = SimpleNamespace(k="auto", target=model.target, draft=lane.draft,
                           backend=model.backend, device=model.device,
                           threads=model.threads or gui_threads(), n_ctx=4096, refresh=False)
    return k_policy(args, oracle, target, draft)


def profile_costs(model: ModelChoice, context: int = 512) -> tuple[list[float] | None, str]:
    """The stored cost profile of the run's target as costs of 1..33 tokens relative to one,
    and a label; (None, why) when there is none (the curves then assume free batches)."""
    from ..engines import profile as prof

    device = model.device or ("cpu" if model.backend == "llama" else None)
    stored = prof.load(model.target, model.backend, device or "cpu",
                       model.threads or gui_threads())
    if stored is None:
        return None, "no cost profile here yet (specviz profile): batches priced as free"
    costs = [stored.relative(n, context) for n in range(1, 34)]
    return costs, f"{stored.backend}/{stored.device}, {stored.threads} threads, context {context}"


def gui_threads() -> int:
    """All cores but one: the GUI thread needs a core of its own, or llama.cpp's worker
    threads, which spin while they wait for each other, slow down several times over."""
    return max(1, (os.cpu_count() or 1) - 1)


def _settings(lane: LaneConfig, request: RunRequest) -> RunSettings:
    try:
        params = SamplingParams(request.temperature, request.top_p, request.seed)
    except ValueError as exc:
        raise SpecvizError(str(exc)) from None
    k = 0 if lane.oracle == "none" else K_MAX if lane.auto_k else lane.k
    return RunSettings(prompt=request.prompt, chat=request.chat, k=k,
                       max_tokens=request.max_tokens, params=params)


def trace_header(lane: LaneConfig, request: RunRequest, session: Session) -> dict:
    """The same header `specviz run --trace` writes, from the window's choices."""
    args = SimpleNamespace(target=request.model.target, draft=lane.draft, oracle=lane.oracle,
                           exit_layer=lane.exit_layer,
                           temperature=request.temperature, top_p=request.top_p,
                           seed=request.seed, chat=request.chat)
    return cmd_run._header(args, session, session.target)  # noqa: SLF001 - one header format
