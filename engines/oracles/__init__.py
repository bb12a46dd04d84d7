"""Oracles: the things that guess the next tokens. One module each, one registry entry each
(registry.py), one interface (base.Oracle)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

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
    INPUTS,
    MODEL,
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
    settings: dict[str, float | int | None] | None = None,
    **inputs: Any,
) -> Oracle:
    """Build an oracle by name, from its registry entry: what it needs is checked here, then
    its module's `build` makes it. `settings` and `inputs` (draft=Backend, ngram_corpus=token
    ids, eagle_head=Path, ...: what registry.InputKind says each kind is) by the registry's
    names; None values are left out (the oracle's defaults), inputs the oracle does not read
    are ignored. A setting it does not have, or a value out of range, is a ValueError, and so
    is an input no oracle has."""
    described = info(name)  # an unknown name is refused here, with the known ones
    unknown = sorted(set(inputs) - set(INPUTS))
    if unknown:
        raise ValueError(f"no oracle has an input {unknown[0]!r} (the inputs: "
                         f"{', '.join(INPUTS)})")
    given = {i.name: inputs[i.name] for i in described.inputs
             if inputs.get(i.name) is not None}
    _check_needs(described, target, given)
    module = importlib.import_module(f"{__package__}.{described.builder}")
    parts = BuildParts(target, given,
                       {k: v for k, v in (settings or {}).items() if v is not None})
    return module.build(parts)


def _check_needs(described: OracleInfo, target: Backend | None, given: dict) -> None:
    name, wanted = described.name, set(described.from_backend)
    if target is not None and not wanted <= target.provides:
        raise SpecvizError(f"the {name} oracle runs on the {', '.join(described.backends)} "
                           f"backend (it needs {', '.join(described.needs)}); this run uses "
                           f"{target.name}: use --backend {described.backends[0]}")
    if wanted and target is None:
        raise SpecvizError(f"the {name} oracle needs the target model")
    check_inputs(described, given)


def check_inputs(described: OracleInfo, given: Mapping[str, object]) -> None:
    """One line naming the first input the oracle requires that `given` (by input name) has
    not: a lane's inputs before anything loads, or what the run builder made of them."""
    missing = described.missing(given)
    if missing is None:
        return
    picker = "; in the window: pick one in the lane" if missing.kind is MODEL else ""
    raise SpecvizError(f"the {described.name} oracle needs {missing.asked_with} "
                       f"{missing.kind.name.upper()} (its {missing.said}{picker})")


__all__ = ["DRAFT_ORACLES", "INPUTS", "ORACLES", "ORACLE_INFO", "PLAIN", "AutoKHints", "BuildParts",
           "Oracle", "OracleInfo", "Proposal", "RunContext", "SideBranch", "SideRows",
           "TreeProposal", "check_inputs", "hints_of", "info", "is_plain", "make_oracle"]
