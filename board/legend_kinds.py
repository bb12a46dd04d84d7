"""The token kinds a lane's legend names, from what its oracle proposes (the registry's
sources, each painted by its kind's row in kinds.py): the window's lanes and the exported page
show the same words."""

from __future__ import annotations

from ..engines.oracles import ORACLE_INFO, is_plain
from ..engines.oracles.registry import SERVER_KINDS
from .kinds import KIND_REJECTED, KIND_TARGET, kind_of

# A server (given by URL or started for the lane) names no sources: its tokens are coloured
# as a draft model's unless it says.
SERVER_SOURCES = ("draft", "ngram")


def legend_kinds(oracle: str) -> tuple[str, ...]:
    if is_plain(oracle):
        return (KIND_TARGET,)
    if oracle in SERVER_KINDS:
        known: tuple[str, ...] = SERVER_SOURCES
    else:  # a trace may name an oracle this version does not know: target and rejected only
        described = ORACLE_INFO.get(oracle)
        known = described.sources if described else ()
    return (*dict.fromkeys(kind_of(s) for s in known), KIND_TARGET, KIND_REJECTED)
