"""Every oracle, described once: what it proposes from, what it needs, its settings, the
backends it runs on and the module that builds it. `make_oracle`, the command line, a lane's
settings, the lane widget, each oracle's knobs, the benchmark and the docs read this table
instead of spelling oracle names or settings out.

Adding an oracle: one module in this package with a `build(parts)` function (see
base.BuildParts) and one entry here; its settings, if any, are one dataclass below.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields

from ..backends.base import HIDDEN_STATES

PLAIN = "none"  # plain decoding: the baseline every speedup divides by
SERVER = "server"  # the oracle of a lane on a serving engine (engines/servers)

# What an oracle can need beyond the target model.
NEEDS_DRAFT = "draft model"
NEEDS_HIDDEN = HIDDEN_STATES  # a capability the backend declares (Backend.provides)
NEEDS_HEADS = "trained heads"
BACKEND_CAPABILITIES = (HIDDEN_STATES,)

BOTH = ("llama", "transformers")


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
    sources: tuple[str, ...]  # events.SOURCES its proposals carry (the lane's legend)
    needs: tuple[str, ...] = ()
    backends: tuple[str, ...] = BOTH
    settings_type: type = NoSettings
    module: str = ""  # the module with its `build` (default: the name, - as _)

    @property
    def plain(self) -> bool:
        return self.name == PLAIN

    @property
    def needs_draft(self) -> bool:
        return NEEDS_DRAFT in self.needs

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
    OracleInfo("draft", "a smaller model with the same vocabulary", ("draft",), (NEEDS_DRAFT,),
               settings_type=DraftSettings),
    OracleInfo("prompt-lookup", "spans of the prompt (and the output) the recent tokens match",
               ("prompt",), settings_type=PromptLookupSettings),
    OracleInfo("ngram", "an n-gram cache of what was seen, optionally seeded with a corpus",
               ("ngram",), settings_type=NgramSettings),
    OracleInfo("rules", "named text heuristics: repeat a line, idioms, brackets, indentation",
               ("rule",)),
    OracleInfo("cross-draft", "a draft model with another tokenizer, its text re-tokenized",
               ("draft",), (NEEDS_DRAFT,)),
    OracleInfo("early-exit", "the target's first L layers (self-speculation)", ("early-exit",),
               (NEEDS_HIDDEN,), ("transformers",), EarlyExitSettings),
    OracleInfo("tree", "the draft model, branching where its second choices are likely",
               ("tree",), (NEEDS_DRAFT,), settings_type=TreeSettings),
    OracleInfo("lookahead", "Jacobi/lookahead decoding with the target alone", ("lookahead",),
               settings_type=LookaheadSettings),
    OracleInfo("medusa", "heads on the target's hidden state (specviz train-heads)",
               ("medusa",), (NEEDS_HIDDEN, NEEDS_HEADS), ("transformers",),
               MedusaDraftSettings),
    OracleInfo("eagle", "an EAGLE head on the target's features, its tree grown where it is "
               "confident (specviz train-heads --kind eagle, or a published EAGLE-3 head)",
               ("eagle",), (NEEDS_HIDDEN, NEEDS_HEADS), ("transformers",),
               EagleDraftSettings),
    OracleInfo("suffix", "suffix trees over this run's text and earlier runs' outputs "
               "(suffix decoding)", ("suffix", "memory"), settings_type=SuffixSettings),
)}

ORACLES = tuple(ORACLE_INFO)
DRAFT_ORACLES = tuple(name for name, info in ORACLE_INFO.items() if info.needs_draft)


def info(name: str) -> OracleInfo:
    try:
        return ORACLE_INFO[name]
    except KeyError:
        raise ValueError(f"unknown oracle {name!r}; choose one of {', '.join(ORACLES)}") from None


def is_plain(name: str) -> bool:
    return name == PLAIN
