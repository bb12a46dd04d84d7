"""What a run is, as plain data: the model, the decoding settings and the lanes.

The command line, the benchmark, `specviz shot` and the window all describe a run this way,
and engines.host.run_builder turns it into sessions. Everything here round-trips through JSON, so
the window can send a run to an engine process (engines.host.protocol) as it is.
"""

from __future__ import annotations

import types
import typing
from dataclasses import asdict, dataclass, field, fields

AUTO = "auto"


@dataclass(frozen=True)
class ModelChoice:
    target: str  # registry name, .gguf file or model folder
    backend: str = "llama"
    device: str | None = None  # None: the backend picks the best available
    threads: int | None = None  # CPU threads; None: the backend's default
    n_ctx: int = 4096  # context length (llama backend)
    dtype: str | None = None  # transformers: what it computes in; None: the device's rule
    # transformers: compiled steps "on", "off" or "auto" (raced once); None: SPECVIZ_COMPILE,
    # else off. Specs, traces and settings written before it read as None.
    compile: str | None = None


@dataclass(frozen=True)
class LaneSpec:
    """One oracle's lane. Settings left None take the oracle's own default."""

    oracle: str = "none"
    k: int = 4
    draft: str | None = None  # the draft oracles' model (registry name or path)
    auto_k: bool = False  # K chosen every step from the cost profile (k is then unused)
    # The oracle's settings by the registry's names (oracles.registry: exit_layer, max_ngram,
    # split, budget, ...); what is not given takes the oracle's default.
    settings: dict = field(default_factory=dict)
    cross_draft: str | None = None  # cross-draft's own draft model (default: draft)
    ngram_corpus: str | None = None  # a text file seeding the n-gram cache
    suffix_corpus: str | None = None  # a text file seeding suffix decoding's global tree
    # Suffix decoding's memory of earlier runs: None the model's file in the cache, "off"
    # this process only (nothing read or written), else a file of its own.
    suffix_memory: str | None = None
    medusa_heads: str | None = None  # a heads folder (default: beside the target)
    eagle_head: str | None = None  # an EAGLE head's folder (default: beside the target)
    # A server lane (oracle "server"): the engine's URL, which engine it is ("auto": ask it),
    # the environment variable holding its API key (the key itself never enters a spec),
    # and how its accepted drafts are coloured (None: as the server says, else "draft").
    server: str | None = None
    server_engine: str = "auto"
    api_key_env: str | None = None
    server_source: str | None = None

    @property
    def draft_model(self) -> str | None:
        """The draft model this lane's oracle loads, if any."""
        from ..oracles import DRAFT_ORACLES

        if self.oracle == "cross-draft":
            return self.cross_draft or self.draft
        return self.draft if self.oracle in DRAFT_ORACLES else None


@dataclass(frozen=True)
class RunRequest:
    """What every lane of a run shares: the prompt, the model and the decoding settings."""

    prompt: str
    model: ModelChoice
    max_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    chat: bool = True
    system: str | None = None
    stop: tuple[str, ...] = ()
    typical: tuple[float, float] | None = None  # LOSSY typical acceptance: (epsilon, alpha)


@dataclass(frozen=True)
class RunSpec:
    request: RunRequest
    lanes: dict[str, LaneSpec]  # lane id -> lane, in the order they are shown


def to_dict(spec: RunSpec) -> dict:
    return {"request": asdict(spec.request),
            "lanes": {lane_id: asdict(lane) for lane_id, lane in spec.lanes.items()}}


def from_dict(data: dict) -> RunSpec:
    """The spec a peer sent; unknown keys are ignored (a newer sender), wrong types fail."""
    req = dict(data["request"])
    model = model_from_dict(req.pop("model"))
    req = _known(RunRequest, req)
    req["stop"] = tuple(req.get("stop") or ())
    if req.get("typical") is not None:
        req["typical"] = tuple(req["typical"])
    lanes = {str(lane_id): lane_from_dict(lane) for lane_id, lane in data["lanes"].items()}
    spec = RunSpec(RunRequest(model=model, **req), lanes)
    _check_types(spec.request)
    return spec


# Oracle settings that were lane fields of their own before they were one `settings` dict.
_SETTINGS_BEFORE = ("exit_layer", "max_ngram", "min_ngram", "knobs")


def lane_from_dict(data: dict) -> LaneSpec:
    """A lane as JSON carried it; unknown keys are ignored, wrong types fail (ValueError).
    A lane stored before settings were one dict keeps its settings."""
    data = dict(data)
    if any(key in data for key in _SETTINGS_BEFORE):
        older = dict(data.pop("knobs", None) or {})
        older.update({k: data.pop(k) for k in _SETTINGS_BEFORE[:3] if data.get(k)})
        data["settings"] = {**older, **(data.get("settings") or {})}
    lane = LaneSpec(**_known(LaneSpec, data))
    _check_types(lane)
    return lane


def model_from_dict(data: dict) -> ModelChoice:
    model = ModelChoice(**_known(ModelChoice, data))
    _check_types(model)
    return model


def _check_types(item) -> None:
    """Each field holds what its annotation says (JSON's kinds), else a one-line ValueError."""
    hints = typing.get_type_hints(type(item))
    for f in fields(item):
        if f.name != "model" and not _fits(getattr(item, f.name), hints[f.name]):
            raise ValueError(f"{type(item).__name__}.{f.name} cannot be "
                             f"{getattr(item, f.name)!r}")


def _fits(value, hint) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if hint is type(None):
        return value is None
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_fits(v, args[0]) for v in value)
        return len(value) == len(args) and all(map(_fits, value, args))
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, origin or hint)


def _known(cls, data: dict) -> dict:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}
