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
class ServerSpec:
    """A server lane's server: an engine at a URL (oracle "server"), or a llama-server started
    for the lane (oracle "llama-server": no URL, llama.cpp's speculation instead)."""

    url: str | None = None  # None: the llama-server started for the lane
    engine: str = AUTO  # which engine serves there ("auto": ask it)
    # The environment variable holding its API key (the key itself never enters a spec).
    api_key_env: str | None = None
    # How its accepted drafts are coloured (None: as the server says, else a source of its).
    source: str | None = None
    # A spawned llama-server's speculation: llama.cpp's types, comma-separated as its
    # --spec-type takes them (None: a plain server); the lane's K is the longest draft and its
    # `inputs["draft"]` the draft or EAGLE-3 head its types read.
    spec: str | None = None


@dataclass(frozen=True, init=False)
class LaneSpec:
    """One lane: an oracle with its K (or auto K), its settings and its inputs, all by the
    oracle registry's names (engines/oracles/registry.py); what is not given takes the
    oracle's default. A lane on a server (oracle "server" or "llama-server", the registry's
    SERVER_KINDS) has no oracle of the registry: `server` says which and how it is read (its
    defaults where none is given); any other lane's is None."""

    oracle: str = "none"
    k: int = 4
    auto_k: bool = False  # K chosen every step from the cost profile (k is then unused)
    # The oracle's settings (exit_layer, max_ngram, split, budget, ...).
    settings: dict = field(default_factory=dict)
    # The oracle's inputs, each a string: a model's name (draft), a file or folder
    # (ngram_corpus, eagle_head), "off" (suffix_memory). A lane may hold another oracle's
    # too (the window keeps them when a lane's oracle changes); only its own are read.
    inputs: dict = field(default_factory=dict)
    server: ServerSpec | None = None

    def __init__(self, oracle: str = "none", k: int = 4, draft: str | None = None,
                 auto_k: bool = False, settings: dict | None = None,
                 inputs: dict | None = None, server: ServerSpec | str | None = None,
                 **by_name: str | None) -> None:
        """Besides the fields: the draft model third (`LaneSpec("draft", 3, "d.gguf")`), any
        input by its registry name (`LaneSpec("ngram", ngram_corpus="c.txt")`) and a server
        by its URL alone. Empty inputs are left out; a name no input has is a TypeError, as
        an unknown keyword is. (A lane as an older specviz wrote it: lane_from_dict.)"""
        from ..oracles.registry import INPUTS, SERVER_KINDS

        given = {**(inputs or {}), **by_name, **({"draft": draft} if draft is not None else {})}
        unknown = sorted(set(given) - set(INPUTS))
        if unknown:
            raise TypeError(f"a lane has no input {unknown[0]!r} (the inputs: "
                            f"{', '.join(INPUTS)})")
        if isinstance(server, str):
            server = ServerSpec(server)
        elif server is not None and not isinstance(server, ServerSpec):
            raise TypeError(f"a lane's server is a ServerSpec or a URL, not {server!r}")
        server = (server or ServerSpec()) if oracle in SERVER_KINDS else None
        set_ = object.__setattr__  # frozen: set once, here
        for name, value in {"oracle": oracle, "k": k, "auto_k": auto_k,
                            "settings": dict(settings or {}),
                            "inputs": {n: v for n, v in given.items() if v not in (None, "")},
                            "server": server}.items():
            set_(self, name, value)

    @property
    def on_server(self) -> bool:
        return self.server is not None

    @property
    def models(self) -> dict[str, str]:
        """The models this lane's oracle loads beside the target, by input name."""
        from ..oracles.registry import MODEL, ORACLE_INFO

        described = ORACLE_INFO.get(self.oracle)
        return {i.name: self.inputs[i.name] for i in (described.inputs if described else ())
                if i.kind is MODEL and self.inputs.get(i.name)}

    @property
    def draft_model(self) -> str | None:
        """The draft model this lane's oracle loads, if any."""
        return next(iter(self.models.values()), None)


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
    # Prompts each lane decodes at once, batched (engines/host/stream_lanes.py); 1: one, as
    # before streams (an older peer ignores the key, a newer one reads its absence as 1).
    streams: int = 1


@dataclass(frozen=True)
class RunSpec:
    request: RunRequest
    lanes: dict[str, LaneSpec]  # lane id -> lane, in the order they are shown


def to_dict(spec: RunSpec) -> dict:
    request = asdict(spec.request)
    if request["streams"] == 1:  # one stream: the spec as it was written before streams
        del request["streams"]
    return {"request": request,
            "lanes": {lane_id: lane_to_dict(lane) for lane_id, lane in spec.lanes.items()}}


# A server lane's spec in a lane's JSON: keys of the lane's own, named as they were when they
# were LaneSpec fields, so a specviz of either age reads the other's lanes (an older one
# would refuse a "server" that is not a URL, and so every lane the window had kept).
_SERVER_KEYS = {"url": "server", "engine": "server_engine", "api_key_env": "api_key_env",
                "source": "server_source", "spec": "server_spec"}


def lane_to_dict(lane: LaneSpec) -> dict:
    """A lane as JSON carries it (the engine protocol, the window's settings): its fields,
    each input and each of its server's a key of its own. The inputs' names are the fields
    each was before inputs were a mapping, so a specviz of either age reads the other's
    lanes."""
    data = asdict(lane)
    server, inputs = data.pop("server") or asdict(ServerSpec()), data.pop("inputs")
    return {**data, **{key: server[name] for name, key in _SERVER_KEYS.items()}, **inputs}


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


def lane_from_dict(data: dict) -> LaneSpec:
    """A lane as JSON carries it (lane_to_dict), or as an older specviz wrote it: inputs as
    keys of the lane, under the flag an oracle's input has (cross_draft: a cross-draft lane's
    draft); settings as keys of their own (exit_layer, max_ngram, min_ngram, knobs). Unknown
    keys are ignored (a newer sender), wrong types fail (ValueError)."""
    oracle = data.get("oracle", "none")
    if not isinstance(oracle, str):
        raise ValueError(f"LaneSpec.oracle cannot be {oracle!r}")
    server = ServerSpec(**{name: data[key] for name, key in _SERVER_KEYS.items() if key in data})
    lane = LaneSpec(**{k: data[k] for k in ("oracle", "k", "auto_k") if k in data},
                    settings=_settings_from(data), inputs=_inputs_from(oracle, data),
                    server=server)
    _check_types(lane)
    if lane.server:
        _check_types(lane.server)
    return lane


# Oracle settings that were lane fields of their own before they were one `settings` dict
# (and "knobs", the dict of the others).
_SETTINGS_BEFORE = ("exit_layer", "max_ngram", "min_ngram")


def _settings_from(data: dict) -> dict:
    settings, knobs = data.get("settings") or {}, data.get("knobs") or {}
    for name, value in (("settings", settings), ("knobs", knobs)):
        if not isinstance(value, dict):
            raise ValueError(f"LaneSpec.{name} cannot be {value!r}")
    older = {**knobs, **{k: data[k] for k in _SETTINGS_BEFORE if data.get(k)}}
    return {**older, **settings}


def _inputs_from(oracle: str, data: dict) -> dict:
    """The inputs of a lane's JSON: its `inputs` mapping, keys by the registry's names, and
    (the lane's own oracle's) keys by the flag's name; inputs this version has no name for
    are left out, as other unknown keys are."""
    from ..oracles.registry import INPUTS, ORACLE_INFO

    mapping = data.get("inputs") or {}
    if not isinstance(mapping, dict):
        raise ValueError(f"LaneSpec.inputs cannot be {mapping!r}")
    inputs = {k: v for k, v in mapping.items() if k in INPUTS}
    inputs.update({k: data[k] for k in INPUTS if data.get(k) is not None})
    described = ORACLE_INFO.get(oracle)
    for each in described.inputs if described else ():
        by_flag = data.get(each.option.replace("-", "_"))
        if by_flag is not None:
            inputs[each.name] = by_flag
    for name, value in inputs.items():
        if value is not None and not isinstance(value, str):
            raise ValueError(f"LaneSpec input {name} cannot be {value!r}")
    return inputs


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
