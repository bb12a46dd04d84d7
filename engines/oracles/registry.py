"""Every oracle, described once: what it needs, what it proposes from, its settings, the
backends it runs on. `make_oracle`, the command line, the lane widget, the benchmark and the
docs read this table instead of spelling oracle names out.
"""

from __future__ import annotations

from dataclasses import dataclass

PLAIN = "none"  # plain decoding: the baseline every speedup divides by
SERVER = "server"  # the oracle of a lane on a serving engine (engines/servers)

# What an oracle can need beyond the target model.
NEEDS_DRAFT = "draft model"
NEEDS_HIDDEN = "hidden states"
NEEDS_HEADS = "trained heads"

BOTH = ("llama", "transformers")


@dataclass(frozen=True)
class Setting:
    """One of an oracle's settings. A live one is taken at its next proposal, mid-run (see
    Oracle.knobs); the others are fixed when it is built."""

    name: str
    default: float | int
    low: float | int
    high: float | int
    flag: str | None = None  # the command line's option (without --), if it has one
    help: str = ""
    live: bool = True


@dataclass(frozen=True)
class OracleInfo:
    name: str
    summary: str
    sources: tuple[str, ...]  # events.SOURCES its proposals carry (the lane's legend)
    needs: tuple[str, ...] = ()
    backends: tuple[str, ...] = BOTH
    settings: tuple[Setting, ...] = ()

    @property
    def plain(self) -> bool:
        return self.name == PLAIN

    @property
    def needs_draft(self) -> bool:
        return NEEDS_DRAFT in self.needs

    def setting(self, name: str) -> Setting | None:
        return next((s for s in self.settings if s.name == name), None)


_NGRAM_SIZES = (Setting("max_ngram", 3, 1, 32, "max-ngram", "longest n-gram to match"),
                Setting("min_ngram", 2, 1, 32, "min-ngram", "shortest n-gram to match"))

ORACLE_INFO: dict[str, OracleInfo] = {info.name: info for info in (
    OracleInfo(PLAIN, "nothing: plain decoding, the baseline", ()),
    OracleInfo("draft", "a smaller model with the same vocabulary", ("draft",), (NEEDS_DRAFT,),
               settings=(Setting("p_min", 0.0, 0.0, 1.0, None,
                                 "stop drafting below this draft probability"),)),
    OracleInfo("prompt-lookup", "spans of the prompt (and the output) the recent tokens match",
               ("prompt",), settings=_NGRAM_SIZES),
    OracleInfo("ngram", "an n-gram cache of what was seen, optionally seeded with a corpus",
               ("ngram",),
               settings=(Setting("max_ngram", 4, 1, 32, "max-ngram", "longest n-gram", False),
                         Setting("min_ngram", 1, 1, 32, "min-ngram", "shortest n-gram", False),
                         Setting("min_count", 1, 1, 1000, None, "sightings a guess needs"),
                         Setting("min_share", 0.5, 0.0, 1.0, None,
                                 "share of the continuations a guess needs"))),
    OracleInfo("rules", "named text heuristics: repeat a line, idioms, brackets, indentation",
               ("rule",)),
    OracleInfo("cross-draft", "a draft model with another tokenizer, its text re-tokenized",
               ("draft",), (NEEDS_DRAFT,)),
    OracleInfo("early-exit", "the target's first L layers (self-speculation)", ("early-exit",),
               (NEEDS_HIDDEN,), ("transformers",),
               (Setting("exit_layer", 0, 0, 256, "exit-layer",
                        "layers that draft (0: three quarters of them)"),)),
    OracleInfo("tree", "the draft model, branching where its second choices are likely",
               ("tree",), (NEEDS_DRAFT,),
               settings=(Setting("split", 0.2, 0.0, 1.0, "split",
                                 "a second child needs this draft probability"),
                         Setting("budget", 16, 1, 256, "budget", "most nodes in a tree"))),
    OracleInfo("lookahead", "Jacobi/lookahead decoding with the target alone", ("lookahead",),
               settings=(Setting("W", 5, 1, 64, "window", "Jacobi window width"),
                         Setting("N", 4, 2, 16, "ngram-size", "n-gram size"),
                         Setting("G", 5, 0, 64, "guesses", "n-grams verified per step"))),
    OracleInfo("medusa", "heads on the target's hidden state (specviz train-heads)",
               ("medusa",), (NEEDS_HIDDEN, NEEDS_HEADS), ("transformers",),
               (Setting("budget", 0, 0, 256, "budget",
                        "verify a candidate tree of this many nodes (0: the top chain)"),
                Setting("top_k", 4, 1, 32, None, "candidates per head in the tree"),
                Setting("int8", 1, 0, 1, "int8",
                        "1: the LM head the heads draft through in int8 on a CPU, 0: float32"))),
    OracleInfo("eagle", "an EAGLE head on the target's features, its tree grown where it is "
               "confident (specviz train-heads --kind eagle, or a published EAGLE-3 head)",
               ("eagle",), (NEEDS_HIDDEN, NEEDS_HEADS), ("transformers",),
               (Setting("budget", 16, 1, 256, "budget", "most nodes verified in a step"),
                Setting("top_k", 4, 1, 32, None,
                        "children per node, and nodes expanded per depth"),
                Setting("int8", 1, 0, 1, "int8",
                        "1: int8 weights on a CPU (drafts ~3.5x faster), 0: float32"))),
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
