"""Every oracle, described once: what it proposes from, what it needs, its inputs (models,
heads, corpus and memory files), its settings, the backends it runs on, the module that
builds it, how `specviz advise` predicts it, how a command line spells a lane of it and what
auto K may know of it before it runs. `make_oracle`, the run builder, the command line, a
lane's spec, the lane widget, each oracle's knobs, `specviz serve`'s confinement, the model
fetch, auto K, `specviz advise`, the benchmark and the docs read this table: no module
outside this package compares an oracle's name (tests/test_rooms.py holds them to it).

Adding an oracle: one module in this package with a `build(parts)` function (see
base.BuildParts) and one entry here; its settings, if any, are one dataclass below, its
inputs a tuple of `Input`s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields

from ..backends.base import HIDDEN_STATES

PLAIN = "none"  # plain decoding: the baseline every speedup divides by
SERVER = "server"  # the oracle of a lane on a serving engine (engines/servers)
# A lane on a llama-server that specviz starts for it, with llama.cpp's own speculation
# (engines/servers/spawn.py): a server lane whose server is made, not given.
SPAWNED = "llama-server"

# What an oracle can need beyond the target model and its inputs.
NEEDS_HIDDEN = HIDDEN_STATES  # a capability the backend declares (Backend.provides)
NEEDS_HEADS = "trained heads"
BACKEND_CAPABILITIES = (HIDDEN_STATES,)

BOTH = ("llama", "transformers")


@dataclass(frozen=True)
class InputKind:
    """What kind of thing an input names, and so how the run builder hands it to the oracle's
    `build` (engines/host/run_builder.py reads each kind once) and whether `specviz serve`
    confines it to the folders the host allows (engines/host/confine.py)."""

    name: str
    file: bool  # a file or folder the engine opens (a model is read as a model only)
    folder: bool = False  # a folder, not a file (the window's picker browses for one)
    hub: bool = False  # a Hub repository name is taken too (read from the Hub cache)
    off: str | None = None  # a word that names no file at all
    metavar: str | None = None  # on the command line
    # A registry or Hub name given for it is fetched before a command runs, as the target is.
    fetched: bool = False


# A model (registry name, Hub name or path), loaded like the target: `build` gets a Backend.
MODEL = InputKind("model", file=False, fetched=True)
# A folder of trained heads, or a Hub repository in the Hub cache: `build` gets its Path.
HEADS = InputKind("heads folder", file=True, folder=True, hub=True, metavar="DIR|HUB",
                  fetched=True)
# A text file: `build` gets its tokens (the target's tokenizer).
CORPUS = InputKind("corpus file", file=True)
# A file the oracle reads and writes, or "off": `build` gets its Path, or "off".
MEMORY = InputKind("memory file", file=True, off="off", metavar="FILE|off")
INPUT_KINDS = (MODEL, HEADS, CORPUS, MEMORY)


@dataclass(frozen=True)
class Input:
    """Something an oracle reads besides the target: a lane's spec holds its value under
    `name` (LaneSpec.inputs), the command line takes it with `--flag`, and the oracle's
    `build` finds what the run builder made of it in `parts.inputs[name]`. One name means one
    kind of thing wherever it is used: the window's draft model picker serves every oracle
    with a "draft" input."""

    name: str
    kind: InputKind
    # The command line's help (several oracles sharing a flag: the first's); "{default}" in
    # it is where the default's words go (a command that gives its own: its value).
    help: str
    flag: str = ""  # the command-line flag without --; "" the name, - for _
    # A flag other oracles declare, read where this oracle's own is not given (cross-draft:
    # --cross-draft, else --draft); messages name it, as the flag most lanes share.
    fallback: str = ""
    required: bool = False
    default: str = ""  # what no value means, in --help's words
    label: str = ""  # how messages name it ("" the name, _ as a space)

    @property
    def option(self) -> str:
        return self.flag or self.name.replace("_", "-")

    @property
    def asked_with(self) -> str:
        """The flag a message asks for it with."""
        return f"--{self.fallback or self.option}"

    @property
    def said(self) -> str:
        return self.label or self.name.replace("_", " ")


DRAFT_MODEL = Input("draft", MODEL, "draft model for the draft and cross-draft oracles",
                    required=True, label="draft model")


# How `specviz advise` predicts an oracle before any run (OracleInfo.advise); an oracle
# without one is not predicted (its guesses need the target itself, or a run's trees).


@dataclass(frozen=True)
class Replayed:
    """Its own proposals replayed on the target's answers (engines/advise/replay.py), the
    oracle built by `make_oracle` with these settings and inputs over its defaults: a replay
    judges chains, and must not write a memory that lanes read."""

    settings: tuple[tuple[str, float | int], ...] = ()
    inputs: tuple[tuple[str, str], ...] = ()
    note: str = ""  # what a lane has that the replay leaves out, beside its row


@dataclass(frozen=True)
class TeacherForced:
    """Every draft model on this machine, as `specviz pair` judges one: its argmax after each
    true prefix of the target's answers (one forward pass over them) is what it would have
    drafted; a draft of another tokenizer is predicted as the oracle `other_tokenizer` names."""


@dataclass(frozen=True)
class HeldOut:
    """Trained heads, by the acceptance their training measured on held-out answers at each
    depth, read as JSON from the config it writes beside them (the heads' own modules load
    torch, which a llama.cpp target never needs)."""

    label: str  # the candidate's name
    folder: str  # where `specviz train-heads` puts them beside the target (models.side_folder)
    config: str  # the file in it
    accept: tuple[str, ...]  # the keys, one inside the other, to the acceptance by depth
    format: str = ""  # the config's "format", where it must have one
    # Drafting reads a decoder layer and the LM head per depth (EAGLE); else the LM head once
    # for every depth (Medusa's heads all read one hidden state).
    per_depth: bool = False
    int8_speedup: float = 1.0  # its drafting with int8 weights on a CPU (the default)
    train: str = "specviz train-heads"  # the command that trains them

    def acceptance(self, config: Mapping) -> list[float]:
        """The acceptance by depth recorded in `config` (the heads' config as saved), up to
        the first value that is not a probability; empty where none is recorded (a
        published head)."""
        values = config
        for key in self.accept:
            values = values.get(key) if isinstance(values, Mapping) else None
        out: list[float] = []
        for v in values if isinstance(values, list) else ():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
                break
            out.append(float(v))
        return out


TEACHER_FORCED = TeacherForced()


def setting(default: float | int, low: float | int, high: float | int, help: str,
            flag: str | None = None, live: bool = True):
    """A field of an oracle's settings: its default, range and command-line flag (without
    --). A live one may change between steps (Oracle.set_knob); the others are fixed when
    the oracle is built."""
    return field(default=default, metadata={"low": low, "high": high, "help": help,
                                            "flag": flag, "live": live})


@dataclass(frozen=True)
class Setting:
    """One of an oracle's settings, as the command line and the window show it."""

    name: str
    default: float | int
    low: float | int
    high: float | int
    flag: str | None = None
    help: str = ""
    live: bool = True


@dataclass(frozen=True)
class NoSettings:
    pass


@dataclass(frozen=True)
class DraftSettings:
    p_min: float = setting(0.0, 0.0, 1.0, "stop drafting below this draft probability")


@dataclass(frozen=True)
class PromptLookupSettings:
    # min_ngram 2: guesses after a lone 1-token match hold about 11% of the time on code
    # edits (Qwen2.5-Coder-1.5B); dropping them took K=4 from 0.90x to 1.10x there.
    max_ngram: int = setting(3, 1, 32, "longest n-gram to match", "max-ngram")
    min_ngram: int = setting(2, 1, 32, "shortest n-gram to match", "min-ngram")


@dataclass(frozen=True)
class NgramSettings:
    max_ngram: int = setting(4, 1, 32, "longest n-gram", "max-ngram", live=False)
    min_ngram: int = setting(1, 1, 32, "shortest n-gram", "min-ngram", live=False)
    min_count: int = setting(1, 1, 1000, "sightings a guess needs")
    min_share: float = setting(0.5, 0.0, 1.0, "share of the continuations a guess needs")


@dataclass(frozen=True)
class EarlyExitSettings:
    exit_layer: int = setting(0, 0, 256, "layers that draft (0: three quarters of them)",
                              "exit-layer")


@dataclass(frozen=True)
class TreeSettings:
    split: float = setting(0.2, 0.0, 1.0, "a second child needs this draft probability",
                           "split")
    budget: int = setting(16, 1, 256, "most nodes in a tree", "budget")


@dataclass(frozen=True)
class LookaheadSettings:
    W: int = setting(5, 1, 64, "Jacobi window width", "window")
    N: int = setting(4, 2, 16, "n-gram size", "ngram-size")
    G: int = setting(5, 0, 64, "n-grams verified per step", "guesses")


@dataclass(frozen=True)
class MedusaDraftSettings:
    budget: int = setting(0, 0, 256, "verify a candidate tree of this many nodes (0: the top "
                          "chain)", "budget")
    top_k: int = setting(4, 1, 32, "candidates per head in the tree")
    int8: int = setting(1, 0, 1, "1: the LM head the heads draft through in int8 on a CPU, "
                        "0: float32", "int8")


@dataclass(frozen=True)
class EagleDraftSettings:
    budget: int = setting(16, 1, 256, "most nodes verified in a step", "budget")
    top_k: int = setting(4, 1, 32, "children per node, and nodes expanded per depth")
    int8: int = setting(1, 0, 1, "1: int8 weights on a CPU (drafts ~3.5x faster), 0: float32",
                        "int8")


@dataclass(frozen=True)
class SuffixSettings:
    # The reference's defaults: factor 1, offset 0, least probability 0.1, and Arctic
    # Inference's depth of 64 (vLLM's is 24, which on a code edit with the 1.5B capped drafts
    # at 12 tokens after a 12-token match: 37.1 tok/s against 46.6 at 64, prompt lookup 46.5).
    max_depth: int = setting(64, 2, 128, "longest match plus draft the trees hold",
                             "max-depth", live=False)
    max_spec_factor: float = setting(1.0, 0.0, 8.0, "a match of m tokens drafts up to "
                                     "factor * m + offset", "max-spec-factor")
    max_spec_offset: float = setting(0.0, -8.0, 32.0, "added to factor * m",
                                     "max-spec-offset")
    min_token_prob: float = setting(0.1, 0.0, 1.0, "a drafted token's least share of the "
                                    "match's continuations", "min-token-prob")
    tree: int = setting(1, 0, 1, "1: a speculation tree, 0: its likeliest chain",
                        "suffix-tree")
    memory: int = setting(1, 0, 1, "1: draft from earlier runs too, and remember this one; "
                          "0: this run's text only", "suffix-remember")


@dataclass(frozen=True)
class OracleInfo:
    name: str
    summary: str
    sources: tuple[str, ...]  # what its proposals name as their source (the lane's legend)
    needs: tuple[str, ...] = ()  # of the backend, and trained heads (its inputs say the rest)
    backends: tuple[str, ...] = BOTH
    settings_type: type = NoSettings
    module: str = ""  # the module with its `build` (default: the name, - as _)
    inputs: tuple[Input, ...] = ()
    # The oracle a lane becomes where its draft model's tokenizer is not the target's (the
    # oracle's build raised IncompatibleModels), said to the person; "" the error stands.
    other_tokenizer: str = ""
    advise: Replayed | TeacherForced | HeldOut | None = None
    # Auto K may start from `specviz pair`'s acceptance of the lane's draft for its target
    # (measured token by token: a draft of the target's own vocabulary, chain or tree).
    pair_acceptance: bool = False
    # Its proposals name, in their detail, the head that guessed them: one head a position of
    # a chain or a depth of a tree (Medusa's), which the anatomy view names.
    head_per_depth: bool = False

    @property
    def plain(self) -> bool:
        return self.name == PLAIN

    @property
    def needs_draft(self) -> bool:
        return any(i.kind is MODEL and i.required for i in self.inputs)

    def input(self, name: str) -> Input | None:
        return next((i for i in self.inputs if i.name == name), None)

    @property
    def chain_settings(self) -> dict:
        """Its settings, over the defaults, that a replay of its proposals uses (suffix
        decoding's chains instead of trees): its `Replayed` advice's."""
        return dict(self.advise.settings) if isinstance(self.advise, Replayed) else {}

    def missing(self, given: Mapping[str, object]) -> Input | None:
        """The first input it requires that `given` (by input name) leaves out or empty."""
        return next((i for i in self.inputs if i.required and _empty(given.get(i.name))), None)

    def command_line(self, k: str, model: str | None = None) -> str:
        """The `specviz run` options of a lane of it: K ("auto" or a number), `model` by the
        flag of its model input (a draft's), and its backend where it runs on one only."""
        backend = f"--backend {self.backends[0]} " if len(self.backends) == 1 else ""
        takes = next((i for i in self.inputs if i.kind is MODEL), None)
        given = f" {takes.asked_with} {model}" if model and takes else ""
        return f"{backend}--oracle {self.name}{given} --k {k}"

    @property
    def from_backend(self) -> tuple[str, ...]:
        """What it needs the target's backend to provide (Backend.provides)."""
        return tuple(n for n in self.needs if n in BACKEND_CAPABILITIES)

    @property
    def builder(self) -> str:
        return self.module or self.name.replace("-", "_")

    @property
    def settings(self) -> tuple[Setting, ...]:
        return tuple(Setting(f.name, f.default, f.metadata["low"], f.metadata["high"],
                             f.metadata["flag"], f.metadata["help"], f.metadata["live"])
                     for f in fields(self.settings_type))

    def setting(self, name: str) -> Setting | None:
        return next((s for s in self.settings if s.name == name), None)

    def make_settings(self, given: dict | None = None, base=None):
        """The oracle's settings: its defaults (or `base`) with `given` over them (None values
        skipped), each cast to its field's type and checked against its range (ValueError)."""
        values = asdict(base) if base is not None else {}
        for name, value in (given or {}).items():
            if value is None:
                continue
            described = self.setting(name)
            if described is None:
                known = ", ".join(s.name for s in self.settings) or "none"
                raise ValueError(f"the {self.name} oracle has no setting {name!r} "
                                 f"(its settings: {known})")
            kind = type(described.default) if described.default is not MISSING else float
            try:
                value = kind(value)
            except (TypeError, ValueError):
                raise ValueError(f"{name} cannot be {value!r}") from None
            if not described.low <= value <= described.high:
                raise ValueError(f"{name} {value} is outside {described.low}..{described.high}")
            values[name] = value
        return self.settings_type(**values)


ORACLE_INFO: dict[str, OracleInfo] = {info.name: info for info in (
    OracleInfo(PLAIN, "nothing: plain decoding, the baseline", ()),
    OracleInfo("draft", "a smaller model with the same vocabulary", ("draft",),
               settings_type=DraftSettings, inputs=(DRAFT_MODEL,),
               other_tokenizer="cross-draft", advise=TEACHER_FORCED, pair_acceptance=True),
    OracleInfo("prompt-lookup", "spans of the prompt (and the output) the recent tokens match",
               ("prompt",), settings_type=PromptLookupSettings, advise=Replayed()),
    OracleInfo("ngram", "an n-gram cache of what was seen, optionally seeded with a corpus",
               ("ngram",), settings_type=NgramSettings, inputs=(
                   Input("ngram_corpus", CORPUS, "text file whose n-grams seed the ngram "
                         "oracle's static cache", label="n-gram corpus"),),
               advise=Replayed(note="no --ngram-corpus (a corpus of your own text can only "
                                    "add guesses)")),
    OracleInfo("rules", "named text heuristics: repeat a line, idioms, brackets, indentation",
               ("rule",), advise=Replayed()),
    OracleInfo("cross-draft", "a draft model with another tokenizer, its text re-tokenized",
               ("draft",), inputs=(
                   Input("draft", MODEL, "draft model for the cross-draft oracle (default: "
                         "{default})", flag="cross-draft", fallback="draft", required=True,
                         default="--draft", label="draft model"),)),
    OracleInfo("early-exit", "the target's first L layers (self-speculation)", ("early-exit",),
               (NEEDS_HIDDEN,), ("transformers",), EarlyExitSettings),
    OracleInfo("tree", "the draft model, branching where its second choices are likely",
               ("tree",), settings_type=TreeSettings, inputs=(DRAFT_MODEL,),
               pair_acceptance=True),
    OracleInfo("lookahead", "Jacobi/lookahead decoding with the target alone", ("lookahead",),
               settings_type=LookaheadSettings),
    OracleInfo("medusa", "heads on the target's hidden state (specviz train-heads)",
               ("medusa",), (NEEDS_HIDDEN, NEEDS_HEADS), ("transformers",),
               MedusaDraftSettings, inputs=(
                   Input("medusa_heads", HEADS, "Medusa heads folder or Hub repository for the "
                         "medusa oracle (transformers backend; default: {default})",
                         default="beside the target, as `specviz train-heads` saves them"),),
               # Each head's top-1 on held-out answers, whatever the heads before it guessed:
               # taken as its odds given theirs held (the heads' errors are not independent).
               advise=HeldOut("medusa heads", "medusa", "medusa.json", ("accuracy", "top1"),
                              format="specviz-medusa-1", int8_speedup=4.0),
               head_per_depth=True),
    OracleInfo("eagle", "an EAGLE head on the target's features, its tree grown where it is "
               "confident (specviz train-heads --kind eagle, or a published EAGLE-3 head)",
               ("eagle",), (NEEDS_HIDDEN, NEEDS_HEADS), ("transformers",),
               EagleDraftSettings, inputs=(
                   Input("eagle_head", HEADS, "EAGLE head for the eagle oracle: a folder "
                         "trained by `specviz train-heads --kind eagle` ({default}) or a "
                         "published EAGLE-3 head, as a folder or a Hub repository (org/repo)",
                         default="the default, beside the target"),),
               advise=HeldOut("eagle head", "eagle", "config.json",
                              ("specviz", "accuracy", "conditional"), per_depth=True,
                              int8_speedup=3.5, train="specviz train-heads --kind eagle")),
    OracleInfo("suffix", "suffix trees over this run's text and earlier runs' outputs "
               "(suffix decoding)", ("suffix", "memory"), settings_type=SuffixSettings,
               inputs=(
                   Input("suffix_corpus", CORPUS, "text file seeding the suffix oracle's tree "
                         "of earlier text", label="suffix corpus"),
                   Input("suffix_memory", MEMORY, "the suffix oracle's memory of earlier runs: "
                         "a file, or off (this process only); default: {default}",
                         default="the model's file in the cache")),
               advise=Replayed((("tree", 0),), (("suffix_memory", MEMORY.off),),
                               "from an empty memory (a lane also drafts from earlier runs' "
                               "outputs); chains (a lane drafts trees)")),
)}

ORACLES = tuple(ORACLE_INFO)
DRAFT_ORACLES = tuple(name for name, info in ORACLE_INFO.items() if info.needs_draft)


def head_sources() -> tuple[str, ...]:
    """The sources whose proposals name the head that guessed them, one head a depth."""
    return tuple(s for d in ORACLE_INFO.values() if d.head_per_depth for s in d.sources)


def fetched_flags() -> tuple[str, ...]:
    """The flags (without --) of the inputs whose registry or Hub names a command fetches
    before it runs, each once."""
    return tuple(dict.fromkeys(i.option for d in ORACLE_INFO.values() for i in d.inputs
                               if i.kind.fetched))


def _by_name() -> dict[str, Input]:
    """Every input by its name, as the first oracle to use the name declares it."""
    found: dict[str, Input] = {}
    for described in ORACLE_INFO.values():
        for each in described.inputs:
            found.setdefault(each.name, each)
    return found


# A lane's spec may hold any of these (a lane switched to another oracle in the window keeps
# what it was given); one name is one kind of thing (tests/test_oracle_registry.py).
INPUTS = _by_name()


@dataclass(frozen=True)
class ServerKind:
    """A lane on a serving engine, which no oracle above describes: the engine speculates and
    the lane reads its stream (engines/servers, engines/host/server_lanes.py). The window's
    oracle picker lists these after the oracles, with their words."""

    name: str  # LaneSpec.oracle
    label: str  # what the picker calls it
    summary: str
    inputs: tuple[Input, ...] = ()  # what it may read beside the target, as an oracle's

    def input(self, name: str) -> Input | None:
        return next((i for i in self.inputs if i.name == name), None)


# The sources a serving engine drafts with: how a server lane may colour its accepted drafts
# (`--server-drafts`; llama-server's draft types name theirs, engines/servers/llama_server.py).
SERVED = ("draft", "prompt", "ngram", "medusa", "eagle")

SERVER_KINDS: dict[str, ServerKind] = {kind.name: kind for kind in (
    ServerKind(SERVER, "a serving engine at a URL", "an OpenAI-compatible server (llama-server, "
               "vLLM, SGLang) whose speculation the lane shows"),
    ServerKind(SPAWNED, "llama.cpp's own speculation (llama-server)",
               "a llama-server specviz starts on 127.0.0.1 for the lane, with the run's model "
               "(a GGUF) and llama.cpp's speculation types (chained); K is the longest draft; "
               "stopped with the run", inputs=(
                   Input("draft", MODEL, "the GGUF its draft types read: a draft model or an "
                         "EAGLE-3 head", label="draft model"),)),
)}


def lane_kinds() -> tuple[str, ...]:
    """What a lane may be: an oracle of the table above as it is now, or a lane on a serving
    engine (the window's picker)."""
    return (*ORACLE_INFO, *SERVER_KINDS)


def lane_words(name: str) -> str:
    """What a lane kind is, in a line (the picker's tooltip)."""
    if name in SERVER_KINDS:
        kind = SERVER_KINDS[name]
        return f"{kind.label}: {kind.summary}"
    described = ORACLE_INFO.get(name)
    return described.summary if described else ""


def info(name: str) -> OracleInfo:
    try:
        return ORACLE_INFO[name]
    except KeyError:
        raise ValueError(f"unknown oracle {name!r}; choose one of {', '.join(ORACLES)}") from None


def is_plain(name: str) -> bool:
    return name == PLAIN


def _empty(value: object) -> bool:
    return value is None or value == ""
