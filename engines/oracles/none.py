"""Plain decoding: proposes nothing. The measured baseline every speedup is relative to."""

from __future__ import annotations

from collections.abc import Sequence

from .base import BuildParts, Oracle, Proposal


class NoOracle(Oracle):
    name = "none"

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        return Proposal(source="draft")


def build(_parts: BuildParts) -> NoOracle:
    return NoOracle()
