"""Step events: one immutable record per verification step.

This is the spine of specviz. The session emits these records, the GUI draws them, traces
store them (one JSON object per line) and the benchmark sums them. Keep this the only
definition: anything that needs to know what happened in a step reads it from here.

A step, in the engine's terms: the oracle proposes up to K tokens; the target verifies the
pending token plus the proposal in one forward pass; the longest acceptable prefix is kept,
and the target contributes one token of its own (the correction after a rejection, or the
bonus token after a full acceptance; for plain decoding it is the only token).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .event_types import wrong_field

SCHEMA_VERSION = 1

# Why the target's own token was produced.
TARGET_PLAIN = "plain"  # plain decoding: nothing was proposed
TARGET_CORRECTION = "correction"  # replaces the first rejected proposal
TARGET_BONUS = "bonus"  # every proposal was accepted; the target adds one more

# Why a proposed token was rejected.
REJECT_MISMATCH = "mismatch"  # greedy: not the target's argmax
REJECT_SAMPLED = "sampled"  # sampling: the uniform draw exceeded min(1, p/q)
REJECT_AFTER = "after-rejection"  # came after the first rejected token, never judged
REJECT_UNREACHED = "unreached"  # tree: its parent was not accepted, so it was never judged
REJECT_NOT_EXPOSED = "not-exposed"  # a server's draft, counted but never named by the server

# A tree node's fate.
NODE_ACCEPTED = "accepted"  # on the accepted path
NODE_REJECTED = "rejected"  # judged and refused (a child of an accepted node or of the root)
NODE_UNREACHED = "unreached"  # below a refused node: scored by the target, never judged
REJECT_TYPICAL = "below-typical-threshold"  # LOSSY typical acceptance: p_target too low

# Why a step proposed nothing although its oracle speculates (a "declined" step). llama.cpp's
# n-gram drafters were found to decline on most steps of real code; the share is worth seeing.
DECLINE_NO_MATCH = "no-match"  # the oracle found nothing to propose (no match, no rule fits)
DECLINE_AUTO_K = "auto-k"  # auto K priced every draft length below a plain step
DECLINE_RULE = "oracle-rule"  # the oracle declined by a rule of its own
DECLINE_K_ZERO = "k-0"  # the lane's K was set to 0
DECLINE_END = "end"  # no room: the run's last token, or the context is full
DECLINE_END_TOKEN = "end-token"  # the guess began with an end-of-text token
DECLINE_SERVER = "server"  # a serving engine drafted nothing in this step (its own reasons)
DECLINE_IDLE = "idle"  # auto K skipped the oracle's lookup: dear, and finding nothing lately
DECLINE_WORDS = {
    DECLINE_NO_MATCH: "no match",
    DECLINE_AUTO_K: "auto K chose 0",
    DECLINE_RULE: "the oracle's own rule",
    DECLINE_K_ZERO: "K set to 0",
    DECLINE_END: "no room left",
    DECLINE_END_TOKEN: "an end token guessed",
    DECLINE_SERVER: "the server drafted nothing",
    DECLINE_IDLE: "not looked up (lookups found nothing lately)",
}


@dataclass(frozen=True, slots=True)
class Span:
    """Where a copied token came from: token and character offsets, half-open.

    `tok_*` index the context (prompt tokens followed by generated tokens). `chr_*` are
    character offsets into the rendered prompt text when the source lies inside the
    prompt, else None (copied from the model's own earlier output). A token remembered from
    an earlier run (suffix decoding's memory) names that run in `run`, indexes its output
    with `tok_*`, and carries its text around the source in `excerpt`, the source in «».
    """

    tok_start: int
    tok_end: int
    chr_start: int | None = None
    chr_end: int | None = None
    run: str | None = None
    excerpt: str | None = None


@dataclass(frozen=True, slots=True)
class ProposedToken:
    """One token an oracle proposed, and what verification made of it."""

    id: int
    text: str  # its text piece (lossy for a byte-level piece that is not valid UTF-8 alone)
    # Where it came from: one of its oracle's sources (the registry's OracleInfo.sources);
    # the views colour by it, the benchmark groups by it.
    source: str
    accepted: bool
    p_draft: float | None = None  # the oracle's probability, where it has one
    p_target: float | None = None  # the target's probability of this token at this position
    reject_reason: str | None = None  # REJECT_*, for rejected tokens
    accept_prob: float | None = None  # sampling: min(1, p/q) for the judged token
    draw: float | None = None  # sampling: the uniform draw compared with accept_prob
    span: Span | None = None  # provenance of a copied token
    detail: str | None = None  # oracle-specific label, e.g. the heuristic rule's name
    verified_by: str | None = None  # the serving engine that judged it (a server lane)


@dataclass(frozen=True, slots=True)
class TreeNode:
    """One node of a candidate tree verified in one pass (tree and lookahead oracles)."""

    parent: int  # index of the parent node; -1: the pending token (the tree's root)
    id: int
    text: str  # its text piece after its ancestors
    source: str
    state: str  # NODE_*
    p_draft: float | None = None
    p_target: float | None = None  # the target's probability of it after its parent
    reject_reason: str | None = None
    accept_prob: float | None = None
    draw: float | None = None
    detail: str | None = None
    span: Span | None = None  # provenance of a copied node (suffix decoding)


@dataclass(frozen=True, slots=True)
class Lookahead:
    """Lookahead (Jacobi) decoding's state after a step, for the view."""

    pool_size: int  # n-grams in the pool
    window: tuple[tuple[str, ...], ...]  # the Jacobi window: a row of token texts per level
    new_ngrams: int = 0  # n-grams the window added to the pool in this step


@dataclass(frozen=True, slots=True)
class ResidualToken:
    """One token of the residual a sampled correction was drawn from."""

    id: int
    text: str  # its text piece after the step's kept guesses
    p: float  # its probability in the residual, normalised
    rank: int  # 0: the residual's likeliest token


@dataclass(frozen=True, slots=True)
class Residual:
    """Sampling, after a refusal: what the correction was drawn from, norm(max(0, p_target -
    p_draft)) over the vocabulary (p_draft a point mass at the refused guess where the oracle
    has no probabilities). Only its head is kept: a vocabulary's worth would swamp a trace."""

    mass: float  # sum of max(0, p_target - p_draft) before normalising: p_target above p_draft
    # Its likeliest tokens, likeliest first; then the drawn correction where it ranks below.
    top: tuple[ResidualToken, ...] = ()


@dataclass(frozen=True, slots=True)
class TargetToken:
    """The token the target produced itself at the end of the step."""

    id: int
    text: str
    kind: str  # TARGET_PLAIN, TARGET_CORRECTION or TARGET_BONUS
    # None where the engine does not say (a server lane)
    p_target: float | None = None
    margin: float | None = None  # top-1 minus top-2 logit: small values mark near-ties
    residual: Residual | None = None  # a correction drawn after a sampled refusal (chains)


@dataclass(frozen=True, slots=True)
class Timing:
    """Milliseconds spent in this step."""

    draft_ms: float
    verify_ms: float
    other_ms: float

    @property
    def total_ms(self) -> float:
        return self.draft_ms + self.verify_ms + self.other_ms


@dataclass(frozen=True, slots=True)
class Totals:
    """Running totals after this step (everything since the start of generation)."""

    tokens: int  # tokens emitted
    steps: int  # verification steps = target forward passes while generating
    proposed: int  # tokens verified: a tree step counts every node (what the pass scored)
    accepted: int
    draft_ms: float
    verify_ms: float
    other_ms: float
    declined: int = 0  # steps in which a speculating oracle proposed nothing

    def after_step(self, proposed: int, accepted: int, timing: Timing,
                   declined: bool = False) -> Totals:
        """These totals plus one step that judged `proposed` tokens, kept `accepted` of them
        and added the target's own token."""
        return Totals(
            tokens=self.tokens + accepted + 1,
            steps=self.steps + 1,
            proposed=self.proposed + proposed,
            accepted=self.accepted + accepted,
            draft_ms=self.draft_ms + timing.draft_ms,
            verify_ms=self.verify_ms + timing.verify_ms,
            other_ms=self.other_ms + timing.other_ms,
            declined=self.declined + declined,
        )

    @property
    def compute_ms(self) -> float:
        return self.draft_ms + self.verify_ms + self.other_ms

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / proposed (None when nothing was proposed)."""
        return self.accepted / self.proposed if self.proposed else None

    @property
    def decline_rate(self) -> float:
        """Declined steps over all steps (0 for plain decoding, which never speculates)."""
        return self.declined / self.steps if self.steps else 0.0

    @property
    def mean_accepted_tokens(self) -> float:
        """Spec-Bench's figure: tokens emitted per target forward pass (1.00 for plain decoding)."""
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def tok_per_s(self) -> float:
        return self.tokens / (self.compute_ms / 1000.0) if self.compute_ms > 0 else 0.0


@dataclass(frozen=True, slots=True)
class StepEvent:
    """One verification step."""

    step: int  # 0-based
    oracle: str
    k: int  # K asked of the oracle for this step
    position: int  # context length (prompt + generated) before this step
    proposed: tuple[ProposedToken, ...]
    target: TargetToken
    text: str  # text emitted by this step (accepted proposals + target token), UTF-8 safe
    timing: Timing
    totals: Totals
    # Tree steps only (None for linear ones): every node verified, and the accepted path as
    # node indices. `proposed` then holds the path followed by the refused children of its
    # last node, so linear views draw a tree step too.
    tree: tuple[TreeNode, ...] | None = None
    path: tuple[int, ...] | None = None
    lookahead: Lookahead | None = None
    lossy: bool = False  # accepted by typical acceptance: not the target's exact distribution
    declined: str | None = None  # DECLINE_*: why a speculating oracle proposed nothing
    auto_k: bool = False  # K was chosen by auto K (--k auto), not set by the person
    # Auto K sent this draft to learn the oracle's odds, not because its estimate paid.
    explored: bool = False
    kind: str = field(default="step", init=False)

    @property
    def n_accepted(self) -> int:
        return sum(1 for t in self.proposed if t.accepted)

    @property
    def accepted(self) -> tuple[ProposedToken, ...]:
        return tuple(t for t in self.proposed if t.accepted)

    @property
    def rejected(self) -> tuple[ProposedToken, ...]:
        return tuple(t for t in self.proposed if not t.accepted)

    @property
    def emitted_ids(self) -> list[int]:
        return [t.id for t in self.accepted] + [self.target.id]

    def marked_declined(self, reason: str) -> StepEvent:
        """This step, recorded as one where the oracle proposed nothing, and why."""
        return dataclasses.replace(self, **self.declined_changes(reason))

    def declined_changes(self, reason: str) -> dict:
        """What `marked_declined` changes, for a caller that changes more at once."""
        totals = dataclasses.replace(self.totals, declined=self.totals.declined + 1)
        return {"declined": reason, "totals": totals}


def decline_reasons(steps: Iterable[StepEvent]) -> dict[str, int]:
    """How many declined steps each reason accounts for, most frequent first."""
    counts = Counter(e.declined for e in steps if e.declined)
    return dict(counts.most_common())


@dataclass(frozen=True, slots=True)
class SummaryEvent:
    """The last record of a run."""

    oracle: str
    reason: str  # eos | max-tokens | stop-string | context-full | stopped | crashed
    text: str
    totals: Totals
    prefill_ms: float
    wall_ms: float  # prompt processing + generation, as a person waits for it
    error: str | None = None
    kind: str = field(default="summary", init=False)

    @property
    def tok_per_s(self) -> float:
        return self.totals.tok_per_s


Event = StepEvent | SummaryEvent

REASON_CRASHED = "crashed"  # the engine process died; written by the window, not a session


def crashed_summary(oracle: str, steps: list[StepEvent], error: str) -> SummaryEvent:
    """The summary a run cut off by its engine's death ends its trace with: what had
    arrived (its text and totals) and the one line that says what happened."""
    totals = steps[-1].totals if steps else Totals(0, 0, 0, 0, 0.0, 0.0, 0.0)
    compute = totals.draft_ms + totals.verify_ms + totals.other_ms
    return SummaryEvent(oracle=oracle, reason=REASON_CRASHED, text="".join(e.text for e in steps),
                        totals=totals, prefill_ms=0.0, wall_ms=compute, error=error)


# ---------------------------------------------------------------- serialisation


def to_dict(event: Event) -> dict[str, Any]:
    """A plain dict of the event (JSON-ready); None-valued optional fields are dropped."""
    return _strip_none(dataclasses.asdict(event))


def to_json(event: Event) -> str:
    return json.dumps(to_dict(event), ensure_ascii=False, separators=(",", ":"))


def from_dict(data: dict[str, Any]) -> Event:
    """Rebuild an event from `to_dict` output. Raises ValueError on a malformed record: one
    that lacks a field, or holds one of another type than the event declares."""
    kind = data.get("kind")
    builders = {"step": _step_from_dict, "summary": _summary_from_dict}
    if not isinstance(kind, str) or kind not in builders:
        raise ValueError(f"unknown event kind {_shown(kind)}")
    try:
        event = builders[kind](data)
    except KeyError as exc:
        raise ValueError(f"malformed {kind} record: no {_shown(exc.args[0])} field") from None
    except (TypeError, AttributeError) as exc:  # a field of another shape
        raise ValueError(f"malformed {kind} record: {_cut(str(exc))}") from None
    wrong = wrong_field(event)
    if wrong:
        raise ValueError(f"malformed {kind} record: {wrong}")
    return event


def _shown(value: Any) -> str:
    return _cut(repr(value))


def _cut(text: str) -> str:
    return text if len(text) <= 80 else f"{text[:77]}..."


def _step_from_dict(d: dict[str, Any]) -> StepEvent:
    proposed = tuple(
        ProposedToken(**{**p, "span": Span(**p["span"]) if p.get("span") else None})
        for p in d["proposed"]
    )
    return StepEvent(
        step=d["step"],
        oracle=d["oracle"],
        k=d["k"],
        position=d["position"],
        proposed=proposed,
        target=_target_from_dict(d["target"]),
        text=d["text"],
        timing=Timing(**d["timing"]),
        totals=Totals(**d["totals"]),
        tree=tuple(TreeNode(**{**n, "span": Span(**n["span"]) if n.get("span") else None})
                   for n in d["tree"]) if d.get("tree") is not None else None,
        path=tuple(d["path"]) if d.get("path") is not None else None,
        lookahead=_lookahead_from_dict(d["lookahead"]) if d.get("lookahead") else None,
        lossy=bool(d.get("lossy", False)),
        declined=d.get("declined"),
        auto_k=bool(d.get("auto_k", False)),
        explored=bool(d.get("explored", False)),
    )


def _target_from_dict(d: dict[str, Any]) -> TargetToken:
    residual = d.get("residual")
    if residual is not None:
        residual = Residual(residual["mass"],
                            tuple(ResidualToken(**t) for t in residual.get("top", ())))
    return TargetToken(**{**d, "residual": residual})


def _lookahead_from_dict(d: dict[str, Any]) -> Lookahead:
    return Lookahead(d["pool_size"], tuple(tuple(row) for row in d["window"]),
                     d.get("new_ngrams", 0))


def _summary_from_dict(d: dict[str, Any]) -> SummaryEvent:
    fields = {k: v for k, v in d.items() if k not in ("kind", "totals")}
    return SummaryEvent(totals=Totals(**d["totals"]), **fields)


def _strip_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_strip_none(v) for v in value]
    return value
