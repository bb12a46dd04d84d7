"""The oracles that copy or guess from text, predicted by replaying their own proposals:
prompt lookup, the n-gram cache, suffix decoding and the rules. Each is built from its class
with its registry defaults (no corpus for the n-gram cache; suffix decoding drafting chains,
and remembering in this process only: a replay judges a draft by its prefix that holds, and
must not write the model's suffix memory)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..backends.base import Backend
from ..oracles.base import Oracle
from ..oracles.ngram import NGramOracle
from ..oracles.prompt_lookup import PromptLookupOracle
from ..oracles.rules import RulesOracle
from ..oracles.suffix import SuffixOracle
from ..oracles.suffix_memory import SuffixMemory
from .predict import predict
from .pricing import Costs
from .replay import Drafter, Record
from .report import Candidate

COPYING = ("prompt-lookup", "ngram", "suffix", "rules")
NOTES = {
    "ngram": "no --ngram-corpus (a corpus of your own text can only add guesses)",
    "suffix": "from an empty memory (a lane also drafts from earlier runs' outputs); chains "
              "(a lane drafts trees)",
}


def build(name: str, target: Backend) -> Oracle:
    if name == "prompt-lookup":
        return PromptLookupOracle()
    if name == "ngram":
        return NGramOracle()
    if name == "suffix":
        return SuffixOracle(SuffixMemory(), tree=0)
    if name == "rules":
        return RulesOracle(target)
    raise ValueError(f"{name} is not a copying oracle ({', '.join(COPYING)})")


def candidate(name: str, target: Backend, records: Mapping[str, Sequence[Record]],
              costs: Costs) -> Candidate:
    cells = predict(records, lambda: Drafter(build(name, target)), costs,
                    eos_ids=target.eos_ids)
    return Candidate(name, name, cells=cells, note=NOTES.get(name, ""))
