"""Words for tokens and verdicts, shared by the token view's tooltips and the inspector."""

from __future__ import annotations

from ..engines.events import (
    REJECT_AFTER,
    REJECT_MISMATCH,
    REJECT_SAMPLED,
    REJECT_TYPICAL,
    ProposedToken,
    Span,
    StepEvent,
    TargetToken,
)

_VISIBLE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"})


def visible(text: str) -> str:
    """Whitespace made visible; an empty piece (part of a multi-byte character) as ∅."""
    return text.translate(_VISIBLE) if text else "∅"


def prob(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def margin(value: float | None) -> str:
    return "— (not exposed)" if value is None else f"{value:.3f}"


def why(token: ProposedToken) -> str:
    """Why verification kept or dropped a proposed token."""
    if token.verified_by:
        if token.accepted:
            return f"accepted by {token.verified_by}'s own verification"
        return (f"rejected by {token.verified_by}, which counts its rejected drafts but does "
                "not say which tokens they were")
    if token.accepted:
        if token.accept_prob is None:
            return "matches the target's argmax"
        if token.draw is None:  # typical acceptance compares p_target with a threshold
            return (f"LOSSY typical acceptance: p_target {prob(token.p_target)} > "
                    f"threshold {prob(token.accept_prob)}")
        return f"draw {prob(token.draw)} ≤ min(1, p/q) = {prob(token.accept_prob)}"
    if token.reject_reason == REJECT_MISMATCH:
        return "greedy mismatch: the target's argmax differs"
    if token.reject_reason == REJECT_SAMPLED:
        return f"sampled: draw {prob(token.draw)} > min(1, p/q) = {prob(token.accept_prob)}"
    if token.reject_reason == REJECT_TYPICAL:
        return (f"LOSSY typical acceptance: p_target {prob(token.p_target)} ≤ "
                f"threshold {prob(token.accept_prob)}")
    if token.reject_reason == REJECT_AFTER:
        return "after the first rejection: never judged"
    return token.reject_reason or "rejected"


def span_text(span: Span) -> str:
    if span.run is not None:
        text = f"remembered from an earlier run ({span.run}), its token {span.tok_start}"
        return text + (f":\n{span.excerpt}" if span.excerpt else "")
    text = f"copied from tokens {span.tok_start}–{span.tok_end}"
    if span.chr_start is not None:
        text += f", prompt characters {span.chr_start}–{span.chr_end}"
    else:
        text += " (earlier output)"
    return text


def proposal_tooltip(event: StepEvent, index: int) -> str:
    token = event.proposed[index]
    verdict = "accepted" if token.accepted else "rejected"
    lines = [
        f"step {event.step} · {token.source} proposal {index + 1}/{len(event.proposed)}"
        f" · {verdict}",
        f"token {visible(token.text)!r} (id {token.id})",
        f"p_draft {prob(token.p_draft)} · p_target {prob(token.p_target)}",
        why(token),
    ]
    if token.span is not None:
        lines.append(span_text(token.span))
    if token.detail:
        lines.append(token.detail)
    return "\n".join(lines)


def target_tooltip(event: StepEvent) -> str:
    target: TargetToken = event.target
    return "\n".join([
        f"step {event.step} · target token ({target.kind})",
        f"token {visible(target.text)!r} (id {target.id})",
        f"p_target {prob(target.p_target)} · logit margin {margin(target.margin)}",
    ])
