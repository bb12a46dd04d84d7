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


@dataclass(frozen=True, init=False)
class LaneSpec:
    """One lane: an oracle with its K (or auto K), its settings and its inputs, all by the
    oracle registry's names (engines/oracles/registry.py); what is not given takes the
    oracle's default. A server lane (oracle "server") has no oracle: its fields are the
    endpoint's, kept as fields of their own (a serving engine is not an entry of the
    registry, and the window and `specviz run --server` fill them in directly)."""

    oracle: str = "none"
    k: int = 4
    auto_k: bool = False  # K chosen every step from the cost profile (k is then unused)
    # The oracle's settings (exit_layer, max_ngram, split, budget, ...).
    settings: dict = field(default_factory=dict)
    # The oracle's inputs, each a string: a model's name (draft), a file or folder
    # (ngram_corpus, eagle_head), "off" (suffix_memory). A lane may hold another oracle's
    # too (the window keeps them when a lane's oracle changes); only its own are read.
    inputs: dict = field(default_factory=dict)
    # A server lane: the engine's URL, which engine it is ("auto": ask it), the environment
    # variable holding its API key (the key itself never enters a spec), and how its
    # accepted drafts are coloured (None: as the server says, else a source of its).
    server: str | None = None
    server_engine: str = "auto"
    api_key_env: str | None = None
    server_source: str | None = None
    # A spawned llama-server's speculation (oracle "llama-server"): llama.cpp's types,
    # comma-separated as its --spec-type takes them (None: a plain server); K is the
    # longest draft and `inputs["draft"]` the draft or EAGLE-3 head its types read.
    server_spec: str | None = None

    def __init__(self, oracle: str = "none", k: int = 4, draft: str | None = None,
                 auto_k: bool = False, settings: dict | None = None,
                 inputs: dict | None = None, server: str | None = None,
                 server_engine: str = "auto", api_key_env: str | None = None,
                 server_source: str | None = None, server_spec: str | None = None,
                 **named: str | None) -> None:
        """Inputs may also be given by name (`LaneSpec("ngram", ngram_corpus="c.txt")`), the
        draft model third, as when each input was a field of its own; names a lane stored then
        used are read as they were meant (cross_draft: a cross-draft lane's draft)."""
        given = {**(inputs or {}), **({"draft": draft} if draft is not None else {})}
        set_ = object.__setattr__  # frozen: set once, here
        for name, value in {"oracle": oracle, "k": k, "auto_k": auto_k,
                            "settings": dict(settings or {}),
                            "inputs": inputs_of(oracle, given, named), "server": server,
                            "server_engine": server_engine, "api_key_env": api_key_env,
                            "server_source": server_source,
                            "server_spec": server_spec}.items():
            set_(self, name, value)

    def __getattr__(self, name: str):
        """An input by its name (`lane.draft`, `lane.eagle_head`), None where not given."""
        from ..oracles.registry import INPUTS

        if name in INPUTS and "inputs" in self.__dict__:
            return self.inputs.get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def on_server(self) -> bool:
        from ..oracles.registry import SERVER, SPAWNED

        return self.oracle in (SERVER, SPAWNED)

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


def inputs_of(oracle: str, given: dict, named: dict | None = None) -> dict:
    """A lane's inputs: `given` by the registry's names, and `named` by those names or by the
    flag an oracle's input has (a lane stored when inputs were fields had them by flag:
    cross_draft held the cross-draft oracle's draft). Empty values are left out; a name no
    oracle has is a TypeError, as an unknown keyword is."""
    from ..oracles.registry import INPUTS, ORACLE_INFO

    named = dict(named or {})
    inputs = {**given, **{name: named.pop(name) for name in list(named) if name in INPUTS}}
    described = ORACLE_INFO.get(oracle)
    for each in described.inputs if described else ():
        by_flag = named.pop(_dest(each.option), None)
        if by_flag is not None:
            inputs[each.name] = by_flag
    flags = {_dest(i.option) for d in ORACLE_INFO.values() for i in d.inputs}
    unknown = sorted((set(named) - flags) | (set(inputs) - set(INPUTS)))
    if unknown:
        raise TypeError(f"a lane has no input {unknown[0]!r} (the inputs: {', '.join(INPUTS)})")
    return {k: v for k, v in inputs.items() if v not in (None, "")}


def _dest(flag: str) -> str:
    return flag.replace("-", "_")


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
            "lanes": {lane_id: lane_to_dict(lane) for lane_id, lane in spec.lanes.items()}}


def lane_to_dict(lane: LaneSpec) -> dict:
    """A lane as JSON carries it (the engine protocol, the window's settings): its fields,
    each input a key of its own. The inputs' names are the fields each was before inputs
    were a mapping, so a specviz of either age reads the other's lanes."""
    data = asdict(lane)
    return {**{k: v for k, v in data.items() if k != "inputs"}, **data["inputs"]}


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
    """A lane as JSON carried it (lane_to_dict, or a lane of an older specviz: its inputs
    fields of their own, settings before they were one dict); unknown keys are ignored,
    wrong types fail (ValueError)."""
    from ..oracles.registry import INPUTS, ORACLE_INFO

    data = dict(data)
    if any(key in data for key in _SETTINGS_BEFORE):
        older = dict(data.pop("knobs", None) or {})
        older.update({k: data.pop(k) for k in _SETTINGS_BEFORE[:3] if data.get(k)})
        data["settings"] = {**older, **(data.get("settings") or {})}
    flags = {_dest(i.option) for d in ORACLE_INFO.values() for i in d.inputs}
    named = {k: v for k, v in data.items() if k in flags or k in INPUTS}
    known = _known(LaneSpec, data)
    if not isinstance(known.get("inputs", {}), dict):
        raise ValueError(f"LaneSpec.inputs cannot be {known['inputs']!r}")
    lane = LaneSpec(**{**known, "inputs": {k: v for k, v in (known.get("inputs") or {}).items()
                                           if k in INPUTS}}, **named)
    _check_types(lane)
    for name, value in lane.inputs.items():
        if not isinstance(value, str):
            raise ValueError(f"LaneSpec input {name} cannot be {value!r}")
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
