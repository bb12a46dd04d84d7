"""The oracle interface: something that guesses the next K tokens.

The session calls `start` once per run, then `propose` before every verification step and
`observe` after it. An oracle never touches the target's cache; oracles with a model of
their own (a draft model) keep that model's cache in step with the context themselves.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..backends.base import Backend
from ..events import Lookahead, Span
from ..sampling import SamplingParams
from .registry import ORACLE_INFO, HeldOut, OracleInfo


@dataclass(frozen=True)
class RunContext:
    """What an oracle may know about the run."""

    prompt_ids: tuple[int, ...]
    prompt_text: str
    token_chars: tuple[tuple[int, int], ...]  # char span of each prompt token in prompt_text
    params: SamplingParams
    rng: np.random.Generator
    eos_ids: frozenset[int] = frozenset()
    token_text: Callable[[int], str] | None = None  # a token's text, for oracles' views

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
    declined: str | None = None  # events.DECLINE_*: why nothing was proposed, if so

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


@dataclass
class SideBranch:
    """Rows an oracle adds to the verification pass for its own use (lookahead's Jacobi
    window): scored by the target, never verified nor kept in its cache.

    Node i sits depths[i] positions after the pending token and sees the context, the
    pending token, itself and the side nodes in visible[i].
    """

    tokens: list[int]
    depths: list[int]
    visible: list[list[int]]


@dataclass
class TreeProposal:
    """Candidate continuations sharing prefixes: node i follows parents[i] (-1: the pending
    token). Children are tried in order. Verified as a tree in one forward pass."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    source: str = "tree"
    q_rows: list[np.ndarray | None] | None = None  # what node i was drawn from, if sampled
    p_draft: list[float | None] | None = None
    details: list[str | None] | None = None
    side: SideBranch | None = None
    declined: str | None = None  # events.DECLINE_*: why no node was proposed, if so
    spans: list[Span | None] | None = None  # where a copied node came from
    sources: list[str] | None = None  # node i's source where they differ (else `source`)

    def __len__(self) -> int:
        return len(self.tokens)

    def depth(self, i: int) -> int:
        d = 1
        while self.parents[i] >= 0:
            i, d = self.parents[i], d + 1
        return d

    def pruned(self, max_depth: int, stop_ids: frozenset[int],
               drop: frozenset[int] = frozenset()) -> TreeProposal:
        """Without nodes deeper than max_depth, stop tokens, the nodes `drop` names (by
        index), and whatever hangs below them."""
        keep: dict[int, int] = {}  # old index -> new index
        for i, (tok, parent) in enumerate(zip(self.tokens, self.parents)):
            if tok in stop_ids or i in drop or self.depth(i) > max_depth or (
                    parent >= 0 and parent not in keep):
                continue
            keep[i] = len(keep)
        if len(keep) == len(self.tokens):
            return self
        pick = list(keep)

        def sub(values):
            return None if values is None else [values[i] for i in pick]

        parents = [keep[self.parents[i]] if self.parents[i] >= 0 else -1 for i in pick]
        return TreeProposal([self.tokens[i] for i in pick], parents, self.source,
                            sub(self.q_rows), sub(self.p_draft), sub(self.details), self.side,
                            self.declined, sub(self.spans), sub(self.sources))

    def source_of(self, i: int) -> str:
        return self.sources[i] if self.sources else self.source


@dataclass(frozen=True)
class BuildParts:
    """What building an oracle may use: the target, the oracle's inputs as the run builder
    made them and its settings, both by the registry's names. An input is what its kind
    (registry.InputKind) says: a model's Backend, a heads folder's Path, a corpus's tokens, a
    memory file's Path or "off"; one the lane did not give is absent."""

    target: Backend | None = None
    inputs: dict[str, Any] = field(default_factory=dict)
    settings: dict = field(default_factory=dict)


class Oracle(ABC):
    """What the session loop drives: `start` once per run, `propose` before each verification
    step, `observe` after it, `close` at the end. Subclasses set `name` (their registry entry,
    where their settings are declared) and implement `propose`.

    Auto K's hooks are an opt-in (AutoKHints); a lookahead-style oracle's side rows another
    (SideRows). The settings the registry declares for the oracle are `self.settings`, one
    frozen dataclass; the live ones are its knobs."""

    name: str = ""
    source: str = "draft"

    def __init__(self, **settings) -> None:
        self.run: RunContext | None = None
        self.settings = _described(self.name).make_settings(settings)

    def start(self, run: RunContext) -> None:
        """A new run begins (the oracle drops any per-run state)."""
        self.run = run

    @abstractmethod
    def propose(self, context: Sequence[int], k: int) -> Proposal | TreeProposal:
        """Guess up to k tokens that follow `context` (prompt + generated so far); a tree
        oracle returns a TreeProposal k deep at most."""

    def observe(self, context: Sequence[int]) -> None:
        """The context after a step (accepted tokens and the target's token appended)."""

    def finish(self, context: Sequence[int]) -> None:
        """The run ended with this context (prompt and output): an oracle that learns across
        runs takes it in here."""

    def notice(self) -> str | None:
        """What the person should know that arose since it was last asked (a memory that
        could not be saved), in one line; each said once."""
        return None

    def tree_nodes(self) -> int:
        """The most nodes (side rows included) one of its tree proposals holds; 0: linear.
        The session lets the target get ready for batches that wide."""
        return 0

    def tree_depth(self) -> int:
        """The most drafted tokens on one branch of its proposals (what one step can accept
        before the target's own token); 0: as many as K asks for."""
        return self.tree_nodes()

    def measured_accept(self) -> list[float] | None:
        """Each draft position's acceptance measured before the run, given the positions
        before it held: what its trained heads' config recorded on held-out answers (the
        registry says where, `HeldOut`), from which auto K's odds start. None: not measured."""
        way = _described(self.name).advise
        config = self.heads_config()
        if not isinstance(way, HeldOut) or config is None:
            return None
        return way.acceptance(config) or None

    def heads_config(self) -> Mapping | None:
        """The trained heads' config as saved (None: the oracle has none)."""
        return None

    def close(self) -> None:
        """Undo what the oracle set on the models it was given (a hook on the target). The
        models are their lender's to close: a lane's pool lends its draft to the next run."""

    # ------------------------------------------------------------ settings

    def knobs(self) -> dict[str, float | int]:
        """The live settings (the registry's), which the window may change between steps."""
        return {s.name: getattr(self.settings, s.name)
                for s in _described(self.name).settings if s.live}

    def set_knob(self, name: str, value: float | int) -> None:
        """Change a live setting; out of range or refused by the oracle: ValueError (or the
        oracle's SpecvizError), the setting left as it was."""
        if name not in self.knobs():
            raise KeyError(f"{self.name} has no setting {name!r}")
        old = self.settings
        self.settings = _described(self.name).make_settings({name: value}, base=old)
        try:
            self.settings_changed(old)
        except Exception:
            self.settings = old
            raise

    def settings_changed(self, old) -> None:
        """A knob moved (`self.settings` holds the new values): rebuild what depends on it,
        or raise to refuse it."""


class AutoKHints:
    """Opt-in: what an oracle tells auto K (engines.cost.auto_k) beyond its proposals. An
    oracle that does not inherit this gets these defaults."""

    # How fast auto K forgets what it learnt about this oracle's guesses (see
    # auto_k.Acceptance): 0 keeps all evidence, for guesses whose odds its keys capture.
    evidence_decay: float = 0.0
    # The expected gain over a plain step auto K asks for before it speculates (0.1: 10%).
    min_gain: float = 0.0
    # ms a verification of (rows, at context length) would take now, the step's fixed costs
    # included. A tree oracle that knows its nodes' odds cuts its tree where expected tokens
    # per ms peak; None (a fixed K): it sends its whole budget.
    price: Callable[[int, int], float] | None = None
    # A tree oracle whose trees hold at most K nodes (suffix decoding): a step of draft
    # length K verifies K + 1 rows, as a linear draft's does.
    nodes_within_k: bool = False

    def price_with(self, price: Callable[[int, int], float] | None) -> None:
        """Auto K's prices for a verification of n rows (see `price`)."""
        self.price = price

    def match_length(self, context: Sequence[int]) -> int | None:
        """For oracles that copy: how many tokens the context's end agrees verbatim with the
        source of the next proposal (0: nothing to copy). None for oracles that do not copy.
        Cheap, called before `propose`: a long verbatim match tends to go on, so it is what a
        cost-aware K conditions on."""
        return None

    def draft_limit(self, length: int) -> int | None:
        """The longest draft auto K sends after a match of `length` (None: up to its K)."""
        return None

    def shadow_draft(self, context: Sequence[int], k: int) -> Sequence[int] | None:
        """The draft of up to k tokens this oracle would have sent, at a step auto K ran
        plain, without changing the oracle's state: auto K judges it against the tokens the
        run goes on to emit, as it judges a draft it sent (None: not judged so)."""
        return None

    def match_prior(self, length: int) -> float:
        """Before any evidence: the chance that a guess extending a match of `length` holds.
        Laplace's rule of succession, (m+1)/(m+2), unless the oracle knows better (the
        copying oracles: verbatim.CopyingOracle)."""
        return (length + 1) / (length + 2)


NO_HINTS = AutoKHints()


def hints_of(oracle: Oracle) -> AutoKHints:
    """The oracle's hints to auto K, or the defaults where it gives none."""
    return oracle if isinstance(oracle, AutoKHints) else NO_HINTS


class SideRows(ABC):
    """Opt-in: an oracle whose tree proposals carry a side branch (TreeProposal.side) gets the
    target's logits for those rows, and shows its state in the window (lookahead's pool and
    window)."""

    @abstractmethod
    def side_logits(self, logits: np.ndarray) -> None:
        """The target's logits for the rows of the last proposal's side branch."""

    def lookahead_state(self) -> Lookahead | None:
        """Lookahead decoding's pool and window after the last step, for the view."""
        return None


def _described(name: str) -> OracleInfo:
    # An oracle outside the registry (a test's) has no settings.
    return ORACLE_INFO.get(name) or OracleInfo(name, "", ())
