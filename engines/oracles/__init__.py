"""Oracles: the things that guess the next tokens. One module each, one interface."""

from __future__ import annotations

from collections.abc import Sequence

from ..backends.base import Backend
from .base import Oracle, Proposal, RunContext

ORACLES = ("none", "draft", "prompt-lookup", "ngram", "rules", "cross-draft", "early-exit")


def make_oracle(
    name: str,
    *,
    target: Backend | None = None,
    draft: Backend | None = None,
    max_ngram: int | None = None,
    min_ngram: int | None = None,
    corpus_ids: Sequence[int] | None = None,
    exit_layer: int | None = None,
) -> Oracle:
    """Build an oracle by name; `draft` is the draft model's backend for the draft oracles,
    `exit_layer` the early-exit oracle's layer count (None: its default)."""
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
    if name == "rules":
        from .rules import RulesOracle

        return RulesOracle(target)
    if name == "cross-draft":
        from ..errors import SpecvizError
        from .cross_draft import CrossDraftOracle

        if draft is None or target is None:
            raise SpecvizError("the cross-draft oracle needs a draft model (--draft MODEL)")
        return CrossDraftOracle(draft, target)
    if name == "early-exit":
        from .early_exit import EarlyExitOracle

        return EarlyExitOracle(target, exit_layer or 0)
    raise ValueError(f"unknown oracle {name!r}; choose one of {', '.join(ORACLES)}")


__all__ = ["ORACLES", "Oracle", "Proposal", "RunContext", "make_oracle"]
