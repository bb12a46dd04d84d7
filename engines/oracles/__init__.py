"""Oracles: the things that guess the next tokens. One module each, one interface."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..backends.base import Backend
from .base import Oracle, Proposal, RunContext, SideBranch, TreeProposal

ORACLES = ("none", "draft", "prompt-lookup", "ngram", "rules", "cross-draft", "early-exit",
           "tree", "lookahead", "medusa")
DRAFT_ORACLES = ("draft", "cross-draft", "tree")  # the oracles that need a draft model


def make_oracle(
    name: str,
    *,
    target: Backend | None = None,
    draft: Backend | None = None,
    max_ngram: int | None = None,
    min_ngram: int | None = None,
    corpus_ids: Sequence[int] | None = None,
    exit_layer: int | None = None,
    knobs: dict[str, float | int] | None = None,
    heads: Path | None = None,
) -> Oracle:
    """Build an oracle by name; `draft` is the draft model's backend for the draft, cross-draft
    and tree oracles, `exit_layer` the early-exit oracle's layer count (None: its default);
    `knobs` sets oracle settings (see `Oracle.knobs`), None values ignored;
    `heads` a Medusa heads folder (default: beside the target model)."""
    oracle = _make(name, target, draft, max_ngram, min_ngram, corpus_ids, exit_layer,
                   heads)
    for knob, value in (knobs or {}).items():
        if value is not None:
            oracle.set_knob(knob, value)
    return oracle


def _make(name, target, draft, max_ngram, min_ngram, corpus_ids, exit_layer, heads) -> Oracle:
    sizes = {k: v for k, v in (("max_ngram", max_ngram), ("min_ngram", min_ngram)) if v}
    if name == "none":
        from .none import NoOracle

        return NoOracle()
    if name in ("draft", "tree"):
        from ..errors import SpecvizError

        if draft is None:
            raise SpecvizError(f"the {name} oracle needs a draft model (--draft MODEL)")
        if name == "tree":
            from .tree import TreeDraftOracle

            return TreeDraftOracle(draft, target)
        from .draft import DraftModelOracle

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
    if name == "lookahead":
        from .lookahead import LookaheadOracle

        return LookaheadOracle()
    if name == "medusa":
        from ..errors import SpecvizError
        from .medusa import MedusaOracle

        if target is None:
            raise SpecvizError("the medusa oracle needs the target model")
        return MedusaOracle(target, heads)
    raise ValueError(f"unknown oracle {name!r}; choose one of {', '.join(ORACLES)}")


__all__ = ["DRAFT_ORACLES", "ORACLES", "Oracle", "Proposal", "RunContext", "SideBranch",
           "TreeProposal", "make_oracle"]
