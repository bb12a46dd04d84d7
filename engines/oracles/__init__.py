"""Oracles: the things that guess the next tokens. One module each, one interface."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..backends.base import Backend
from .base import Oracle, Proposal, RunContext

ORACLES = ("none", "draft", "prompt-lookup", "ngram", "medusa")


def make_oracle(
    name: str,
    *,
    target: Backend | None = None,
    draft: Backend | None = None,
    max_ngram: int | None = None,
    min_ngram: int | None = None,
    corpus_ids: Sequence[int] | None = None,
    heads: Path | None = None,
) -> Oracle:
    """Build an oracle by name; `draft` is the draft model's backend for the draft oracle,
    `heads` a Medusa heads folder (default: beside the target model)."""
    sizes = {k: v for k, v in (("max_ngram", max_ngram), ("min_ngram", min_ngram)) if v}
    if name == "none":
        from .none import NoOracle

        return NoOracle()
    if name == "draft":
        from ..errors import SpecvizError
        from .draft import DraftModelOracle

        if draft is None:
            raise SpecvizError("the draft oracle needs a draft model (--draft MODEL)")
        return DraftModelOracle(draft, target)
    if name == "prompt-lookup":
        from .prompt_lookup import PromptLookupOracle

        return PromptLookupOracle(**sizes)
    if name == "ngram":
        from .ngram import NGramOracle

        return NGramOracle(**sizes, corpus_ids=corpus_ids)
    if name == "medusa":
        from ..errors import SpecvizError
        from .medusa import MedusaOracle

        if target is None:
            raise SpecvizError("the medusa oracle needs the target model")
        return MedusaOracle(target, heads)
    raise ValueError(f"unknown oracle {name!r}; choose one of {', '.join(ORACLES)}")


__all__ = ["ORACLES", "Oracle", "Proposal", "RunContext", "make_oracle"]
