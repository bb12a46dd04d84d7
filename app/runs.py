"""What a run in the window is made of, without Qt: lane choices in, ready sessions out.

Each lane gets its own target backend: sessions own their backend's KV cache, so two lanes
stepping in turn on one backend would overwrite each other's cache. The backends come from
a ModelPool, so lanes on one model share its weights and runs reuse loaded models.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import platformdirs

from ..engines.backends.base import Backend
from ..engines.errors import SpecvizError
from ..engines.oracles import DRAFT_ORACLES, make_oracle
from ..engines.sampling import SamplingParams
from ..engines.session import K_MAX, RunSettings, Session
from ..engines.trace import TraceWriter
from . import cmd_run
from .model_pool import ModelKey, ModelPool


@dataclass(frozen=True)
class ModelChoice:
    target: str  # registry name, .gguf file or model folder
    backend: str = "llama"
    device: str | None = None  # None: the backend picks the best available
    threads: int | None = None  # CPU threads; None: all cores but one (see gui_threads)




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
    pool: ModelPool | None = None  # where the backends go back to; None: closed

    @property
    def device(self) -> str:
        return self.session.target.device

    def close(self, reusable: bool = True) -> None:
        """Hand the models back and finish the trace; on the worker thread, after the last
        step. `reusable=False` (the lane failed) frees them instead."""
        if self.writer:
            self.writer.close()
        _give_back(self.backends, self.pool, reusable)
        self.backends = []


def _give_back(backends: list[Backend], pool: ModelPool | None, reusable: bool) -> None:
    for backend in backends:
        if pool is None:
            backend.close()
        else:
            pool.release(backend, reusable)


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


def build_job(lane_id: str, lane: LaneConfig, request: RunRequest, record: bool = True,
              pool: ModelPool | None = None) -> LaneJob:
    """Load (or take from `pool`) the lane's models and build its session (slow: call it off
    the GUI thread). Without a pool the lane loads models of its own."""
    pool = pool or ModelPool()
    backends: list[Backend] = []
    try:
        target = _acquire(pool, request.model, request.model.target)
        backends.append(target)
        draft = _load_draft(pool, lane, request.model) if lane.oracle in DRAFT_ORACLES else None
        if draft:
            backends.append(draft)
        oracle = make_oracle(lane.oracle, target=target, draft=draft, exit_layer=lane.exit_layer)
        policy = _k_policy(lane, request.model, oracle, target, draft)
        session = Session(target, oracle, _settings(lane, request), k_policy=policy)
        path = new_trace_path(lane.oracle, lane_id) if record else None
        writer = TraceWriter(path, trace_header(lane, request, session)) if path else None
    except BaseException:
        _give_back(backends, pool, reusable=True)
        raise
    return LaneJob(lane_id, session, writer, path, backends, pool)


def model_keys(lanes: list[LaneConfig], request: RunRequest) -> list[ModelKey]:
    """The models a run with these lanes uses (a model that does not resolve is left out)."""
    names = [request.model.target, *(lane.draft for lane in lanes
                                     if lane.oracle in DRAFT_ORACLES and lane.draft)]
    keys = []
    for name in names:
        try:
            keys.append(_key(request.model, resolve_model(name)))
        except SpecvizError:
            continue
    return keys


def _acquire(pool: ModelPool, model: ModelChoice, name: str) -> Backend:
    key = _key(model, resolve_model(name))
    return pool.acquire(key.backend, Path(key.path), key.device, key.threads)


def _key(model: ModelChoice, path: Path) -> ModelKey:
    return ModelKey(model.backend, str(path), model.device, model.threads or gui_threads())


def _load_draft(pool: ModelPool, lane: LaneConfig, model: ModelChoice) -> Backend:
    if not lane.draft:
        raise SpecvizError(f"the {lane.oracle} oracle needs a draft model: pick one in the lane")
    return _acquire(pool, model, lane.draft)


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
        return None, "no profile: batches free"  # the plot's tooltip says how to make one
    costs = [stored.relative(n, context) for n in range(1, 34)]
    threads = f"{stored.threads} thread{'s' if stored.threads != 1 else ''}"
    return costs, f"{stored.backend}/{stored.device}, {threads}, context {context}"


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
    return cmd_run._header(args, session, session.target)
