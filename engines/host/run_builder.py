"""A run spec becomes sessions: models from a pool, oracles, K policies, trace headers.

One place that `specviz run`, `specviz bench`, the engine process behind the window (and so
`specviz shot`) build their lanes with. Each lane gets a target backend of its own (a session
owns its backend's cache); the pool shares the weights between lanes of one model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

from ..backends.base import Backend
from ..errors import IncompatibleModels, SpecvizError
from ..loop.session import RunSettings, Session, starting_k
from ..oracles import DRAFT_ORACLES, Oracle, make_oracle
from ..oracles.draft import CROSS_HINT
from ..oracles.registry import SERVER
from ..sampling import SamplingParams
from ..text_file import read_text
from .k_policy import k_policy
from .lanes import Lane, LocalLane, ServerLane
from .model_pool import ModelPool
from .run_spec import LaneSpec, ModelChoice, RunRequest

Say = Callable[[str], None]


def build_lane(lane_id: str, lane: LaneSpec, request: RunRequest, pool: ModelPool,
               say: Say = lambda _: None) -> Lane:
    """Load (or take from `pool`) the lane's models and build its session (slow); a server
    lane connects to its server."""
    if lane.oracle == SERVER:
        return build_server_lane(lane_id, lane, request)
    run_settings = settings(lane, request)  # bad settings fail before anything is loaded
    backends: list[Backend] = []
    try:
        target = acquire(pool, request.model, request.model.target)
        backends.append(target)
        draft = None
        if lane.oracle in DRAFT_ORACLES:
            if not lane.draft_model:
                raise SpecvizError(f"the {lane.oracle} oracle needs --draft MODEL (in the "
                                   "window: pick a draft model in the lane)")
            draft = acquire(pool, request.model, lane.draft_model)
            backends.append(draft)
        oracle = build_oracle(lane, target, draft, say)
        policy = k_policy(lane, request.model, oracle, target, draft, say)
        session = Session(target, oracle, run_settings, k_policy=policy)
    except BaseException:
        for backend in backends:
            pool.release(backend, reusable=True)
        raise
    return LocalLane(lane_id, session, trace_header(lane, request, session), lane,
                     request.model, draft, backends, pool)


def build_server_lane(lane_id: str, lane: LaneSpec, request: RunRequest) -> ServerLane:
    """A lane on a serving engine: no local model, the server's own speculation."""
    from . import server_lanes as server_lane

    run_settings = RunSettings(prompt=request.prompt, chat=request.chat, system=request.system,
                               k=lane.k, max_tokens=request.max_tokens,
                               params=sampling_params(request), stop=tuple(request.stop))
    session = server_lane.build_session(lane, run_settings)
    header = server_lane.trace_header(lane, request, session)
    return ServerLane(lane_id, session, header)


def acquire(pool: ModelPool, model: ModelChoice, name: str) -> Backend:
    from ..models import resolve

    return pool.acquire(model.backend, resolve(name), model.device, model.threads, model.n_ctx,
                        model.dtype, model.compile)


def model_keys(lanes: list[LaneSpec], model: ModelChoice) -> list:
    """The pool keys a run with these lanes uses (a model that does not resolve is left out)."""
    from ..models import resolve
    from .model_pool import ModelKey

    keys = []
    for name in [model.target, *(lane.draft_model for lane in lanes if lane.draft_model)]:
        try:
            path = resolve(name)
        except SpecvizError:
            continue
        hf = model.backend == "transformers"
        keys.append(ModelKey(model.backend, str(path), model.device, model.threads,
                             model.n_ctx, model.dtype if hf else None,
                             model.compile if hf else None))
    return keys


def build_oracle(lane: LaneSpec, target: Backend, draft: Backend | None,
                 say: Say = lambda _: None) -> Oracle:
    """The lane's oracle; a draft model whose tokenizer is not the target's is routed to the
    cross-draft oracle (drafting through text), with the reason said, never run as a draft of
    the same vocabulary."""
    try:
        return _make(lane, target, draft, say)
    except IncompatibleModels as exc:
        if lane.oracle != "draft":
            raise
        reason = str(exc).replace(CROSS_HINT, "")
        say(f"{lane.draft_model} does not share the target's tokenizer ({reason}): this lane "
            "drafts through text instead (cross-draft)")
        return _make(replace(lane, oracle="cross-draft", cross_draft=lane.draft), target, draft)


def _make(lane: LaneSpec, target: Backend, draft: Backend | None,
          say: Say = lambda _: None) -> Oracle:
    corpus = None
    if lane.oracle == "ngram" and lane.ngram_corpus:
        corpus = target.tokenize(read_text(lane.ngram_corpus, "n-gram corpus"), False)
    if lane.oracle == "suffix" and lane.suffix_corpus:
        corpus = target.tokenize(read_text(lane.suffix_corpus, "suffix corpus"), False)
    memory = suffix_memory(lane, target.n_vocab) if lane.oracle == "suffix" else None
    try:
        oracle = make_oracle(lane.oracle, target=target, draft=draft, corpus_ids=corpus,
                             settings=dict(lane.settings), heads=head_folder(lane.medusa_heads),
                             eagle_head=head_folder(lane.eagle_head), memory=memory)
    except ValueError as exc:
        raise SpecvizError(str(exc)) from None
    notice = oracle.notice()
    if notice:
        say(notice)
    return oracle


def suffix_memory(lane: LaneSpec, n_vocab: int | None = None):
    """The lane's memory of earlier runs (None: the model's file, opened by the oracle)."""
    from ..oracles.suffix_memory import SuffixMemory

    if lane.suffix_memory is None:
        return None
    if lane.suffix_memory == "off":
        return SuffixMemory()
    return SuffixMemory.open(Path(lane.suffix_memory), vocab_size=n_vocab)


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
        "oracle": session.oracle.name if session.oracle.name == "cross-draft" else lane.oracle,
        "settings": {"k": session.k, "auto_k": lane.auto_k,
                     "max_tokens": session.settings.max_tokens,
                     "temperature": request.temperature, "top_p": request.top_p,
                     "seed": request.seed, "chat": request.chat,
                     **({"exit_layer": session.oracle.settings.exit_layer}
                        if lane.oracle == "early-exit" else {}),
                     "oracle_settings": asdict(session.oracle.settings),
                     "typical_acceptance": typical},
        "prompt": session.settings.prompt,
        "prompt_text": session.prompt_text,
        "prompt_ids": session.prompt_ids,
        "token_chars": session.token_chars,
        "machine": machine_info(),
    }
