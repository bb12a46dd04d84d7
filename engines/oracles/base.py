"""The oracle interface: something that guesses the next K tokens.

The session calls `start` once per run, then `propose` before every verification step and
`observe` after it. An oracle never touches the target's cache; oracles with a model of
their own (a draft model) keep that model's cache in step with the context themselves.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..events import Span
from ..sampling import SamplingParams


@dataclass(frozen=True)
class RunContext:
    """What an oracle may know about the run."""

    prompt_ids: tuple[int, ...]
    prompt_text: str
    token_chars: tuple[tuple[int, int], ...]  # char span of each prompt token in prompt_text
    params: SamplingParams
    rng: np.random.Generator
    eos_ids: frozenset[int] = frozenset()

    def span(self, tok_start: int, tok_end: int) -> Span:
        """Provenance of context tokens [tok_start, tok_end); chars only inside the prompt."""
        if tok_end <= len(self.token_chars):
            return Span(tok_start, tok_end, self.token_chars[tok_start][0],
                        self.token_chars[tok_end - 1][1])
        return Span(tok_start, tok_end)


@dataclass
class Proposal:
    """Up to K guessed tokens, with what the GUI and the verifier need to know about them."""

    tokens: list[int] = field(default_factory=list)
    source: str = "draft"
    q_rows: list[np.ndarray] | None = None  # the oracle's distributions (sampling), if any
    p_draft: list[float] | None = None
    spans: list[Span | None] | None = None
    details: list[str | None] | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    def cut(self, n: int) -> Proposal:
        """The first n proposals."""
        if n >= len(self.tokens):
            return self
        return Proposal(
            self.tokens[:n],
            self.source,
            None if self.q_rows is None else self.q_rows[:n],
            None if self.p_draft is None else self.p_draft[:n],
            None if self.spans is None else self.spans[:n],
            None if self.details is None else self.details[:n],
        )


class Oracle(ABC):
    """Base class; subclasses set `name` and implement `propose`."""

    name: str = ""
    source: str = "draft"

    def __init__(self) -> None:
        self.run: RunContext | None = None

    def start(self, run: RunContext) -> None:
        """A new run begins (the oracle drops any per-run state)."""
        self.run = run

    @abstractmethod
    def propose(self, context: Sequence[int], k: int) -> Proposal:
        """Guess up to k tokens that follow `context` (prompt + generated so far)."""

    def observe(self, context: Sequence[int]) -> None:
        """The context after a step (accepted tokens and the target's token appended)."""

    def match_length(self, context: Sequence[int]) -> int | None:
        """For oracles that copy: how many tokens the context's end agrees verbatim with the
        source of the next proposal (0: nothing to copy). None for oracles that do not copy.
        Cheap, called before `propose`: a long verbatim match tends to go on, so it is what a
        cost-aware K conditions on."""
        return None

    def knobs(self) -> dict[str, float | int]:
        """Oracle-specific settings the GUI may show and change between steps."""
        return {}

    def set_knob(self, name: str, value: float | int) -> None:
        if name not in self.knobs():
            raise KeyError(f"{self.name} has no setting {name!r}")
        setattr(self, name, type(self.knobs()[name])(value))

    def close(self) -> None:
        """Free what the oracle holds (a draft model)."""
