"""Oracles: the things that guess the next tokens. One module each, one interface."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..backends.base import Backend
from .base import Oracle, Proposal, RunContext, SideBranch, TreeProposal
from .registry import DRAFT_ORACLES, ORACLE_INFO, ORACLES, PLAIN, OracleInfo, info, is_plain


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
    eagle_head: Path | None = None,
) -> Oracle:
    """Build an oracle by name; `draft` is the draft model's backend for the draft, cross-draft
    and tree oracles, `exit_layer` the early-exit oracle's layer count (None: its default);
    `knobs` sets oracle settings (see `Oracle.knobs`), None values ignored;
    `heads` a Medusa heads folder and `eagle_head` an EAGLE head's (default: beside the
    target model)."""
    described = info(name)  # an unknown name is refused here, with the known ones
    if target is not None and target.name not in described.backends:
        from ..errors import SpecvizError

        raise SpecvizError(f"the {name} oracle runs on the {', '.join(described.backends)} "
                           f"backend (it needs {', '.join(described.needs)}); this run uses "
                           f"{target.name}: use --backend {described.backends[0]}")
    oracle = _make(name, target, draft, max_ngram, min_ngram, corpus_ids, exit_layer,
                   heads, eagle_head)
    for knob, value in (knobs or {}).items():
        if value is not None:
            oracle.set_knob(knob, value)
    return oracle


def _make(name, target, draft, max_ngram, min_ngram, corpus_ids, exit_layer, heads,
          eagle_head) -> Oracle:
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
    if name == "eagle":
        from ..errors import SpecvizError
        from .eagle import EagleOracle

        if target is None:
            raise SpecvizError("the eagle oracle needs the target model")
        return EagleOracle(target, eagle_head)
    raise ValueError(f"unknown oracle {name!r}; choose one of {', '.join(ORACLES)}")


__all__ = ["DRAFT_ORACLES", "ORACLES", "ORACLE_INFO", "PLAIN", "Oracle", "OracleInfo",
           "Proposal", "RunContext", "SideBranch", "TreeProposal", "info", "is_plain",
           "make_oracle"]
