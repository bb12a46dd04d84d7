"""Oracles: the things that guess the next tokens. One module each, one registry entry each
(registry.py), one interface (base.Oracle)."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path

from ..backends.base import Backend
from ..errors import SpecvizError
from .base import (
    AutoKHints,
    BuildParts,
    Oracle,
    Proposal,
    RunContext,
    SideBranch,
    SideRows,
    TreeProposal,
    hints_of,
)
from .registry import (
    DRAFT_ORACLES,
    ORACLE_INFO,
    ORACLES,
    PLAIN,
    OracleInfo,
    info,
    is_plain,
)


def make_oracle(
    name: str,
    *,
    target: Backend | None = None,
    draft: Backend | None = None,
    corpus_ids: Sequence[int] | None = None,
    heads: Path | None = None,
    eagle_head: Path | None = None,
    settings: dict[str, float | int | None] | None = None,
    memory=None,
) -> Oracle:
    """Build an oracle by name, from its registry entry: what it needs is checked here, then
    its module's `build` makes it. `settings` by the registry's names (None values: the
    default); a name it does not have, or a value out of range, is a ValueError."""
    described = info(name)  # an unknown name is refused here, with the known ones
    _check_needs(described, target, draft)
    module = importlib.import_module(f"{__package__}.{described.builder}")
    parts = BuildParts(target, draft, corpus_ids, heads, eagle_head,
                       {k: v for k, v in (settings or {}).items() if v is not None}, memory)
    return module.build(parts)


def _check_needs(described: OracleInfo, target: Backend | None, draft: Backend | None) -> None:
    name, wanted = described.name, set(described.from_backend)
    if target is not None and not wanted <= target.provides:
        raise SpecvizError(f"the {name} oracle runs on the {', '.join(described.backends)} "
                           f"backend (it needs {', '.join(described.needs)}); this run uses "
                           f"{target.name}: use --backend {described.backends[0]}")
    if wanted and target is None:
        raise SpecvizError(f"the {name} oracle needs the target model")
    if described.needs_draft and draft is None:
        raise SpecvizError(f"the {name} oracle needs a draft model (--draft MODEL)")


__all__ = ["DRAFT_ORACLES", "ORACLES", "ORACLE_INFO", "PLAIN", "AutoKHints", "BuildParts",
           "Oracle", "OracleInfo", "Proposal", "RunContext", "SideBranch", "SideRows",
           "TreeProposal", "hints_of", "info", "is_plain", "make_oracle"]
