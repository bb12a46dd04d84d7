"""A run spec becomes sessions: models from a pool, oracles, K policies, trace headers.

One place that `specviz run`, `specviz bench`, the engine process behind the window (and so
`specviz shot`) build their lanes with. Each lane of a run gets a target backend of its own (a
session owns its backend's cache); the pool shares the weights between lanes of one model. The
bench's lanes decode one after another, so they share its one target (`lane_parts`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..backends.base import Backend
from ..errors import IncompatibleModels, SpecvizError
from ..loop.session import KPolicy, RunSettings, Session, starting_k
from ..oracles import Oracle, check_inputs, make_oracle, memory_file
from ..oracles import info as oracle_info
from ..oracles.draft import CROSS_HINT
from ..oracles.registry import CORPUS, HEADS, MEMORY, MODEL, Input, OracleInfo
from ..sampling import SamplingParams
from ..text_file import check_file, read_text
from .k_policy import k_policy
from .lanes import Lane, LocalLane, ServerLane
from .model_pool import ModelPool
from .run_spec import LaneSpec, ModelChoice, RunRequest

Say = Callable[[str], None]
# Settings older trace readers find beside K in a trace header's settings (every oracle's
# are in its `oracle_settings` too).
HEADER_SETTINGS = ("exit_layer",)


def build_lane(lane_id: str, lane: LaneSpec, request: RunRequest, pool: ModelPool,
               say: Say = lambda _: None) -> Lane:
    """Load (or take from `pool`) the lane's models and build its session (slow); a server
    lane connects to its server."""
    if lane.on_server:
        return build_server_lane(lane_id, lane, request)
    run_settings = settings(lane, request)  # bad settings fail before anything is loaded
    check_lane(lane)
    target = acquire(pool, request.model, request.model.target)
    backends = [target]
    try:
        parts = lane_parts(lane, request.model, target, pool, say)
        backends += parts.models.values()
        session = Session(target, parts.oracle, run_settings, k_policy=parts.policy)
    except BaseException:
        for backend in backends:
            pool.release(backend, reusable=True)
        raise
    return LocalLane(lane_id, session, trace_header(lane, request, session), lane,
                     request.model, parts.draft, backends, pool)


@dataclass
class LaneParts:
    """A local lane before it is given a prompt: its target, the models its oracle loads (by
    input name), its oracle and its K policy (None: a fixed K). `build_lane` gives them one
    run's prompt; the bench every question's (engines/bench/spec_bench.py)."""

    lane: LaneSpec
    target: Backend
    models: dict[str, Backend]
    oracle: Oracle
    policy: KPolicy | None = None

    @property
    def draft(self) -> Backend | None:
        return next(iter(self.models.values()), None)


def lane_parts(lane: LaneSpec, model: ModelChoice, target: Backend, pool: ModelPool,
               say: Say = lambda _: None) -> LaneParts:
    """The lane's models (from `pool`), oracle and K policy around a loaded target (slow: a
    missing cost profile is measured); the models it took go back to the pool if it fails."""
    check_lane(lane)
    models: dict[str, Backend] = {}
    try:
        for name, model_name in lane.models.items():
            models[name] = acquire(pool, model, model_name)
        oracle = build_oracle(lane, target, models, say)
        draft = next(iter(models.values()), None)
        policy = k_policy(lane, model, oracle, target, draft, say)
    except BaseException:
        for backend in models.values():
            pool.release(backend, reusable=True)
        raise
    return LaneParts(lane, target, models, oracle, policy)


def build_server_lane(lane_id: str, lane: LaneSpec, request: RunRequest) -> ServerLane:
    """A lane on a serving engine: no local model, the server's own speculation."""
    from . import server_lanes as server_lane

    run_settings = RunSettings(prompt=request.prompt, chat=request.chat, system=request.system,
                               k=lane.k, max_tokens=request.max_tokens,
                               params=sampling_params(request), stop=tuple(request.stop))
    session = server_lane.build_session(lane, run_settings, request.model)
    header = server_lane.trace_header(lane, request, session)
    return ServerLane(lane_id, session, header)


def described_oracle(lane: LaneSpec) -> OracleInfo:
    try:
        return oracle_info(lane.oracle)
    except ValueError as exc:
        raise SpecvizError(str(exc)) from None


def check_lane(lane: LaneSpec) -> None:
    """The lane's oracle exists, has the inputs it requires and its files can be read as
    what they are: one line, before anything is loaded."""
    described = described_oracle(lane)
    check_inputs(described, lane.inputs)
    for each in described.inputs:
        value = lane.inputs.get(each.name)
        if value is None:
            continue
        if each.kind is CORPUS:
            check_file(Path(value), each.said)
        elif each.kind is MEMORY and value != MEMORY.off:
            memory_file.check_kind(Path(value))


def acquire(pool: ModelPool, model: ModelChoice, name: str,
            loaded_only: bool = False) -> Backend | None:
    """The pool's backend of `name` with the run's settings (None where `loaded_only` and
    it is not loaded)."""
    from ..models import resolve

    return pool.acquire(model.backend, resolve(name), model.device, model.threads, model.n_ctx,
                        model.dtype, model.compile, loaded_only)


def model_keys(lanes: list[LaneSpec], model: ModelChoice) -> list:
    """The pool keys a run with these lanes uses (a model that does not resolve is left out)."""
    from ..models import resolve
    from .model_pool import ModelKey

    keys = []
    for name in [model.target, *(m for lane in lanes for m in lane.models.values())]:
        try:
            path = resolve(name)
        except SpecvizError:
            continue
        hf = model.backend == "transformers"
        keys.append(ModelKey(model.backend, str(path), model.device, model.threads,
                             model.n_ctx, model.dtype if hf else None,
                             model.compile if hf else None))
    return keys


def build_oracle(lane: LaneSpec, target: Backend, models: dict[str, Backend],
                 say: Say = lambda _: None) -> Oracle:
    """The lane's oracle, with its models (`models`, loaded, by input name) and its other
    inputs read here. An oracle whose draft model's tokenizer is not the target's becomes
    the oracle its registry entry names for that (the draft oracle: cross-draft, drafting
    through text), with the reason said, never run as a draft of the same vocabulary."""
    try:
        return _make(lane, target, models, say)
    except IncompatibleModels as exc:
        instead = described_oracle(lane).other_tokenizer
        if not instead:
            raise
        reason = str(exc).replace(CROSS_HINT, "")
        say(f"{lane.draft_model} does not share the target's tokenizer ({reason}): this lane "
            f"drafts through text instead ({instead})")
        return _make(replace(lane, oracle=instead), target, models)


def _make(lane: LaneSpec, target: Backend, models: dict[str, Backend],
          say: Say = lambda _: None) -> Oracle:
    described = described_oracle(lane)
    inputs = {each.name: read_input(each, lane.inputs.get(each.name), target, models)
              for each in described.inputs}
    try:
        oracle = make_oracle(lane.oracle, target=target, settings=dict(lane.settings),
                             **inputs)
    except ValueError as exc:
        raise SpecvizError(str(exc)) from None
    notice = oracle.notice()
    if notice:
        say(notice)
    return oracle


def read_input(each: Input, value: str | None, target: Backend,
               models: dict[str, Backend]):
    """What the oracle's `build` gets for one input, by its kind (registry.InputKind); None
    where the lane gives none (the oracle's default)."""
    if each.kind is MODEL:
        return models.get(each.name)
    if value is None:
        return None
    if each.kind is CORPUS:
        return target.tokenize(read_text(value, each.said), False)
    if each.kind is HEADS:
        return head_folder(value)
    if each.kind is MEMORY:
        return value if value == MEMORY.off else Path(value)
    raise ValueError(f"no way to read a {each.kind.name}")


def head_folder(name: str | None) -> Path | None:
    """A heads folder given as a path, or as a Hub name (a published EAGLE-3 head) that is in
    the Hub cache."""
    from ..models import is_hub_name, resolve

    if not name:
        return None
    return resolve(name) if is_hub_name(name) else Path(name)


def sampling_params(request: RunRequest) -> SamplingParams:
    try:
        return SamplingParams(request.temperature, request.top_p, request.seed)
    except ValueError as exc:
        raise SpecvizError(str(exc)) from None


def typical_rule(request: RunRequest):
    """The LOSSY typical-acceptance rule asked for, or None (exact verification)."""
    if request.typical is None:
        return None
    from ..loop.typical import TypicalAcceptance

    try:
        return TypicalAcceptance(*request.typical)
    except ValueError as exc:
        raise SpecvizError(str(exc)) from None


def settings(lane: LaneSpec, request: RunRequest) -> RunSettings:
    try:
        k = starting_k(lane.oracle, lane.k, lane.auto_k)
    except ValueError as exc:
        raise SpecvizError(str(exc)) from None
    return RunSettings(prompt=request.prompt, chat=request.chat, system=request.system, k=k,
                       max_tokens=request.max_tokens, params=sampling_params(request),
                       stop=tuple(request.stop), typical=typical_rule(request))


def trace_header(lane: LaneSpec, request: RunRequest, session: Session) -> dict:
    """Line 1 of a lane's trace: models with checksums, settings, machine, prompt."""
    from ..models import identify
    from ..trace import machine_info

    target = session.target
    oracle_settings = asdict(session.oracle.settings)
    typical = None
    if request.typical is not None:
        typical = {"epsilon": request.typical[0], "alpha": request.typical[1], "lossy": True}
    return {
        "target": identify(request.model.target),
        "draft": identify(lane.draft_model) if lane.draft_model else None,
        "backend": target.name,
        "device": target.device,
        "dtype": target.dtype,
        "compile": getattr(target, "compiled", None),  # transformers: on or off, as it ran
        "oracle": session.oracle.name or lane.oracle,  # the oracle it became, if another
        "settings": {"k": session.k, "auto_k": lane.auto_k,
                     "max_tokens": session.settings.max_tokens,
                     "temperature": request.temperature, "top_p": request.top_p,
                     "seed": request.seed, "chat": request.chat,
                     **{name: value for name, value in oracle_settings.items()
                        if name in HEADER_SETTINGS},
                     "oracle_settings": oracle_settings,
                     "typical_acceptance": typical},
        "prompt": session.settings.prompt,
        "prompt_text": session.prompt_text,
        "prompt_ids": session.prompt_ids,
        "token_chars": session.token_chars,
        "machine": machine_info(),
    }
